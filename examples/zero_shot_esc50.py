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

Every fold is classified among all the classes of ``meta/esc50.csv`` (50 in the release, recorded by the loader
however few clips a fold holds), and chance is printed under the table.

``--report DIR`` writes the confusion matrix and per-class accuracy over the evaluated folds, with a
``report.html`` (needs ``pip install 'hf-atr[plots]'``).

Each fold's clip count is printed; a fold with fewer clips than ``--min-clips`` (default: one per class,
:func:`hf_atr.evaluation.zero_shot.minimum_clips`, the rule ``hf-atr evaluate --zero-shot`` flags by) gets no
metrics (clips skipped with ``--missing skip`` can leave a fold nearly empty, and its numbers would mean
nothing).

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

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.commands.build_dataset.builder_options import ENCODING_OPTION, add_options
from hf_atr.commands.build_dataset.dataset_output import exit_on_input_error
from hf_atr.data.corpus_utils import expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS, load_esc50
from hf_atr.data.schema import class_list, corpus_provenance
from hf_atr.evaluation.zero_shot import METRIC_NAMES, ZeroShotEvaluator, minimum_clips


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
    add_options(parser, [ENCODING_OPTION])
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
    parser = build_parser()
    args = parser.parse_args(argv)
    templates = tuple(args.templates or ESC50_DEFAULT_TEMPLATES)
    model = AtrDualEncoderModel.from_pretrained(args.model).to(args.device).eval()
    processor = AtrProcessor.from_pretrained(args.model)
    with exit_on_input_error(parser):
        folds = load_esc50(
            args.esc50_dir,
            folds=args.folds,
            templates=templates,
            missing=args.missing,
            encoding=args.encoding,
        )
    classes = class_list(corpus_provenance(next(iter(folds.values()))))  # the 50 of esc50.csv, in its order
    min_clips = args.min_clips if args.min_clips is not None else minimum_clips(len(classes))
    counts = {split: len(fold) for split, fold in folds.items()}
    evaluated = [split for split, count in counts.items() if count >= min_clips]
    print(
        f"Zero-shot ESC-50, {len(classes)} classes (chance accuracy {100 / len(classes):.2f} %), "
        f"templates {list(templates)}"
    )
    for split, count in counts.items():
        verdict = "" if split in evaluated else f" < {min_clips} (--min-clips): no metrics"
        print(f"{split}: {count} clip(s){verdict}")
    if not evaluated:
        raise SystemExit(
            f"No fold has at least {min_clips} clips ({counts}): no metrics. Check the clips skipped above, "
            "or lower --min-clips."
        )

    evaluator = ZeroShotEvaluator(
        {split: folds[split] for split in evaluated},
        processor,
        templates=templates,
        batch_size=args.batch_size,
        min_clips=min_clips,
    )
    predictions = evaluator.predict(model)  # clips that could not be decoded are left out (and named)
    results = evaluator.split_results(predictions)

    print(f"{'split':>8} {'clips':>6} " + " ".join(f"{name:>22}" for name in METRIC_NAMES))
    for split, metrics in results.items():
        print(
            f"{split:>8} {metrics['clips']:>6} "
            + " ".join(
                f"{100 * metrics[name]:>22.2f}" if name in metrics else f"{'—':>22}" for name in METRIC_NAMES
            )
        )
    chance = evaluator.protocol["chance"]
    print(
        f"{'chance':>8} {'':>6} "
        + " ".join(
            f"{100 * chance[name]:>22.2f}" if name in chance else f"{'—':>22}" for name in METRIC_NAMES
        )
    )
    if args.output_json is not None:
        args.output_json.write_text(json.dumps(results, indent=2))
    if args.report is not None:
        report = evaluator.write_report(predictions, args.report)
        print(f"Report written to {report.path}")
    return results


if __name__ == "__main__":
    main()
