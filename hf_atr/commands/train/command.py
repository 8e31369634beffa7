"""``hf-atr train``: its entry in the command line, which hands its arguments to ``HfArgumentParser``.

Building that parser imports transformers (``TrainingArguments``), so it is built only when ``train`` runs
(``hf-atr train --help`` included), and ``hf-atr --help`` stays light. The arguments are in
:mod:`hf_atr.commands.train.train_arguments`, the work in :mod:`hf_atr.commands.train.fine_tune`; this module prints its
outcome.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .train_arguments import TrainArguments

TRAIN_HELP = (
    "fine-tune a model on a corpus or your own folder, evaluate it on the test split, save it with its card"
)


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr train [CONFIG.yaml] [--flag value ...]``: every argument goes to the sub-command's own parser.

    The sub-parser takes no options of its own (its prefix is a character no argument starts with), so
    ``--help`` and every ``TrainingArguments`` flag reach ``HfArgumentParser`` untouched.
    """
    parser = subparsers.add_parser("train", help=TRAIN_HELP, add_help=False, prefix_chars="\0")
    parser.add_argument("arguments", nargs="*")
    parser.set_defaults(handler=run_train)
    return parser


def run_train(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr train``: parse (``--help`` stops here, before any model code is imported), then run."""
    from .train_arguments import parse_train_arguments

    arguments = parse_train_arguments(args.arguments)
    return run_train_command(arguments)


def run_train_command(arguments: TrainArguments) -> int:
    """``hf-atr train``: run, then print the test results; returns the exit status."""
    from ...metrics.tables import results_table
    from ..moment_data import is_moment_protocol, moment_results
    from .fine_tune import run_training

    try:
        result = run_training(arguments)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"hf-atr train: {error}") from error
    if result.final is None:
        return 0
    final = result.final
    languages = arguments.data.languages
    print()
    if is_moment_protocol(final.protocol):
        print(f"Fine-tuned {result.starting_point}; moment retrieval on {result.test_name}: "
              f"{moment_results(final.metrics, final.protocol)}")  # fmt: skip
    else:
        print(f"Fine-tuned {result.starting_point}; test retrieval on {result.test_name} ({final.protocol['clips']} "
              f"clips, {final.protocol['captions']} captions; ties count against the relevant item), in %:")  # fmt: skip
        print(results_table(final.metrics, languages if len(languages) > 1 else None))
        official = final.protocol.get("official_clips")
        if official and final.protocol["clips"] < official:
            print(
                f"Incomplete test set: {final.protocol['clips']} of the {official} clips of the official split."
            )
    print(
        f"Model, processor and card saved to {final.model_dir}; metrics and protocol in {final.metrics_file}."
    )
    sys.stdout.flush()
    return 0


__all__ = ["add_train_parser", "run_train", "run_train_command"]
