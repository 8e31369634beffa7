"""The ``hf-atr`` command line: the root parser and the table of its sub-commands.

Each sub-command is a module of :mod:`hf_atr.commands` whose ``add_<command>_parser(subparsers)`` adds its parser
(built from argparse alone, so ``hf-atr --help`` and ``hf-atr <command> --help`` stay light) with a ``handler``
that takes the parsed arguments and returns the exit status (its heavy imports are inside it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .commands.build_dataset.command import add_build_dataset_parser
from .commands.demo import add_demo_parser
from .commands.evaluate import add_evaluate_parser
from .commands.export import add_export_parser
from .commands.index import add_index_parser
from .commands.search import add_search_parser
from .commands.serve import add_serve_parser
from .commands.train.command import add_train_parser

SUBCOMMANDS = (
    add_demo_parser,
    add_train_parser,
    add_index_parser,
    add_search_parser,
    add_evaluate_parser,
    add_serve_parser,
    add_export_parser,
    add_build_dataset_parser,
)
"""The sub-commands in the order ``hf-atr --help`` lists them: each adds its parser to the root's subparsers."""


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-atr`` parser with every sub-command of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="hf-atr", description="Audio-text retrieval with the Hugging Face stack."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add_parser in SUBCOMMANDS:
        add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``hf-atr ARGS``: parse ``argv`` (``None``: ``sys.argv[1:]``) and run the sub-command; returns its exit
    status. transformers' progress bars are turned off first for a command that loads a model."""
    args = build_parser().parse_args(argv)
    if getattr(args, "loads_model", True):  # build-dataset loads none: it imports no transformers
        _quiet_transformers_progress_bars()
    return args.handler(args)


def _quiet_transformers_progress_bars() -> None:
    """Turn off transformers' own progress bars ("Loading weights", "Writing model shards"), which every command
    would print for loading or saving a model in a fraction of a second. transformers' switch turns off
    huggingface_hub's bars too: those (a model's first download from the Hub) are left as they were."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging

    hub_bars_shown = not are_progress_bars_disabled()
    logging.disable_progress_bar()
    if hub_bars_shown:
        enable_progress_bars()


__all__ = ["SUBCOMMANDS", "build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
