"""Zero-shot sound classification on ESC-50 with a saved hf-atr model, per fold.

:class:`hf_atr.evaluation.zero_shot.ZeroShotEvaluator` does the work (``hf-atr evaluate --zero-shot`` on a saved
split is the same): every class becomes text through caption templates (``"This is a sound of {class}."``;
several templates are averaged into one class embedding, then re-normalised, as CLIP's prompt ensembles are),
and each clip is classified as the class whose text scores highest under the model's scoring head. The clips
of all folds are encoded once; each fold's metrics are those of its rows:

- ``accuracy``: audio -> class R@1 (the true class scores above every other; a tie counts against it);
- ``balanced_accuracy``: the mean of the classes' accuracies;
- ``mAP@10``: audio -> class mAP@10, i.e. the mean reciprocal rank of the true class within the top 10;
- ``class_to_audio_mAP@10``: each class text retrieving the fold's clips of that class.

``--report DIR`` writes the confusion matrix and per-class accuracy over the evaluated folds, with a
``report.html`` (needs ``pip install 'hf-atr[plots]'``).

Each fold's clip count is printed; a fold with fewer clips than ``--min-clips`` (default: one per class)
gets no metrics (clips skipped with ``--missing skip`` can leave a fold nearly empty, and its numbers
would mean nothing).

Example::

    python examples/zero_shot_esc50.py --model runs/atr-clotho --esc50-dir ~/data/ESC-50-master
    python examples/zero_shot_esc50.py --model runs/atr-clotho --esc50-dir ESC-50 --folds 5 \\
        --template "This is a sound of {class}." --template "A recording of {class}." --report esc50_report
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch
from datasets import concatenate_datasets

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.corpus_utils import expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS, load_esc50
from hf_atr.evaluation.zero_shot import ZeroShotEvaluator

METRICS = ("accuracy", "balanced_accuracy", "mAP@10", "class_to_audio_mAP@10")
"""The columns printed per fold (``ZeroShotPredictions.metrics`` keys)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, help="Directory of a saved AtrDualEncoderModel + AtrProcessor."
    )
    parser.add_argument(
        "--esc50-dir", type=expand_path, required=True, help="The ESC-50 directory (meta/ and audio/)."
    )
    parser.add_argument(
        "--folds", type=int, nargs="+", choices=ESC50_FOLDS, help="Folds to test (default: all)."
    )
    parser.add_argument(
        "--template",
        dest="templates",
        action="append",
        help=f"Caption template with {{class}}; repeat to ensemble (default: {ESC50_DEFAULT_TEMPLATES[0]!r}).",
    )
    parser.add_argument(
        "--missing", choices=("error", "skip"), default="error", help="Raise on or skip bad clips."
    )
    parser.add_argument(
        "--min-clips",
        type=int,
        help="Folds with fewer clips get no metrics (default: the number of classes, one clip per class).",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output-json", type=expand_path, help="Also write the metrics to this JSON file.")
    parser.add_argument(
        "--report",
        type=expand_path,
        help="Also write the confusion matrix, per-class accuracy and report.html over the evaluated folds here.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    args = build_parser().parse_args(argv)
    templates = tuple(args.templates or ESC50_DEFAULT_TEMPLATES)
    model = AtrDualEncoderModel.from_pretrained(args.model).to(args.device).eval()
    processor = AtrProcessor.from_pretrained(args.model)
    folds = load_esc50(args.esc50_dir, folds=args.folds, templates=templates, missing=args.missing)
    class_names = sorted(set(concatenate_datasets(list(folds.values()))["label"]))

    min_clips = args.min_clips if args.min_clips is not None else len(class_names)
    counts = {split: len(fold) for split, fold in folds.items()}
    evaluated = [split for split, count in counts.items() if count >= min_clips]
    print(f"Zero-shot ESC-50, {len(class_names)} classes, templates {list(templates)}")
    for split, count in counts.items():
        verdict = "" if split in evaluated else f" < {min_clips} (--min-clips): no metrics"
        print(f"{split}: {count} clip(s){verdict}")
    if not evaluated:
        raise SystemExit(
            f"No fold has at least {min_clips} clips ({counts}): no metrics. Check the clips skipped above, "
            "or lower --min-clips."
        )

    clips = concatenate_datasets([folds[split] for split in evaluated])
    evaluator = ZeroShotEvaluator(
        clips,
        processor,
        labels=class_names,
        templates=templates,
        batch_size=args.batch_size,
        split="+".join(evaluated),
    )
    predictions = evaluator.predict(model)
    results: dict[str, dict[str, float]] = {}
    start = 0
    for split in evaluated:
        rows = range(start, start + counts[split])
        fold = predictions.select(rows)  # clips that could not be decoded were left out (and named)
        results[split] = {**fold.metrics(), "clips": len(fold.true_classes)}
        start = rows.stop
    if len(evaluated) > 1:
        results["all"] = {**predictions.metrics(), "clips": len(predictions.true_classes)}

    print(f"{'split':>8} {'clips':>6} " + " ".join(f"{name:>22}" for name in METRICS))
    for split, metrics in results.items():
        print(
            f"{split:>8} {metrics['clips']:>6} "
            + " ".join(f"{100 * metrics[name]:>22.2f}" for name in METRICS)
        )
    if args.output_json is not None:
        args.output_json.write_text(json.dumps(results, indent=2))
    if args.report is not None:
        report = evaluator.write_report(predictions, args.report)
        print(f"Report written to {report.path}")
    return results


if __name__ == "__main__":
    main()
