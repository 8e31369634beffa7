"""Gradient caching: peak memory and time of one training step at large global batches, with and without caching.

Run: ``OMP_NUM_THREADS=1 python benchmarks/large_batch.py [--models demo cnn14] [--batch-sizes 64 256 1024 4096]
[--chunk-size 64] [--objectives contrastive iot ...] [--device cpu|cuda]``.

One step = the forward of every clip and caption, the objective on the whole batch, and the backward
(``AtrTrainer``'s step without the optimizer, whose state does not depend on the batch):

- **whole batch**: ``model(**batch)`` → objective → ``loss.backward()``;
- **cached**: :func:`hf_atr.training.grad_cache.cached_embedding_backward` with ``--chunk-size`` clips per
  chunk, each chunk moved to the device when it is encoded (``embedding_chunk_size`` of the trainer).

The batch is built in host memory first (random features and token ids of the model's shapes), outside the
measurement: on a GPU it stays there and only chunks travel. Peak memory is the peak of the tensor storage the step
allocates on the device beyond what was live before it (parameters, and on the CPU the host batch, excluded;
gradients included): on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before, on the CPU
:class:`LiveTensorBytes`, a dispatch mode that follows every storage an operator creates until it is freed
(tracemalloc for tensors; torch's own ``MemTracker`` cannot follow a module called once per chunk). Neither
counts allocator caching or fragmentation. Times are wall clock of a separate,
untracked step (one warm-up step first), best of ``--repeats``.

For each model and objective the script also measures the objective alone on leaf embeddings of the batch (its
``batch × batch`` buffers: similarities, logits, soft-max, transport plans, and their gradients) and prints the
memory target of gradient caching: with caching, ``peak(B) − peak(smallest B)`` should be at most the objective's own increase
plus 10 %.

Models: ``demo`` (the ``make demo`` AST + BERT, hidden 64, 2-s clips), ``cnn14`` (PANNs CNN14 at 32 kHz,
80 M parameters, with the demo's text tower; ``--cnn14-seconds`` of audio), ``clap`` (``laion/clap-htsat-unfused``
sizes, random init: HTS-AT + RoBERTa-base, 10-s clips at 48 kHz; for ``--device cuda``).
"""

from __future__ import annotations

import argparse
import gc
import time
import weakref
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import ClapAudioConfig, ClapTextConfig

from hf_atr import AtrConfig, AtrDualEncoderModel
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.objectives.batch import group_caption_embeds
from hf_atr.objectives.registry import available_objectives, build_objective
from hf_atr.training.grad_cache import cached_embedding_backward, split_batch

VOCAB_SIZE = 1000
CAPTION_TOKENS = 16
CAPTIONS_PER_CLIP = {"kcl": 3, "cacl": 2}


def build_model(name: str, objective: str, cnn14_seconds: float) -> tuple[AtrDualEncoderModel, Callable]:
    """The model and a function ``batch_size -> host batch of model inputs``."""
    torch.manual_seed(0)
    if name == "demo":
        extractor = tiny_feature_extractor()
        config = tiny_model_config(extractor, VOCAB_SIZE, objective={"name": objective})
        frames, bins = extractor.max_length, extractor.num_mel_bins
        audio = lambda batch: {"input_values": torch.randn(batch, frames, bins)}  # noqa: E731
    elif name == "cnn14":
        demo = tiny_model_config(tiny_feature_extractor(), VOCAB_SIZE)
        config = AtrConfig(
            audio_config=PannsConfig(),
            text_config=demo.text_config,
            projection_dim=64,
            objective={"name": objective},
        )
        frames = int(cnn14_seconds * 100) + 1  # 32 kHz, hop 320
        audio = lambda batch: {"input_features": torch.randn(batch, frames, 64)}  # noqa: E731
    elif name == "clap":
        config = AtrConfig(
            audio_config=ClapAudioConfig(),
            text_config=ClapTextConfig(),
            projection_dim=512,
            projection="mlp",
            audio_pooling="pooler",
            text_pooling="pooler",
            objective={"name": objective},
        )
        audio = lambda batch: {  # noqa: E731
            "input_features": torch.randn(batch, 1, 1001, 64),
            "is_longer": torch.zeros(batch, 1, dtype=torch.bool),
        }
    else:
        raise ValueError(f"Unknown model {name!r}.")
    model = AtrDualEncoderModel(config).train()
    captions = CAPTIONS_PER_CLIP.get(objective, 1)

    def host_batch(batch: int) -> dict:
        rows = batch * captions
        return {
            **audio(batch),
            "input_ids": torch.randint(5, VOCAB_SIZE, (rows, CAPTION_TOKENS)),
            "attention_mask": torch.ones(rows, CAPTION_TOKENS, dtype=torch.long),
        }

    return model, host_batch


def metadata(objective: str, batch: int, device: torch.device) -> dict:
    captions = CAPTIONS_PER_CLIP.get(objective, 1)
    data = {"audio_ids": [str(row) for row in range(batch)]}
    if captions > 1:
        data["captions_per_audio"] = captions
        data["language_mask"] = torch.ones(batch, captions, dtype=torch.bool, device=device)
    return data


def make_objective(name: str, dim: int):
    objective = build_objective({"name": name, **({"num_prototypes": 64} if name == "ask" else {})})
    if name == "ask":
        generator = torch.Generator().manual_seed(0)
        pairs = torch.randn(2, 4096, dim, generator=generator)
        objective.knowledge_base = KnowledgeBase.from_embeddings(
            pairs[0], pairs[1], audio_ids=[f"base{index}" for index in range(4096)], num_prototypes=64
        )
    return objective.train()


def train_step(model, objective, host_batch: dict, meta: dict, chunk_size: int | None, device) -> None:
    """One step's forward, objective and backward, from gradients set to None (what ``zero_grad`` leaves)."""
    model.zero_grad(set_to_none=True)

    def embed(chunk: dict) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = model(**{key: value.to(device, non_blocking=True) for key, value in chunk.items()})
        return outputs.audio_embeds, outputs.text_embeds

    def objective_loss(audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        text = group_caption_embeds(text, audio.shape[0], meta)
        return objective(audio, text, batch=meta, model=model).loss

    if chunk_size is None:
        objective_loss(*embed(host_batch)).backward()
        return

    def objective_backward(audio: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        loss = objective_loss(audio, text)
        loss.backward()
        return loss.detach()

    captions = meta.get("captions_per_audio", 1)
    chunks = split_batch(host_batch, chunk_size, captions)
    cached_embedding_backward(embed, chunks, objective_backward, model=model, devices=[device])


def objective_alone(model, objective, batch: int, meta: dict, device) -> None:
    dim = model.config.projection_dim
    captions = meta.get("captions_per_audio", 1)
    audio = F.normalize(torch.randn(batch, dim, device=device), dim=-1).requires_grad_()
    text = F.normalize(torch.randn(batch * captions, dim, device=device), dim=-1).requires_grad_()
    text_rows = group_caption_embeds(text, batch, meta)
    objective(audio, text_rows, batch=meta, model=model).loss.backward()


class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of the tensor storages created while active and still alive (tracemalloc for tensors).

    Every operator output on ``device`` whose storage is none of the op's inputs' (not a view, not in place)
    counts once, from the op that created it until it is freed (torch keeps one Python object per storage, so a weak reference sees it
    die). Storages that existed before (parameters, the host batch) are not counted.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.current = 0
        self.peak = 0
        self._live: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        # Views and in-place results live in an input's storage: only storages the op created are new.
        inputs = {
            value.untyped_storage()._cdata
            for value in tree_flatten((args, kwargs))[0]
            if isinstance(value, torch.Tensor)
        }
        for value in tree_flatten(output)[0]:
            if isinstance(value, torch.Tensor) and value.device == self.device:
                storage = value.untyped_storage()
                if storage._cdata not in inputs:
                    self._count(storage)
        return output

    def _count(self, storage: torch.UntypedStorage) -> None:
        key = storage._cdata
        if key in self._live:
            return
        size = storage.nbytes()
        self._live.add(key)
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._release, key, size)

    def _release(self, key: int, size: int) -> None:
        self._live.discard(key)
        self.current -= size


def peak_bytes(run: Callable[[], None], device: torch.device) -> int:
    """Peak of the tensor memory ``run`` allocates on ``device`` beyond what was allocated before it."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with LiveTensorBytes(device) as tracker:
        run()
    return tracker.peak


def seconds(run: Callable[[], None], device: torch.device, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - started)
    return best


def mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def measure(model_name: str, objective_name: str, sizes: list[int], args: argparse.Namespace, device) -> None:
    """Print one table: every batch size, both modes, and the objective alone."""
    model, host_batch = build_model(model_name, objective_name, args.cnn14_seconds)
    model.to(device)
    objective = make_objective(objective_name, model.config.projection_dim).to(device)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    print(f"\n{model_name} ({parameters / 1e6:.1f} M parameters), {objective_name}")
    print(
        "| batch | objective alone: peak | whole batch: peak | time (s) | cached: peak | time (s) | "
        "cached Δpeak vs smallest | objective Δpeak | target ≤ 1.1 × |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    first: dict = {}
    for batch in sizes:
        meta = metadata(objective_name, batch, device)
        inputs = host_batch(batch)
        row: dict = {
            "objective": peak_bytes(partial(objective_alone, model, objective, batch, meta, device), device)
        }
        for mode, chunk in (("whole", None), ("cached", args.chunk_size)):
            if mode == "whole" and args.max_whole_batch is not None and batch > args.max_whole_batch:
                row[mode] = None
                continue

            step = partial(train_step, model, objective, inputs, meta, chunk, device)
            if not first:
                step()  # warm-up
            row[f"{mode}_time"] = seconds(step, device, args.repeats)
            row[mode] = peak_bytes(step, device)
        first = first or row
        cached_growth = row["cached"] - first["cached"]
        objective_growth = row["objective"] - first["objective"]
        met = "—" if batch == sizes[0] else ("met" if cached_growth <= 1.1 * objective_growth else "NOT met")
        whole = (
            f"{mib(row['whole'])} | {row['whole_time']:.2f}" if row["whole"] is not None else "skipped | —"
        )
        print(
            f"| {batch} | {mib(row['objective'])} | {whole} | {mib(row['cached'])} | {row['cached_time']:.2f} | "
            f"{mib(cached_growth)} | {mib(objective_growth)} | {met} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["demo", "cnn14"], choices=["demo", "cnn14", "clap"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 256, 1024, 4096])
    parser.add_argument(
        "--cnn14-batch-sizes", nargs="+", type=int, help="Batch sizes for cnn14 (default: --batch-sizes)."
    )
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--cnn14-seconds", type=float, default=10.0)
    parser.add_argument(
        "--objectives", nargs="+", default=["contrastive"], help=f"Any of {available_objectives()} or 'all'."
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--max-whole-batch", type=int, default=None, help="Skip whole-batch steps above this batch size."
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    objectives = available_objectives() if args.objectives == ["all"] else args.objectives
    print(
        f"device {device}, chunk {args.chunk_size} clips, threads {torch.get_num_threads()}; peak = tensor "
        "storage allocated by the step beyond what was live before it (gradients included); MiB"
    )
    for model_name in args.models:
        sizes = (
            args.cnn14_batch_sizes if model_name == "cnn14" and args.cnn14_batch_sizes else args.batch_sizes
        )
        for objective_name in objectives:
            measure(model_name, objective_name, sizes, args, device)
            gc.collect()


if __name__ == "__main__":
    main()
