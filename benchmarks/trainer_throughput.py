"""AtrTrainer end to end against the raw training step of the same model.

Two parts, side by side in one run:

1. **Collate** (always CLAP size): the whole collate of ``AtrTrainer``'s own train dataloader (read the rows,
   stack the ``(1, 1001, 64)`` float32 features, tokenise the captions with a RoBERTa-size byte-level BPE tokenizer
   of 50,265 tokens built here, offline) in one process (``dataloader_num_workers=0``), in rows per second, for
   features stored as nested lists (what ``Dataset.map`` wrote before hf-atr stored them as arrays) and as ``Array3D`` (what
   ``AtrProcessor.extract_audio_features`` writes now). The first row reads the nested lists row by row, as the
   training dataloader did before; the ``Array3D`` rows compare the first one-gather reader
   (``datasets``' Arrow gather, one slice per row) with the trainer's own (NumPy views of the memory-mapped
   column, :class:`hf_atr.data.feature_storage.MappedColumns`); ratios are to the first row, measured in the same
   run. A last table times tokenising one batch into torch tensors both ways.
2. **Training**: ``AtrTrainer`` steps against the raw step of the same model, objective (the model's), AdamW
   optimizer (the Trainer's defaults), ``max_grad_norm`` and precision, on one batch already on the device; for
   precomputed features (``extract_audio_features``, saved and loaded back) and for raw audio with on-device
   features (``audio_features="device"``: the waveform collator in the workers, the batched features on the
   device, counted in the raw step too, and computed there outside autocast, as the trainer computes them). The
   trainer runs with ``logging_nan_inf_filter=False``, as ``hf-atr train`` sets it. Printed as ms per step, pairs/s,
   model FLOPs utilisation (MFU: the forward and backward FLOPs of the model and objective, counted once with
   ``torch.utils.flop_counter.FlopCounterMode``, per second, over the device's bf16 dense peak: H100 and H200 989,
   A100 312, L4 121 TFLOP/s, or ``--peak-tflops``) and the trainer's share of the raw step: the median of
   ``--steps`` steps (default 20) after the first two (a trainer step is the time between two step ends, so it
   includes the wait for its batch). ``--compile`` adds, per row, the same two compiled: ``AtrTrainer`` with
   ``TrainingArguments(torch_compile=True)`` (inductor) and the raw step through ``torch.compile(model)``, with the
   first step's seconds (the compilation). On CUDA, every timed interval ends with ``torch.cuda.synchronize``.

    OMP_NUM_THREADS=1 python benchmarks/trainer_throughput.py                         # CPU, tiny model
    python benchmarks/trainer_throughput.py --device cuda --model clap --batch-size 256 --bf16 --workers 8 --compile

``--model clap`` is a random-init CLAP at ``laion/clap-htsat-unfused``'s sizes (HTS-AT + RoBERTa-base) on 10-s
clips at 48 kHz; ``tiny`` the demo's AST + BERT on 2-s clips at 16 kHz. Audio is synthetic (tones in noise), made
here. Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import datasets
import numpy as np
import torch
from datasets import Array3D, Audio, Dataset, Features, List, Value, load_from_disk
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from torch.utils.flop_counter import FlopCounterMode
from transformers import (
    ClapConfig,
    ClapFeatureExtractor,
    PrinterCallback,
    RobertaTokenizerFast,
    TrainerCallback,
    TrainingArguments,
)
from transformers.utils import logging

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.configuration_atr import AtrConfig
from hf_atr.data.audio import encode_wav
from hf_atr.data.feature_storage import ClipRows, GatheredRows
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.models.clap.convert_clap_checkpoint import atr_config_kwargs_from_clap
from hf_atr.objectives.batch import pop_batch_metadata
from hf_atr.objectives.registry import build_objective
from hf_atr.training.collator import CaptionPairDataset
from hf_atr.training.device_features import featurize_waveforms

ROBERTA_VOCAB_SIZE = 50265
ROBERTA_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
SYLLABLES = [consonant + vowel for consonant in "bcdfghjklmnprstvwz" for vowel in "aeiou"]
CLAP_FEATURE_SHAPE = (1, 1001, 64)
CAPTIONS_PER_CLIP = 5
LEARNING_RATE = 1e-4
MAX_GRAD_NORM = 1.0
DEFAULT_STEPS = 20
"""Steps timed per row by default; the median is taken after the first two. Fewer (the earlier default, 8) left a
GPU trainer short of its steady state (71 % of the raw step with 8 workers, 90 % over 20 steps on an H200)."""
BF16_DENSE_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0}
"""Dense bfloat16 peak of common accelerators (TFLOP/s, without sparsity), matched in the device name (H200
before H100: an H200's name may not contain "H100", but the longer keys are tried first anyway)."""


def roberta_size_tokenizer(seed: int = 0) -> RobertaTokenizerFast:
    """A byte-level BPE tokenizer of RoBERTa's kind and size (50,265 tokens, 50,004 merges), built offline.

    Its merges join letter pairs into syllables, and syllables into two- and three-syllable words (a space-marked
    ``Ġ`` word start first), so captions of :func:`captions` tokenise into about 1.5 tokens a word, as English does
    with RoBERTa's own merges.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: index for index, token in enumerate([*ROBERTA_SPECIAL_TOKENS, *alphabet])}
    merges: list[tuple[str, str]] = []

    def merge(left: str, right: str) -> None:
        merges.append((left, right))
        vocab.setdefault(left + right, len(vocab))

    for syllable in SYLLABLES:
        merge(syllable[0], syllable[1])
    for syllable in SYLLABLES:
        merge("Ġ", syllable)
    for first, second in itertools.product(SYLLABLES, repeat=2):
        merge("Ġ" + first, second)
    three = list(itertools.product(SYLLABLES, repeat=3))
    for index in np.random.default_rng(seed).permutation(len(three)):
        if len(vocab) >= ROBERTA_VOCAB_SIZE:
            break
        first, second, third = three[index]
        merge("Ġ" + first + second, third)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.decoder = decoders.ByteLevel()
    return RobertaTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        cls_token="<s>",
        sep_token="</s>",
        model_max_length=77,
    )


def captions(count: int, rng: np.random.Generator) -> list[list[str]]:
    """``count`` clips' worth of :data:`CAPTIONS_PER_CLIP` captions of 8-20 words from a 5,000-word lexicon."""
    lexicon = ["".join(rng.choice(SYLLABLES, rng.integers(1, 4))) for _ in range(5000)]
    return [
        [" ".join(rng.choice(lexicon, rng.integers(8, 21))) for _ in range(CAPTIONS_PER_CLIP)]
        for _ in range(count)
    ]


def clap_size_features(count: int, nested_lists: bool, cache_dir: Path, seed: int) -> Dataset:
    """``count`` clips with random ``(1, 1001, 64)`` float32 features, written to Arrow files under ``cache_dir``
    and memory-mapped: as nested lists (``nested_lists``) or as ``Array3D``."""
    value = Value("float32")
    stored = List(List(List(value))) if nested_lists else Array3D(CLAP_FEATURE_SHAPE, "float32")
    features = Features(
        {"audio_id": Value("string"), "captions": List(Value("string")), "input_features": stored}
    )
    rng = np.random.default_rng(seed)
    texts = captions(count, rng)

    def rows():
        for index in range(count):
            yield {
                "audio_id": f"clip{index}",
                "captions": texts[index],
                "input_features": rng.standard_normal(CLAP_FEATURE_SHAPE, dtype=np.float32),
            }

    return Dataset.from_generator(rows, features=features, cache_dir=str(cache_dir))


class ArrowGatherRows(ClipRows):
    """The first one-gather reader (before the memory-mapped views): the batch's rows gathered by ``datasets`` in
    Arrow format (one slice per row), each array column converted from Arrow once per batch."""

    def gather(self, clip_indices: Any) -> GatheredRows:
        indices = [int(index) for index in clip_indices]
        table = self._clips.with_format("arrow")[indices]
        arrays = {name: table.column(name).combine_chunks().to_numpy() for name in self.array_columns}
        others = [name for name in table.column_names if name not in arrays]
        columns = {
            **Features({name: self.features[name] for name in others}).decode_batch(
                table.select(others).to_pydict()
            ),
            **arrays,
        }
        rows = [{name: columns[name][row] for name in table.column_names} for row in range(len(indices))]
        return GatheredRows(rows, arrays)


class ArrowGatherPairs(CaptionPairDataset):
    """The caption pairs read by :class:`ArrowGatherRows`."""

    def __init__(self, clips: Dataset) -> None:
        super().__init__(clips)
        self.rows = ArrowGatherRows(clips)


class RowByRowPairs(CaptionPairDataset):
    """The caption pairs read row by row, as the training dataloader read them before the one-gather readers: torch's DataLoader
    falls back to one ``__getitem__`` per item when ``__getitems__`` is None."""

    __getitems__ = None


def rows_per_second(loader: Any, batches: int) -> float:
    """Items collated per second over ``batches`` batches of ``loader``, after one batch of warm-up."""
    iterator = iter(loader)
    next(iterator)
    start, rows = time.perf_counter(), 0
    for _ in range(batches):
        rows += len(next(iterator)["audio_ids"])
    return rows / (time.perf_counter() - start)


def tokenise_ms(
    tokenizer: RobertaTokenizerFast, batch_size: int, rounds: int = 21
) -> list[tuple[str, float]]:
    """Median milliseconds to tokenise one batch of captions into torch tensors (the first batch not counted):
    through ``return_tensors="pt"`` (torch's conversion of the tokenizer's lists, as the collator did before) and
    into NumPy, shared with torch (now)."""
    texts = [clip_captions[0] for clip_captions in captions(batch_size * rounds, np.random.default_rng(2))]
    batches = [texts[start : start + batch_size] for start in range(0, len(texts), batch_size)]

    def through_torch(batch: list[str]) -> dict[str, torch.Tensor]:
        return dict(tokenizer(batch, padding=True, truncation=True, return_tensors="pt"))

    def through_numpy(batch: list[str]) -> dict[str, torch.Tensor]:
        encoded = tokenizer(batch, padding=True, truncation=True, return_tensors="np")
        return {name: torch.from_numpy(values) for name, values in encoded.items()}

    ways = {"return_tensors='pt'": through_torch, "NumPy, torch.from_numpy": through_numpy}
    durations: dict[str, list[float]] = {label: [] for label in ways}
    for batch in batches:  # the two ways alternate batch by batch, so that a change of load hits both
        for label, tokenise in ways.items():
            start = time.perf_counter()
            tokenise(batch)
            durations[label].append(1000 * (time.perf_counter() - start))
    return [(label, statistics.median(values[1:])) for label, values in durations.items()]


def collate_rows(
    args: argparse.Namespace, tokenizer: RobertaTokenizerFast, work: Path
) -> list[tuple[str, float]]:
    """Part 1: rows/s of the trainer's own train dataloader (one process) per storage and reader."""
    processor = AtrProcessor(ClapFeatureExtractor(truncation="rand_trunc", padding="repeatpad"), tokenizer)
    model = AtrDualEncoderModel(tiny_model_config(tiny_feature_extractor(), len(tokenizer)))
    training = TrainingArguments(
        output_dir=str(work / "collate"),
        per_device_train_batch_size=args.collate_batch_size,
        use_cpu=True,
        report_to=[],
        dataloader_num_workers=0,
    )
    results = []
    for label, nested in (("nested lists", True), ("Array3D", False)):
        clips = clap_size_features(args.collate_clips, nested, work / f"collate-{int(nested)}", seed=0)
        trainer = AtrTrainer(model=model, args=training, train_dataset=clips, processing_class=processor)
        loader = trainer.get_train_dataloader()
        baseline, baseline_label = (
            (RowByRowPairs(clips), "row by row (the earlier loader)")
            if nested
            else (ArrowGatherPairs(clips), "Arrow gather (the first one-gather reader)")
        )
        baseline_loader = torch.utils.data.DataLoader(
            baseline, batch_size=args.collate_batch_size, shuffle=True, collate_fn=trainer.data_collator
        )
        results.append((f"{label}, {baseline_label}", rows_per_second(baseline_loader, args.collate_batches)))
        results.append(
            (f"{label}, AtrTrainer's train dataloader", rows_per_second(loader, args.collate_batches))
        )
    return results


def synthetic_clips(count: int, seconds: float, rate: int, seed: int) -> list[np.ndarray]:
    """Tones in noise, float32 mono at ``rate``."""
    rng = np.random.default_rng(seed)
    time_axis = np.arange(int(seconds * rate)) / rate
    return [
        (
            0.3 * np.sin(2 * np.pi * rng.uniform(100, 4000) * time_axis)
            + 0.05 * rng.standard_normal(time_axis.size)
        ).astype(np.float32)
        for _ in range(count)
    ]


def build_model(
    name: str, tokenizer: RobertaTokenizerFast
) -> tuple[AtrDualEncoderModel, AtrProcessor, float]:
    """The model, its processor and its clip length in seconds."""
    if name == "clap":
        extractor = ClapFeatureExtractor(truncation="rand_trunc", padding="repeatpad")
        model = AtrDualEncoderModel(AtrConfig(**atr_config_kwargs_from_clap(ClapConfig())))
        return model, AtrProcessor(extractor, tokenizer), 10.0
    extractor = tiny_feature_extractor()
    return (
        AtrDualEncoderModel(tiny_model_config(extractor, len(tokenizer))),
        AtrProcessor(extractor, tokenizer),
        2.0,
    )


class StepClock(TrainerCallback):
    """The time of every step end (after the device finishes)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ends: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.ends.append(time.perf_counter())


def peak_tflops(device: torch.device, given: float | None) -> tuple[float | None, str]:
    """``(peak TFLOP/s or None, where it comes from)``: ``--peak-tflops``, else the bf16 dense peak of
    :data:`BF16_DENSE_PEAK_TFLOPS` whose key the CUDA device's name contains."""
    if given is not None:
        return given, "--peak-tflops"
    if device.type != "cuda":
        return None, "no peak for this device: give --peak-tflops"
    name = torch.cuda.get_device_name(device)
    for key in sorted(BF16_DENSE_PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return BF16_DENSE_PEAK_TFLOPS[key], f"{key} bf16 dense peak"
    return None, f"{name!r} is not in the table of peaks: give --peak-tflops"


def utilisation(flops: int, seconds: float, peak: float | None) -> str:
    """Model FLOPs utilisation: achieved FLOP/s over the peak, as a percentage (``-`` without a peak)."""
    return "-" if peak is None else f"{flops / seconds / (peak * 1e12):.1%}"


def median_after_two(durations: list[float]) -> float:
    return statistics.median(durations[2:] if len(durations) > 3 else durations)


def prepared_batch(batch: dict[str, Any], device: torch.device) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model inputs, objective metadata)`` of a collated batch, tensors moved to ``device``."""
    batch = dict(batch)
    metadata = pop_batch_metadata(batch)
    metadata = {key: value.to(device) if torch.is_tensor(value) else value for key, value in metadata.items()}
    inputs = {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}
    return inputs, metadata


def model_inputs_of(inputs: dict[str, Any], features: Any, device: torch.device) -> dict[str, Any]:
    """The model's inputs: the on-device features of the waveforms (``features``), computed outside autocast as
    the trainer computes them (inside it, the features' float32 arithmetic would run in bfloat16), or the batch's
    precomputed ones."""
    return featurize_waveforms(inputs, features, device=device) if features is not None else inputs


def step_flops(
    model: AtrDualEncoderModel, batch: dict[str, Any], features: Any, device: torch.device, bf16: bool
) -> int:
    """FLOPs of one training step's forward and backward (model and objective; not the features, the clipping or
    the optimizer), counted once by ``torch.utils.flop_counter.FlopCounterMode`` on a copy of the model."""
    model = copy.deepcopy(model).to(device).train()
    objective = build_objective(model.config).to(device)
    inputs, metadata = prepared_batch(batch, device)
    model_inputs = model_inputs_of(inputs, features, device)
    with FlopCounterMode(display=False) as counter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            outputs = model(**model_inputs)
        objective(outputs.audio_embeds, outputs.text_embeds, batch=metadata, model=model).loss.backward()
    return counter.get_total_flops()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a clock read after it counts that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_step_seconds(
    model: AtrDualEncoderModel,
    batch: dict[str, Any],
    features: Any,
    device: torch.device,
    bf16: bool,
    steps: int,
    compile_model: bool = False,
) -> tuple[float, float]:
    """``(median seconds, first step's seconds)`` of the raw step: the on-device features (when ``features``)
    outside autocast, the forward under autocast (``torch.compile``-d with ``compile_model``: the first step
    compiles), the model's objective, backward, gradient clipping at :data:`MAX_GRAD_NORM` and an AdamW step, on
    ``batch`` on the device."""
    model.to(device).train()
    objective = build_objective(model.config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    inputs, metadata = prepared_batch(batch, device)
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    forward = torch.compile(model) if compile_model else model

    def step() -> None:
        model_inputs = model_inputs_of(inputs, features, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            outputs = forward(**model_inputs)
        loss = objective(outputs.audio_embeds, outputs.text_embeds, batch=metadata, model=model).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)

    durations = []
    synchronize(device)
    for _ in range(steps):
        start = time.perf_counter()
        step()
        durations.append(time.perf_counter() - start)
    return median_after_two(durations), durations[0]


def trainer_step_seconds(
    model: AtrDualEncoderModel,
    processor: AtrProcessor,
    clips: Dataset,
    audio_features: str,
    args: argparse.Namespace,
    workers: int,
    output_dir: Path,
    compile_model: bool = False,
) -> tuple[float, float, dict[str, Any], Any]:
    """``AtrTrainer``'s median seconds between two step ends, its first step's seconds (from the start of
    ``train()``: with ``compile_model``, ``TrainingArguments(torch_compile=True)``, the compilation), one batch its
    own collator made (for the raw step: captions padded to the compile buckets when compiling) and its on-device
    features (``None`` for precomputed features)."""
    device = torch.device(args.device)
    clock = StepClock(device)
    training = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps,
        learning_rate=LEARNING_RATE,
        max_grad_norm=MAX_GRAD_NORM,
        dataloader_num_workers=workers,
        bf16=args.bf16,
        use_cpu=device.type == "cpu",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
        logging_nan_inf_filter=False,  # as hf-atr train sets it: no per-step read of the loss
        torch_compile=compile_model,
    )
    trainer = AtrTrainer(
        model=model,
        args=training,
        train_dataset=clips,
        processing_class=processor,
        audio_features=audio_features,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)

    batch = trainer.data_collator([trainer.train_dataset[index] for index in range(args.batch_size)])
    synchronize(device)
    start = time.perf_counter()
    trainer.train()
    first = clock.ends[0] - start
    return median_after_two(list(np.diff(clock.ends))), first, batch, trainer.device_features


class TrainingRow(NamedTuple):
    """One row of part 2: an input, a worker count, eager or compiled; seconds per step and FLOPs per step."""

    input: str
    workers: int
    compiled: bool
    trainer_seconds: float
    trainer_first_seconds: float
    raw_seconds: float
    raw_first_seconds: float
    flops: int


def training_rows(
    args: argparse.Namespace, tokenizer: RobertaTokenizerFast, work: Path
) -> Iterator[TrainingRow]:
    """Part 2: one :class:`TrainingRow` per input, worker count and (with ``--compile``) eager and compiled, each
    yielded as soon as it is timed."""
    device = torch.device(args.device)
    model, processor, seconds = build_model(args.model, tokenizer)
    rate = processor.sampling_rate
    count = args.batch_size * args.clip_batches
    waveforms = synthetic_clips(count, seconds, rate, seed=0)
    texts = captions(count, np.random.default_rng(1))
    raw = Dataset.from_dict(
        {
            "audio_id": [f"clip{index}" for index in range(count)],
            "audio": [{"bytes": encode_wav(waveform, rate), "path": None} for waveform in waveforms],
            "captions": [clip_captions[:1] for clip_captions in texts],
        },
        features=Features(
            {
                "audio_id": Value("string"),
                "audio": {"bytes": Value("binary"), "path": Value("string")},
                "captions": List(Value("string")),
            }
        ),
    ).cast_column("audio", Audio(decode=False))
    raw.save_to_disk(str(work / "raw"))
    processor.extract_audio_features(load_from_disk(str(work / "raw")), feature_backend="torch").save_to_disk(
        str(work / "features")
    )
    inputs = {
        "precomputed features": ("collator", "features"),
        f"raw {rate // 1000}-kHz audio": ("device", "raw"),
    }
    variants = [False, True] if args.compile else [False]
    for label, (audio_features, folder) in inputs.items():
        clips = load_from_disk(str(work / folder))
        flops = None
        for workers in args.workers:
            for compiled in variants:
                trained, trained_first, batch, features = trainer_step_seconds(
                    copy.deepcopy(model),
                    processor,
                    clips,
                    audio_features,
                    args,
                    workers,
                    work / "trainer",
                    compiled,
                )
                if flops is None:
                    flops = step_flops(model, batch, features, device, args.bf16)
                raw_seconds, raw_first = raw_step_seconds(
                    copy.deepcopy(model), batch, features, device, args.bf16, args.steps, compiled
                )
                yield TrainingRow(
                    label, workers, compiled, trained, trained_first, raw_seconds, raw_first, flops
                )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=("tiny", "clap"), default="tiny")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"steps timed per row, median after the first two (default {DEFAULT_STEPS}, at least 5)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time each row compiled: AtrTrainer with torch_compile=True against torch.compile(model)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's peak TFLOP/s for the utilisation (default: the bf16 dense peak of H100, H200, A100, L4)",
    )
    parser.add_argument("--clip-batches", type=int, default=3, help="clips in the training set, in batches")
    parser.add_argument("--workers", type=int, nargs="+", default=[0], help="dataloader_num_workers per row")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--collate-clips", type=int, default=1024)
    parser.add_argument("--collate-batch-size", type=int, default=256)
    parser.add_argument("--collate-batches", type=int, default=3, help="batches timed, after one of warm-up")
    parser.add_argument("--skip-collate", action="store_true")
    parser.add_argument("--skip-training", action="store_true")
    args = parser.parse_args()
    if args.steps < 5:
        parser.error(
            f"--steps must be at least 5 (the median is taken after the first two), got {args.steps}."
        )
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    logging.set_verbosity_error()
    datasets.disable_progress_bars()
    tokenizer = roberta_size_tokenizer()
    name = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    print(f"device {device}{name}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if not args.skip_collate:
            print(
                f"\nCollate of the training dataloader, one process: CLAP-size features {CLAP_FEATURE_SHAPE} float32, "
                f"{len(tokenizer):,}-token byte-level BPE, batches of {args.collate_batch_size}, "
                f"{args.collate_clips} clips x {CAPTIONS_PER_CLIP} captions"
            )
            rates = collate_rows(args, tokenizer, work)
            for label, rate in rates:
                print(f"  {label:<62} {rate:>8,.0f} rows/s  {rate / rates[0][1]:>6.1f}x", flush=True)
            print(f"\nTokenising {args.collate_batch_size} captions into torch tensors")
            for label, milliseconds in tokenise_ms(tokenizer, args.collate_batch_size):
                print(f"  {label:<62} {milliseconds:>8.1f} ms")
        if not args.skip_training:
            print_training(args, tokenizer, work, device)


def print_training(
    args: argparse.Namespace, tokenizer: RobertaTokenizerFast, work: Path, device: torch.device
) -> None:
    """Part 2's table: per row, the trainer's and the raw step's ms, pairs/s and model FLOPs utilisation. Each row
    is printed (and flushed) as soon as it is timed, so that a run stopped by a time limit keeps the rows it timed;
    the whole table follows at the end."""
    peak, peak_source = peak_tflops(device, args.peak_tflops)
    print(
        f"\nTraining step, model {args.model}, batch {args.batch_size}, {'bf16' if args.bf16 else 'fp32'}: "
        f"{args.steps} steps timed per row, the median taken after the first two (which warm up, and compile "
        "with --compile)."
    )
    print(
        f"MFU = FLOPs per step / step time / peak; peak {peak if peak is not None else '-'} TFLOP/s ({peak_source})"
    )
    header = (
        f"  {'input':<24} {'workers':>7} {'mode':>8} {'trainer ms':>10} {'pairs/s':>8} {'MFU':>6} "
        f"{'raw ms':>8} {'pairs/s':>8} {'MFU':>6} {'share':>6} {'1st step s (trainer/raw)':>25}"
    )
    print(header, flush=True)
    rows = []
    for row in training_rows(args, tokenizer, work):
        rows.append(row)
        print(row_line(row, args, peak), flush=True)
    print(
        "\nModel FLOPs per step (forward + backward of the model and objective, FlopCounterMode, counted once): "
        + ", ".join(
            f"{row.input} {row.flops / 1e9:,.1f} GFLOP"
            for row in rows
            if row.workers == args.workers[0] and not row.compiled
        )
    )
    print(header)
    if args.compile:
        print("  (compiled rows: the trainer runs first; the raw step then reuses the graphs it compiled)")
    for row in rows:
        print(row_line(row, args, peak))


def row_line(row: TrainingRow, args: argparse.Namespace, peak: float | None) -> str:
    """One row of part 2's table, aligned under its header."""
    return (
        f"  {row.input:<24} {row.workers:>7} {'compiled' if row.compiled else 'eager':>8} "
        f"{1000 * row.trainer_seconds:>10.1f} {args.batch_size / row.trainer_seconds:>8.1f} "
        f"{utilisation(row.flops, row.trainer_seconds, peak):>6} {1000 * row.raw_seconds:>8.1f} "
        f"{args.batch_size / row.raw_seconds:>8.1f} {utilisation(row.flops, row.raw_seconds, peak):>6} "
        f"{row.raw_seconds / row.trainer_seconds:>6.0%} "
        f"{f'{row.trainer_first_seconds:.1f} / {row.raw_first_seconds:.1f}':>25}"
    )


if __name__ == "__main__":
    main()
