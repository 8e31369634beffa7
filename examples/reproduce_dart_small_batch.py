"""Small batches and noisy captions on SynthCaps: contrastive vs m-LTM's ``iot`` vs DART, and ``iot`` vs ``iot_partial``.

Two protocols, on SynthCaps (English captions) with the tiny dual encoder of ``hf_atr.demo`` (random-init
AST + BERT, a WordPiece vocabulary trained on the training captions), trained with :class:`AtrTrainer`
exactly as ``hf_atr.demo.run_demo`` trains it:

1. **Small batches** (DART Tab. 12, the "k = 8 / k = 32" rows; DART Tab. 2 uses batch 32 too):
   ``contrastive``, ``iot``, ``dart``, ``dart`` with ``feature_cost="rms"`` (its feature costs divided by
   √batch, so that the UWD plan keeps its mass at any batch size) and the same with ``uwd_weight=20`` (λ
   large enough for the term to carry about a tenth of the gradient) at batch sizes 8 and 32 on clean captions.
   For the ``dart`` runs the table also gives, averaged over training, the mass the UWD plan transports and
   the UWD term's share of the gradient (``λ‖∇L_UWD‖ / (λ‖∇L_UWD‖ + ‖∇L_IOT‖)``, from the objective's logs).
2. **Noisy correspondences** (m-LTM Tab. 5 / §5.2, DART Tab. 2 "Noisy Labels"): a fraction (default 40 %)
   of the training captions, drawn independently per caption, is replaced by a caption of another clip
   drawn at random; ``iot`` vs ``iot_partial`` (partial OT with transported mass ``s = 1 − noise`` by
   default: m-LTM Fig. 2 finds the best ``s`` tracks the noise ratio) at batch size 32.

Before training, the UWD term is probed at DART's own settings (d = 512, ε = 0.03, τ = 0.05, unit-norm
random embeddings, batches of 32 and 128, ``iot`` at ε = 0.03 as base): the mass its plan transports and
its share of the gradient, for Eq. 7's costs and for ``feature_cost="rms"``, from the objective's logs.

Every run starts from the same initial weights (seeded) and takes the same number of optimizer steps
with the same schedule (AdamW, linear warm-up, cosine decay), so batch 32 sees four times the pairs of
batch 8. Ground metrics follow the papers (``AtrConfig``'s default): ``iot``, ``iot_partial`` and ``dart``
train and retrieve with ``scoring="euclidean"`` (m-LTM / DART Eq. 4), ``contrastive`` with cosine. Objectives keep
their paper defaults: ``iot`` ε = 0.05 (m-LTM), ``dart`` = ``iot`` with ε = 0.03 + 0.5 · UWD-R (ε = 0.03,
τ = 0.05, EMA β = 0.9, DART Tab. 6). The test split is clean; T2A and A2T R@1 (A2T: any of the clip's
five captions in the top 1) come from :class:`~hf_atr.evaluation.evaluator.RetrievalEvaluator`.

Example::

    OMP_NUM_THREADS=1 python examples/reproduce_dart_small_batch.py            # ~10 min on 2 cores
    python examples/reproduce_dart_small_batch.py --num-train 2000 --max-steps 3000 --seeds 0 1 2
    python examples/reproduce_dart_small_batch.py --output-json runs/dart_small_batch.json
    python examples/reproduce_dart_small_batch.py --protocols small_batch --batch-sizes 32   # UWD settings only
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict
from transformers import TrainingArguments

from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.objectives.registry import build_objective
from hf_atr.processing_atr import AtrProcessor
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training.trainer import AtrTrainer

SMALL_BATCH_OBJECTIVES = (
    {"name": "contrastive"},
    {"name": "iot"},
    {"name": "dart"},
    {"name": "dart", "feature_cost": "rms"},
    # The setting under which the UWD term acts: ~50 % of its mass transported, ~10 % of the gradient.
    {"name": "dart", "feature_cost": "rms", "uwd_weight": 20.0},
)
PROTOCOLS = ("small_batch", "noisy")


@dataclass
class RunSpec:
    """One training run: the objective (its registry config), batch size and caption noise ratio."""

    protocol: str
    objective: dict[str, Any]
    batch_size: int
    noise_ratio: float = 0.0

    @property
    def label(self) -> str:
        options = ", ".join(
            f"s = {value:g}" if key == "mass" else f"{key} = {value}"
            for key, value in self.objective.items()
            if key != "name"
        )
        return self.objective["name"] + (f" ({options})" if options else "")


@dataclass
class RunResult:
    """R@1 both ways on the clean test split, and the run's wall-clock training time."""

    protocol: str
    objective: str
    batch_size: int
    noise_ratio: float
    seed: int
    t2a_r1: float
    a2t_r1: float
    train_seconds: float
    train_cpu_seconds: float
    uwd_transported_mass: float | None = None
    uwd_gradient_share: float | None = None


def probe_uwd_at_paper_settings(dim: int = 512, batch_sizes: Sequence[int] = (32, 128)) -> str:
    """A Markdown table: UWD transported mass and gradient share at DART's settings on random unit embeddings."""
    lines = [
        "| feature cost | batch | UWD mass % | λ‖∇L_UWD‖ | ‖∇L_IOT‖ | UWD gradient share % |",
        "|---|---|---|---|---|---|",
    ]
    for feature_cost in ("euclidean", "rms"):
        for batch_size in batch_sizes:
            generator = torch.Generator().manual_seed(0)
            audio, text = (
                torch.nn.functional.normalize(torch.randn(batch_size, dim, generator=generator), dim=-1)
                for _ in range(2)
            )
            objective = build_objective({"name": "dart", "feature_cost": feature_cost})
            logs = objective(audio.requires_grad_(), text.requires_grad_()).logs
            lines.append(
                f"| {feature_cost} | {batch_size} | {100 * logs['uwd_transported_mass']:.2f} | "
                f"{logs['uwd_gradient_norm']:.2e} | {logs['base_gradient_norm']:.2f} | "
                f"{100 * logs['uwd_gradient_share']:.3f} |"
            )
    return "\n".join(lines)


def corrupt_captions(clips: Dataset, noise_ratio: float, seed: int) -> Dataset:
    """Replace ``round(noise_ratio · n_captions)`` training captions, drawn at random, by a random caption of another clip.

    m-LTM §5.2: a corrupted pair keeps its audio and gets a random text. The captions to corrupt are drawn
    without replacement, so exactly that fraction of (clip, caption) pairs is wrong.
    """
    rng = np.random.default_rng(seed)
    captions = [list(clip_captions) for clip_captions in clips["captions"]]
    num_clips = len(captions)
    if num_clips < 2:
        raise ValueError(f"Need at least 2 training clips to swap captions between clips, got {num_clips}.")
    slots = [
        (clip_index, slot)
        for clip_index, clip_captions in enumerate(captions)
        for slot in range(len(clip_captions))
    ]
    originals = [list(clip_captions) for clip_captions in captions]
    for pick in rng.choice(len(slots), size=round(noise_ratio * len(slots)), replace=False):
        clip_index, slot = slots[pick]
        # An offset in [1, num_clips) never lands on the clip itself.
        other = (clip_index + int(rng.integers(1, num_clips))) % num_clips
        captions[clip_index][slot] = originals[other][int(rng.integers(len(originals[other])))]
    return clips.remove_columns("captions").add_column("captions", captions)


def run_specs(
    batch_sizes: Sequence[int],
    noise_ratio: float,
    noisy_batch_size: int,
    partial_mass: float,
    protocols: Sequence[str] = PROTOCOLS,
) -> list[RunSpec]:
    """The runs of the chosen protocols, in the order they are trained and printed."""
    specs = []
    if "small_batch" in protocols:
        specs += [
            RunSpec("small batch", dict(objective), batch_size)
            for batch_size in batch_sizes
            for objective in SMALL_BATCH_OBJECTIVES
        ]
    if "noisy" in protocols:
        specs.append(RunSpec("noisy captions", {"name": "iot"}, noisy_batch_size, noise_ratio))
        specs.append(
            RunSpec(
                "noisy captions", {"name": "iot_partial", "mass": partial_mass}, noisy_batch_size, noise_ratio
            )
        )
    return specs


def training_mean(log_history: list[dict[str, Any]], key: str) -> float | None:
    """Mean of a logged objective term over the logging windows of a run (None if never logged)."""
    values = [entry[key] for entry in log_history if key in entry]
    return statistics.mean(values) if values else None


def train_and_evaluate(
    spec: RunSpec,
    train_set: Dataset,
    test_set: Dataset,
    processor: AtrProcessor,
    vocab_size: int,
    *,
    max_steps: int,
    learning_rate: float,
    seed: int,
    work_dir: Path,
) -> RunResult:
    """Train one tiny model as ``hf_atr.demo.run_demo`` does (same initialisation for every run) and evaluate it."""
    torch.manual_seed(seed)
    config = tiny_model_config(processor.feature_extractor, vocab_size, objective=spec.objective)
    model = AtrDualEncoderModel(config)
    args = TrainingArguments(
        output_dir=str(work_dir / "trainer"),
        per_device_train_batch_size=spec.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=learning_rate,
        weight_decay=0.01,
        warmup_steps=min(20, max_steps // 10),
        max_steps=max_steps,
        lr_scheduler_type="cosine",
        logging_steps=max(max_steps // 4, 1),
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        data_seed=seed,
        dataloader_drop_last=True,
        disable_tqdm=True,
    )
    trainer = AtrTrainer(model=model, args=args, train_dataset=train_set, processing_class=processor)
    started, cpu_started = time.perf_counter(), time.process_time()
    trainer.train()
    train_seconds, train_cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    metrics = RetrievalEvaluator(test_set, processor)(model)
    name = spec.objective["name"]
    return RunResult(
        protocol=spec.protocol,
        objective=spec.label,
        batch_size=spec.batch_size,
        noise_ratio=spec.noise_ratio,
        seed=seed,
        t2a_r1=metrics["t2a_R@1"],
        a2t_r1=metrics["a2t_R@1"],
        train_seconds=train_seconds,
        train_cpu_seconds=train_cpu_seconds,
        uwd_transported_mass=training_mean(trainer.state.log_history, f"{name}/uwd_transported_mass"),
        uwd_gradient_share=training_mean(trainer.state.log_history, f"{name}/uwd_gradient_share"),
    )


def format_table(results: list[RunResult]) -> str:
    """A Markdown table: one row per (protocol, batch, noise, objective), R@1 in % (mean ± sd over seeds)."""

    def cell(values: list[float | None], digits: int = 1) -> str:
        if None in values:
            return "—"
        if len(values) == 1:
            return f"{100 * values[0]:.{digits}f}"
        return f"{100 * statistics.mean(values):.{digits}f} ± {100 * statistics.stdev(values):.{digits}f}"

    groups: dict[tuple, list[RunResult]] = {}
    for result in results:
        key = (result.protocol, result.batch_size, result.noise_ratio, result.objective)
        groups.setdefault(key, []).append(result)
    lines = [
        "| protocol | batch | caption noise | objective | T2A R@1 | A2T R@1 | UWD mass % | UWD gradient share % "
        "| train s (wall) | train s (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (protocol, batch_size, noise_ratio, objective), runs in groups.items():
        lines.append(
            f"| {protocol} | {batch_size} | {100 * noise_ratio:.0f} % | {objective} | "
            f"{cell([run.t2a_r1 for run in runs])} | {cell([run.a2t_r1 for run in runs])} | "
            f"{cell([run.uwd_transported_mass for run in runs])} | "
            f"{cell([run.uwd_gradient_share for run in runs], digits=3)} | "
            f"{statistics.mean(run.train_seconds for run in runs):.0f} | "
            f"{statistics.mean(run.train_cpu_seconds for run in runs):.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-train", type=int, default=400, help="training clips (5 captions each)")
    parser.add_argument("--num-test", type=int, default=100, help="test clips (chance T2A R@1 = 1/num-test)")
    parser.add_argument("--max-steps", type=int, default=250, help="optimizer steps of every run")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32], help="small-batch protocol")
    parser.add_argument(
        "--noise-ratio", type=float, default=0.4, help="fraction of training captions replaced"
    )
    parser.add_argument("--noisy-batch-size", type=int, default=32)
    parser.add_argument(
        "--partial-mass", type=float, default=None, help="iot_partial mass s (default 1 - noise)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one full set of runs per seed")
    parser.add_argument(
        "--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS), help="which protocols to run"
    )
    parser.add_argument("--output-json", type=Path, default=None, help="also write every run's result here")
    args = parser.parse_args(argv)
    if not 0 < args.noise_ratio < 1:
        parser.error(f"--noise-ratio must be in (0, 1), got {args.noise_ratio}.")
    if args.partial_mass is None:
        args.partial_mass = round(1 - args.noise_ratio, 6)
    return args


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    args = parse_args(argv)
    started = time.perf_counter()
    print("UWD term at DART's settings (d = 512, ε = 0.03, τ = 0.05, λ = 0.5, random unit embeddings):")
    print(probe_uwd_at_paper_settings(), "\n", flush=True)
    corpus = load_synthcaps(
        num_train=args.num_train, num_validation=0, num_test=args.num_test, languages=("eng",)
    )
    corpus = DatasetDict({"train": corpus["train"], "test": corpus["test"]})
    tokenizer = train_caption_tokenizer(
        [caption for captions in corpus["train"]["captions"] for caption in captions], vocab_size=3000
    )
    feature_extractor = tiny_feature_extractor()
    processor = AtrProcessor(feature_extractor, tokenizer)
    features = processor.extract_audio_features(corpus)
    print(
        f"SynthCaps: {len(features['train'])} training clips x 5 captions, {len(features['test'])} test clips "
        f"(chance R@1 T2A {100 / len(features['test']):.1f} %); {args.max_steps} steps per run; "
        f"noisy runs: {100 * args.noise_ratio:.0f} % of the training captions replaced; "
        f"data ready in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    specs = run_specs(
        args.batch_sizes, args.noise_ratio, args.noisy_batch_size, args.partial_mass, args.protocols
    )
    results = []
    with tempfile.TemporaryDirectory() as work_dir:
        for seed in args.seeds:
            noisy_train = corrupt_captions(features["train"], args.noise_ratio, seed)
            for spec in specs:
                train_set = noisy_train if spec.noise_ratio else features["train"]
                result = train_and_evaluate(
                    spec,
                    train_set,
                    features["test"],
                    processor,
                    len(tokenizer),
                    max_steps=args.max_steps,
                    learning_rate=args.learning_rate,
                    seed=seed,
                    work_dir=Path(work_dir),
                )
                results.append(result)
                print(
                    f"  {spec.protocol:>14} batch {spec.batch_size:>3} {spec.label:<28} "
                    f"T2A R@1 {100 * result.t2a_r1:5.1f}  A2T R@1 {100 * result.a2t_r1:5.1f}  "
                    f"({result.train_seconds:.0f} s wall, {result.train_cpu_seconds:.0f} s CPU)"
                    + (
                        ""
                        if result.uwd_transported_mass is None
                        else f"  UWD mass {100 * result.uwd_transported_mass:.1f} %, "
                        f"gradient share {100 * result.uwd_gradient_share:.3f} %"
                    ),
                    flush=True,
                )
    print()
    print(format_table(results))
    print(f"\nTotal {time.perf_counter() - started:.0f} s")
    if args.output_json is not None:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps([asdict(result) for result in results], indent=2))
    return results


if __name__ == "__main__":
    main()
