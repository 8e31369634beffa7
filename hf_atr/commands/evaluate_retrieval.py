"""``hf-atr evaluate``'s retrieval (its default mode): R@k both ways, mAP@c and, with several languages, MRV of a
model on one split, with its options (languages, cutoffs, relevance judgements) and the printed results."""

from __future__ import annotations

import argparse
from typing import Any

from .common import write_evaluation_output
from .evaluate_splits import evaluated_set

RETRIEVAL_OPTIONS = {
    "--languages": "languages",
    "--map-cutoffs": "map_cutoffs",
    "--relevance": "relevance",
    "--relevance-threshold": "relevance_threshold",
    "--relevance-missing": "relevance_missing",
}
"""``hf-atr evaluate`` options of retrieval (option -> attribute), refused with ``--zero-shot``."""


def add_retrieval_arguments(parser: argparse.ArgumentParser) -> None:
    """The group ``retrieval (the default)``: ``--languages``, ``--map-cutoffs`` and the relevance judgements."""
    retrieval = parser.add_argument_group("retrieval (the default)")
    retrieval.add_argument(
        "--languages",
        nargs="+",
        default=None,
        help="caption languages (ISO 639-3, e.g. eng fra deu); default English only",
    )
    retrieval.add_argument(
        "--map-cutoffs",
        type=int,
        nargs="+",
        default=None,
        help="cutoffs c of mAP@c, e.g. 10 16 (DCASE 2025 ranks by mAP@16; default: the library's, mAP@10)",
    )
    retrieval.add_argument(
        "--relevance",
        default=None,
        help="relevance judgements of the split (CSV, see docs/corpora.md): several relevant clips per caption",
    )
    retrieval.add_argument(
        "--relevance-threshold",
        type=float,
        default=None,
        help="graded judgements: a pair is relevant when its relevance is >= this value",
    )
    retrieval.add_argument(
        "--relevance-missing",
        choices=("error", "skip"),
        default=None,
        help="a judged caption or file the split lacks: stop (the default, error) or skip it and report",
    )


def run_retrieval_evaluation(
    args: argparse.Namespace, model: Any, processor: Any, dataset: Any, split: str | None, windowing: Any
) -> int:
    """``hf-atr evaluate`` (retrieval): the metrics of ``model`` on ``dataset``, printed and, with ``--output`` /
    ``--report``, written."""
    from hf_atr.metrics.tables import format_metric

    try:
        evaluator = _retrieval_evaluator(args, dataset, split, processor, windowing)
        if args.report:
            try:
                report = evaluator.report(model, args.report)
            except ImportError as error:
                raise SystemExit(f"hf-atr evaluate --report: {error}") from error
            metrics = report.metrics
        else:
            metrics = evaluator(model)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    protocol = evaluator.protocol
    relevance = (
        f"relevance judgements {protocol['relevance_file']}"
        if protocol["relevance"] == "judgements"
        else "each caption's own clip relevant"
    )
    print(
        f"Retrieval on {evaluated_set(args, split, protocol)}, {protocol['captions']} captions, {relevance}; ties "
        "count against the relevant item); recall and mAP in %, ranks 1-based:"
    )
    width = max(len(name) for name in metrics)
    for name, value in metrics.items():
        print(f"  {name:<{width}}  {format_metric(name, value)}")
    write_evaluation_output(
        args, {"metrics": metrics, "protocol": protocol}, None if not args.report else report.path
    )
    return 0


def _retrieval_evaluator(
    args: argparse.Namespace, dataset: Any, split: str | None, processor: Any, windowing: Any
) -> Any:
    """The :class:`~hf_atr.evaluation.evaluator.RetrievalEvaluator` of the command line."""
    from hf_atr.evaluation.evaluator import RetrievalEvaluator
    from hf_atr.metrics.ranks import DEFAULT_MAP_CUTOFFS

    missing = {} if args.relevance_missing is None else {"relevance_missing": args.relevance_missing}
    return RetrievalEvaluator(
        dataset,
        processor,
        languages=args.languages,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
        relevance=args.relevance,
        relevance_threshold=args.relevance_threshold,
        map_cutoffs=args.map_cutoffs or DEFAULT_MAP_CUTOFFS,
        windowing=windowing,
        strict=args.strict,
        **missing,
    )


__all__ = ["RETRIEVAL_OPTIONS", "add_retrieval_arguments", "run_retrieval_evaluation"]
