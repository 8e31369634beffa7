"""``hf-atr evaluate --moments``: moment retrieval metrics of a model on a moment dataset.

Each recording is encoded once, window by window, all its queries scored against it; the proposer turns each
query's similarity curve into moments (:class:`~hf_atr.evaluation.moment_evaluator.MomentEvaluator`). The
command prints the five metrics and the protocol, writes the predictions (``qid``, ``pred_relevant_windows``) as
JSON Lines, and with ``--report`` the page with the timelines of a sample of queries.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .moment_options import add_moment_arguments

MOMENTS_HELP = (
    "find when each query's sound happens in its recording (a moment dataset: --dataset moments --data-dir DIR of "
    "<corpus>_<split>_release.jsonl files, one such .jsonl file, or a saved dataset of hf_atr.load_moments rows) "
    "and report R1@0.5, R1@0.7, mAP@0.5, mAP@0.75 and mAP; each recording is encoded once, window by window "
    "(--window-seconds, default the extractor's window; --hop-seconds, default 1 s, or half the window when that "
    "is shorter)"
)
"""``hf-atr evaluate --moments``'s help (the option is declared in :mod:`hf_atr.commands.moment_options`)."""
CLIP_RETRIEVAL_OPTIONS = {
    "--zero-shot": "zero_shot",
    "--window-pooling": "window_pooling",
    "--languages": "languages",
    "--map-cutoffs": "map_cutoffs",
    "--relevance": "relevance",
}
"""``hf-atr evaluate`` options of clip retrieval and classification (option -> attribute), refused with ``--moments``."""


def add_moment_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--moments`` and its options (:func:`~hf_atr.commands.moment_options.add_moment_arguments`; the window and
    hop are ``--window-seconds`` / ``--hop-seconds``), and ``--predictions``."""
    group = add_moment_arguments(parser, MOMENTS_HELP)
    group.add_argument(
        "--predictions",
        default=None,
        metavar="FILE",
        help="write the predictions (qid, pred_relevant_windows) as JSON Lines here (default: "
        "predictions.jsonl in --report DIR, else none)",
    )


def run_moment_evaluation(args: argparse.Namespace, proposal: Any) -> int:
    """``hf-atr evaluate --moments``, its moments proposed as ``proposal`` says
    (:func:`~hf_atr.commands.moment_options.moment_proposal`)."""
    from transformers import AutoModel, AutoProcessor

    from hf_atr.evaluation.moment_evaluator import PREDICTIONS_FILE, MomentEvaluator

    from .common import checked_model, model_dtype_arguments, write_evaluation_output
    from .moment_data import moment_results

    misplaced = [option for option, name in CLIP_RETRIEVAL_OPTIONS.items() if getattr(args, name)]
    if misplaced:
        raise SystemExit(
            f"hf-atr evaluate: {', '.join(misplaced)} {'apply' if len(misplaced) > 1 else 'applies'} to clip "
            "retrieval, not to --moments."
        )
    if args.report:
        from hf_atr.plots.canvas import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as error:
            raise SystemExit(f"hf-atr evaluate --report: {error}") from error
    moments, split = _moment_split(args)
    model_path = checked_model(args.model)
    model = AutoModel.from_pretrained(model_path, **model_dtype_arguments(args))
    processor = AutoProcessor.from_pretrained(model_path)
    try:
        evaluator = MomentEvaluator(
            moments,
            processor,
            proposal=proposal,
            hop_seconds=args.hop_seconds,
            window_seconds=args.window_seconds,
            batch_size=args.batch_size,
            strict=args.strict,
            show_progress=True,
            split=split,
        )
        evaluation = evaluator.evaluate(model)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    print(
        f"Moment retrieval on {args.dataset} ({split}): {moment_results(evaluation.metrics, evaluation.protocol)}"
    )
    predictions = args.predictions or (Path(args.report) / PREDICTIONS_FILE if args.report else None)
    if predictions is not None:
        print(f"Predictions written to {evaluation.write_predictions(predictions)}")
    report = evaluator.write_report(evaluation, args.report) if args.report else None
    write_evaluation_output(args, {"metrics": evaluation.metrics, "protocol": evaluation.protocol}, report)
    return 0


def _moment_split(args: argparse.Namespace) -> tuple[Any, str]:
    """The moment split ``--dataset`` / ``--data-dir`` / ``--split`` name, and its name."""
    from hf_atr.data.moments import is_moment_dataset

    from .moment_data import load_moment_corpus

    try:
        corpus = load_moment_corpus(args.dataset, args.data_dir, missing=args.missing)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    if args.split not in corpus:
        raise SystemExit(
            f"hf-atr evaluate: --split: {args.dataset} has no split {args.split!r}; its splits: {sorted(corpus)}."
        )
    moments = corpus[args.split]
    if not is_moment_dataset(moments):
        raise SystemExit(
            f"hf-atr evaluate --moments: {args.dataset} ({args.split}) is not a moment dataset (columns "
            f"{moments.column_names}); give moment annotations (hf_atr.load_moments)."
        )
    return moments, args.split


__all__ = [
    "CLIP_RETRIEVAL_OPTIONS",
    "MOMENTS_HELP",
    "add_moment_evaluation_arguments",
    "run_moment_evaluation",
]
