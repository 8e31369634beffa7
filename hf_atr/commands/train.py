"""``hf-atr train``: its entry in the command line, which hands its arguments to ``HfArgumentParser``.

Building that parser imports transformers (``TrainingArguments``), so it is built only when ``train`` runs
(``hf-atr train --help`` included), and ``hf-atr --help`` stays light. The arguments are in
:mod:`hf_atr.commands.train_arguments`, the work in :mod:`hf_atr.commands.fine_tune`.
"""

from __future__ import annotations

import argparse
from typing import Any

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
    from .fine_tune import run_train_command

    return run_train_command(arguments)


__all__ = ["add_train_parser", "run_train"]
