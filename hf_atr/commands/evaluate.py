"""``hf-atr evaluate``: its parser and its dispatch. Retrieval metrics (R@k both ways, mAP@c, MRV,
:mod:`~hf_atr.commands.evaluate_retrieval`), zero-shot classification metrics (``--zero-shot``,
:mod:`~hf_atr.commands.evaluate_zero_shot`) or moment retrieval metrics (``--moments``,
:mod:`~hf_atr.commands.evaluate_moments`) of a model on one split (or, zero-shot, several) of a saved dataset,
``synthcaps`` or a corpus read by its loader (:mod:`~hf_atr.commands.evaluate_splits`), with the protocol
(``--output``) and a report (``--report``)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import (
    add_dtype_argument,
    add_windowing_arguments,
    checked_model,
    model_dtype_arguments,
    parsed_windowing,
)
from .evaluate_moments import add_moment_evaluation_arguments, run_moment_evaluation
from .evaluate_retrieval import RETRIEVAL_OPTIONS, add_retrieval_arguments, run_retrieval_evaluation
from .evaluate_splits import ALL_SPLITS, evaluation_split
from .evaluate_zero_shot import ZERO_SHOT_OPTIONS, add_zero_shot_arguments, run_zero_shot_evaluation
from .moment_options import moment_proposal


def add_evaluate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr evaluate --model DIR --dataset {DIR,synthcaps}``."""
    parser = subparsers.add_parser(
        "evaluate",
        help="retrieval metrics of a model on a dataset (R@k both ways, mAP@c, MRV), or zero-shot "
        "classification metrics",
        description="Encode every clip and caption of one split once and report text-to-audio and "
        "audio-to-text R@1/5/10 and mAP@10 (--map-cutoffs for others, e.g. 10 16) and, with several "
        "--languages, per-language values and MRV. Ties count against the relevant item, so a collapsed "
        "model scores at chance or below. --relevance FILE evaluates with several relevant clips per caption "
        "(DCASE 2025 judgements: a caption,file_name,relevance CSV with --relevance-threshold, or the "
        "query,audio_filenames lists); only the judged captions are queries. --zero-shot classifies the clips "
        "of a labelled split (a `label` column, as ESC-50 and synthcaps have) by prompts of every class "
        "instead: accuracy, balanced accuracy, mAP@10. "
        "--dataset is a DatasetDict (or Dataset) saved with `save_to_disk` in the hf-atr schema "
        "(audio, audio_id, captions, optional translations and label), or `synthcaps` to generate the "
        "embedded synthetic corpus. Each clip is encoded as the model's own protocol reads it (a clip longer "
        "than the feature extractor's window is cut to it, and the cut clips are named in a warning; CLAP "
        "fusion reads the whole clip); --window-pooling embeds long clips window by window and pools them. "
        "Clips that cannot be decoded are left out with their captions (or labels) and reported, unless "
        "--strict. All of it is recorded in the protocol (--output). --report DIR also writes figures and a "
        "report.html (R@k curves, rank histograms, the transport plan of an OT-trained model; for "
        "--zero-shot the confusion matrix and per-class accuracy).",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument(
        "--dataset",
        required=True,
        help="a `save_to_disk` directory, `synthcaps`, or a loader name (audiocaps, clotho, esc50, wavcaps, "
        "audiofolder) with --data-dir",
    )
    parser.add_argument(
        "--split",
        default="test",
        help="split of a DatasetDict (default: test); with --zero-shot several, comma-separated (fold2,fold4), or "
        f"`{ALL_SPLITS}` for every split: encoded once, figures per split and over all of them",
    )
    loader = parser.add_argument_group("a corpus read by its loader (--dataset audiocaps|clotho|esc50|...)")
    loader.add_argument(
        "--data-dir", default=None, help="the corpus in its official layout (WavCaps: its JSON file)"
    )
    loader.add_argument(
        "--missing",
        choices=("error", "skip"),
        default=None,
        help="rows whose audio file is missing: stop (the loader's default) or skip them with a warning",
    )
    loader.add_argument(
        "--encoding", default=None, help="text encoding of the metadata files (default: utf-8)"
    )
    parser.add_argument(
        "--num-test", type=int, default=100, help="test clips when --dataset synthcaps (default: 100)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="clips per forward pass (default: 32)")
    add_dtype_argument(parser)
    parser.add_argument(
        "--window-pooling",
        choices=("mean", "max"),
        default=None,
        help="embed clips longer than the feature extractor's window window by window and pool them "
        "(default: the model's own protocol, one forward pass per clip)",
    )
    add_windowing_arguments(parser, "--window-pooling")
    parser.add_argument("--strict", action="store_true", help="stop at the first clip that cannot be decoded")
    parser.add_argument(
        "--output",
        default=None,
        help='also write {"metrics": {...}, "protocol": {...}} to this JSON file: the metrics and how they '
        "were obtained (tie rule, split, corpus and official clip count, clips, captions or classes, "
        "languages, relevance file, cutoffs, scoring, window pooling, clips cut to the window, skipped clips)",
    )
    parser.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="also write PNG figures and report.html (figures, metrics table, protocol; opens offline) to DIR; "
        "needs matplotlib: pip install 'hf-atr[plots]'",
    )
    add_retrieval_arguments(parser)
    add_zero_shot_arguments(parser)
    add_moment_evaluation_arguments(parser)
    parser.set_defaults(handler=run_evaluate)
    return parser


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr evaluate``: moment retrieval (``--moments``), zero-shot classification (``--zero-shot``)
    or retrieval."""
    proposal = moment_proposal(args, "hf-atr evaluate")
    if args.moments:
        return run_moment_evaluation(args, proposal)
    from transformers import AutoModel, AutoProcessor

    _refuse_options_of_the_other_mode(args)
    windowing = None if args.window_pooling is None else parsed_windowing(args, args.window_pooling)
    dataset, split = evaluation_split(args)
    model_path = checked_model(args.model)
    model = AutoModel.from_pretrained(model_path, **model_dtype_arguments(args))
    processor = AutoProcessor.from_pretrained(model_path)
    if args.zero_shot:
        return run_zero_shot_evaluation(args, model, processor, dataset, split, windowing)
    return run_retrieval_evaluation(args, model, processor, dataset, split, windowing)


def _refuse_options_of_the_other_mode(args: argparse.Namespace) -> None:
    """Retrieval options with ``--zero-shot``, zero-shot options without it, and a window length or hop
    without ``--window-pooling`` end the command naming them."""
    if args.window_pooling is None and (args.window_seconds is not None or args.hop_seconds is not None):
        raise SystemExit("--window-seconds / --hop-seconds apply with --window-pooling mean|max.")
    options = RETRIEVAL_OPTIONS if args.zero_shot else ZERO_SHOT_OPTIONS
    misplaced = [option for option, name in options.items() if getattr(args, name) is not None]
    if misplaced:
        names = ", ".join(misplaced[:-1]) + (" and " if len(misplaced) > 1 else "") + misplaced[-1]
        target = "retrieval, not to --zero-shot" if args.zero_shot else "--zero-shot"
        raise SystemExit(f"hf-atr evaluate: {names} appl{'y' if len(misplaced) > 1 else 'ies'} to {target}.")


__all__ = ["add_evaluate_parser", "run_evaluate"]
