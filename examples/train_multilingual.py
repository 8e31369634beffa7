"""Compare ML-CLAP's random language, ATRI's CACL and ATRI's KCL on SynthCaps in 8 languages (ATRI Tables 1–4).

The three schemes train the same tiny dual encoder (``hf_atr.demo``: random-init AST + BERT, one WordPiece
vocabulary for all 8 languages) from the same initialisation, with the same optimiser, schedule and steps.
An epoch visits every (clip, English caption slot) once; what differs is the text of each step:

- ``random_language`` (ML-CLAP, Eq. 4–5): the slot in one language drawn per epoch, B captions a step;
- ``cacl`` (Eq. 12–13): the slot in English and in one other language drawn per epoch, 2B captions;
- ``kcl`` (Eq. 9–11): the slot in all 8 languages, 8B captions.

Each scheme runs in its own fresh process, so its peak resident memory (``ru_maxrss``, which includes
the interpreter, libraries and data) and the growth of resident memory during training are its own;
this stands in for the paper's GPU memory column on a CPU. "step" is the mean wall time of one
forward + backward + optimiser update (the first step excluded); "train" is the whole training loop,
batch collation and tokenisation included. Then, on the test split in all 8 languages: T2A/A2T R@1/5/10
and mAP@10 per language and on average, MRV (Eq. 16), and the embedding gap and mean distance to
English (Eq. 14–15).

Example::

    OMP_NUM_THREADS=1 python examples/train_multilingual.py                      # a few minutes on 2 cores
    python examples/train_multilingual.py --num-train 1000 --epochs 10 --output-json runs/ml.json
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch
from datasets import load_from_disk
from transformers import get_cosine_schedule_with_warmup

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.schema import LANGUAGES
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.evaluation.multilingual import language_consistency
from hf_atr.metrics.tables import results_table
from hf_atr.objectives.batch import group_caption_embeds, pop_batch_metadata
from hf_atr.objectives.registry import build_objective
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.objective_setup import objective_training_setup

SCHEMES = ("random_language", "cacl", "kcl")


def resident_mib() -> float:
    """Current resident set size of this process, MiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def train_and_evaluate(scheme: str, data_dir: str, options: dict[str, Any]) -> dict[str, Any]:
    """Train one scheme from the shared initialisation, then evaluate it (run in a fresh process)."""
    torch.set_num_threads(options["threads"])
    processor = AtrProcessor.from_pretrained(f"{data_dir}/processor")
    features = load_from_disk(f"{data_dir}/features")
    model = AtrDualEncoderModel.from_pretrained(f"{data_dir}/initial_model")
    model.config.objective = {"name": scheme}
    objective = build_objective(model.config)
    setup = objective_training_setup(
        objective, features["train"], processor, languages=LANGUAGES, seed=options["seed"]
    )
    dataset, collator = setup.train_dataset, setup.data_collator or AtrDataCollator(processor)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=options["batch_size"],
        shuffle=True,
        drop_last=True,
        collate_fn=collator,
        generator=torch.Generator().manual_seed(options["seed"]),
    )
    total_steps = options["epochs"] * len(loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options["learning_rate"], weight_decay=0.01)
    schedule = get_cosine_schedule_with_warmup(optimizer, min(20, total_steps // 10), total_steps)
    torch.manual_seed(options["seed"])
    model.train()
    rss_before = resident_mib()
    step_seconds, losses = [], []
    train_started = time.perf_counter()
    for epoch in range(options["epochs"]):
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(epoch)
        for batch in loader:
            step_started = time.perf_counter()
            metadata = pop_batch_metadata(batch)
            outputs = model(**batch)
            text_embeds = group_caption_embeds(outputs.text_embeds, outputs.audio_embeds.shape[0], metadata)
            loss = objective(outputs.audio_embeds, text_embeds, batch=metadata, model=model).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step_seconds.append(time.perf_counter() - step_started)
            losses.append(loss.item())
    train_seconds = time.perf_counter() - train_started
    # ru_maxrss is in KiB on Linux; read before evaluation so that it covers training only.
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    metrics = RetrievalEvaluator(features["test"], processor, languages=list(LANGUAGES))(model)
    metrics.update(language_consistency(model, processor, features["test"], LANGUAGES))
    timed = step_seconds[1:] or step_seconds
    return {
        "metrics": metrics,
        "steps": len(step_seconds),
        "step_ms": 1000 * sum(timed) / len(timed),
        "train_s": train_seconds,
        "peak_rss_mib": peak_rss,
        "training_rss_growth_mib": peak_rss - rss_before,
        "first_loss": sum(losses[:10]) / len(losses[:10]),
        "last_loss": sum(losses[-10:]) / len(losses[-10:]),
    }


def prepare(data_dir: Path, num_train: int, num_test: int, seed: int) -> None:
    """SynthCaps in 8 languages → audio features, one tokenizer for all languages, one initial model."""
    corpus = load_synthcaps(num_train=num_train, num_validation=0, num_test=num_test, seed=seed)
    captions = [
        caption
        for row in corpus["train"]
        for clip_captions in [row["captions"], *(row["translations"] or {}).values()]
        for caption in clip_captions or []
    ]
    tokenizer = train_caption_tokenizer(captions, vocab_size=3000)
    feature_extractor = tiny_feature_extractor()
    processor = AtrProcessor(feature_extractor, tokenizer)
    del corpus["validation"]  # empty; datasets cannot reload an empty split
    processor.extract_audio_features(corpus, keep_audio=False).save_to_disk(str(data_dir / "features"))
    processor.save_pretrained(str(data_dir / "processor"))
    torch.manual_seed(seed)
    AtrDualEncoderModel(tiny_model_config(feature_extractor, len(tokenizer))).save_pretrained(
        str(data_dir / "initial_model")
    )


def format_overheads(results: dict[str, dict[str, Any]]) -> str:
    """ATRI Table 4 on a CPU: memory and time of each scheme, with ratios to the first."""
    baseline = next(iter(results.values()))
    lines = [
        "| Scheme | steps | step (ms) | × | train (s) | peak RSS (MiB) | RSS growth in training (MiB) | × | loss first→last |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scheme, result in results.items():
        growth_ratio = result["training_rss_growth_mib"] / max(baseline["training_rss_growth_mib"], 1e-9)
        lines.append(
            f"| {scheme} | {result['steps']} | {result['step_ms']:.1f} | {result['step_ms'] / baseline['step_ms']:.2f} "
            f"| {result['train_s']:.1f} | {result['peak_rss_mib']:.0f} | {result['training_rss_growth_mib']:.0f} "
            f"| {growth_ratio:.2f} | {result['first_loss']:.3f}→{result['last_loss']:.3f} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    parser.add_argument(
        "--num-train", type=int, default=192, help="Training clips (5 captions each, 8 languages)."
    )
    parser.add_argument("--num-test", type=int, default=64, help="Test clips.")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads per run.")
    parser.add_argument(
        "--output-json", type=Path, help="Also write every scheme's metrics to this JSON file."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    args = build_parser().parse_args(argv)
    options = {
        key: getattr(args, key) for key in ("epochs", "batch_size", "learning_rate", "seed", "threads")
    }
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as data_dir:
        prepare(Path(data_dir), args.num_train, args.num_test, args.seed)
        for scheme in args.schemes:
            # A fresh process per scheme: peak RSS is per scheme, and no scheme inherits another's allocator state.
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as executor:
                results[scheme] = executor.submit(train_and_evaluate, scheme, data_dir, options).result()
            print(
                f"{scheme}: {results[scheme]['steps']} steps, {results[scheme]['train_s']:.1f} s", flush=True
            )

    print(
        f"\nSynthCaps, {args.num_train} training clips × 5 captions × {len(LANGUAGES)} languages, "
        f"{args.epochs} epochs of batch {args.batch_size}; test: {args.num_test} clips "
        f"(chance T2A R@1 = {100 / args.num_test:.1f}%). Recall and mAP@10 in %, lower Gap/Dis/MRV is more consistent.\n"
    )
    print(
        results_table(
            {scheme: result["metrics"] for scheme, result in results.items()}, LANGUAGES, decimals=2
        )
    )
    print(
        "\nTraining overheads (CPU; one process per scheme; peak RSS = ru_maxrss up to the end of training):\n"
    )
    print(format_overheads(results))
    if args.output_json is not None:
        args.output_json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
