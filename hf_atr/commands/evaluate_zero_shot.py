"""``hf-atr evaluate --zero-shot``: zero-shot classification metrics (accuracy, balanced accuracy, mAP@10) of a
model on one or several labelled splits, with its options (classes, label column, prompt templates) and the printed
table beside chance."""

from __future__ import annotations

import argparse
from typing import Any

from .common import write_evaluation_output
from .evaluate_splits import evaluated_set

ZERO_SHOT_OPTIONS = {
    "--labels": "labels",
    "--label-column": "label_column",
    "--template": "templates",
    "--min-clips": "min_clips",
}
"""``hf-atr evaluate`` options of ``--zero-shot`` (option -> attribute), refused without it."""


def add_zero_shot_arguments(parser: argparse.ArgumentParser) -> None:
    """The group ``zero-shot classification (--zero-shot)``: ``--zero-shot`` and its options."""
    zero_shot = parser.add_argument_group("zero-shot classification (--zero-shot)")
    zero_shot.add_argument(
        "--zero-shot",
        action="store_true",
        help="classify each clip into the classes of --label-column by caption prompts, instead of retrieval",
    )
    zero_shot.add_argument(
        "--labels",
        nargs="+",
        default=None,
        help="the classes to choose from (default: the dataset's class list, as the ESC-50 loader records all 50, "
        "else the split's distinct labels, with a warning); every clip's label must be one",
    )
    zero_shot.add_argument(
        "--label-column", default=None, help="the column holding each clip's class (default: label)"
    )
    zero_shot.add_argument(
        "--template",
        dest="templates",
        action="append",
        default=None,
        help="prompt template with {} or {class}; repeat to average several (default: 'This is a sound of {class}.')",
    )
    zero_shot.add_argument(
        "--min-clips",
        type=int,
        default=None,
        help="a split with fewer clips is flagged as too few to measure (default: the number of classes, one clip "
        "per class)",
    )


def run_zero_shot_evaluation(
    args: argparse.Namespace, model: Any, processor: Any, dataset: Any, split: str | None, windowing: Any
) -> int:
    """``hf-atr evaluate --zero-shot``: the figures of every split evaluated (and of all of them), beside chance,
    with the splits too small to measure flagged."""
    from hf_atr.plots.canvas import require_matplotlib

    try:
        evaluator = _zero_shot_evaluator(args, dataset, split, processor, windowing)
        if args.report:
            try:
                require_matplotlib()
            except ImportError as error:
                raise SystemExit(f"hf-atr evaluate --report: {error}") from error
        predictions = evaluator.predict(model)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    results = evaluator.split_results(predictions)
    protocol = evaluator.protocol
    print(
        f"Zero-shot classification on {evaluated_set(args, split, protocol)}, {protocol['classes']} classes from "
        f"{protocol['classes_from']}, templates {protocol['templates']}; a tie with the true class counts against "
        "it); in %, beside chance (the classes ranked at random):"
    )
    print("\n".join(_zero_shot_table(results, protocol["chance"])))
    flagged = [
        f"{name} ({figures['clips']} clips)" for name, figures in results.items() if figures["too_few_clips"]
    ]
    if flagged:
        print(
            f"Too few clips to measure {protocol['classes']} classes (fewer than {protocol['min_clips']}, "
            f"--min-clips): {', '.join(flagged)}; these figures are not a measurement."
        )
    report_path = evaluator.write_report(predictions, args.report).path if args.report else None
    whole = list(results.values())[-1]
    metrics = {name: value for name, value in whole.items() if name not in ("clips", "too_few_clips")}
    write_evaluation_output(args, {"metrics": metrics, "splits": results, "protocol": protocol}, report_path)
    return 0


def _zero_shot_table(results: dict[str, dict[str, Any]], chance: dict[str, float]) -> list[str]:
    """The lines of the zero-shot results: a row per metric (and the clip count), a column per split and chance."""
    from hf_atr.evaluation.zero_shot import METRIC_NAMES
    from hf_atr.metrics.tables import format_metric

    def text(name: str, value: float | None) -> str:
        return "—" if value is None else str(value) if name == "clips" else format_metric(name, value)

    names = ["clips", *METRIC_NAMES]
    columns = [*results, "chance"]
    label_width = max(len(name) for name in names)
    widths = [max(len(column), 6) for column in columns]
    lines = [
        "  " + " " * label_width + "".join(f"  {column:>{width}}" for column, width in zip(columns, widths))
    ]
    for name in names:
        cells = [text(name, figures.get(name)) for figures in results.values()]
        cells.append("" if name == "clips" else text(name, chance.get(name)))
        row = f"  {name:<{label_width}}" + "".join(f"  {cell:>{width}}" for cell, width in zip(cells, widths))
        lines.append(row.rstrip())
    return lines


def _zero_shot_evaluator(
    args: argparse.Namespace, dataset: Any, split: str | None, processor: Any, windowing: Any
) -> Any:
    """The :class:`~hf_atr.evaluation.zero_shot.ZeroShotEvaluator` of the command line."""
    from hf_atr.evaluation.zero_shot import LABEL_COLUMN, ZeroShotEvaluator

    return ZeroShotEvaluator(
        dataset,
        processor,
        labels=args.labels,
        label_column=args.label_column or LABEL_COLUMN,
        templates=args.templates,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
        windowing=windowing,
        strict=args.strict,
        min_clips=args.min_clips,
    )


__all__ = [
    "ZERO_SHOT_OPTIONS",
    "add_zero_shot_arguments",
    "run_zero_shot_evaluation",
]
