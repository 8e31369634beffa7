"""``hf-atr build-dataset BUILDER ...``: its entry in the command line, and the function the scripts call.

``hf-atr build-dataset clotho ~/data/clotho --output-dir clotho_hf`` builds a ``DatasetDict`` in the shared schema
from a corpus on disk and writes it; ``translations`` adds caption translations to a saved one, ``shards`` writes
one as shards. The builders and their options are the table :data:`hf_atr.commands.build_dataset.dataset_builders.BUILDERS`,
which imports ``datasets`` and the loaders: it is imported only when the command runs (``hf-atr build-dataset
--help`` included), so ``hf-atr --help`` stays light. ``datasets_scripts/build_<corpus>.py`` runs the same builder
through :func:`build_dataset`, with the same options and output.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

BUILD_DATASET_HELP = (
    "build a dataset in the hf-atr schema from a corpus on disk (audiocaps, clotho, esc50, wavcaps, "
    "audiofolder), add caption translations to one, or write one as shards"
)


def add_build_dataset_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr build-dataset BUILDER [...]``: every argument goes to the command's own parser.

    The sub-parser takes no options of its own (its prefix is a character no argument starts with), so
    ``--help`` and every builder's options reach :func:`~hf_atr.commands.build_dataset.dataset_builders.command_parser`
    untouched.
    """
    parser = subparsers.add_parser(
        "build-dataset", help=BUILD_DATASET_HELP, add_help=False, prefix_chars="\0"
    )
    parser.add_argument("arguments", nargs="*")
    parser.set_defaults(handler=run_build_dataset, loads_model=False)
    return parser


def run_build_dataset(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr build-dataset``: parse the builder and its options, then run the builder."""
    from .dataset_builders import BUILDERS, command_parser

    parsed = command_parser().parse_args(args.arguments)
    return BUILDERS[parsed.builder].run(parsed.builder_parser, parsed)


def build_dataset(builder: str, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the builder named ``builder`` on ``argv`` (``None``: ``sys.argv[1:]``) as a program of its own.

    This is ``hf-atr build-dataset BUILDER`` without the builder's name on the command line:
    ``datasets_scripts/build_clotho.py ARGS`` is ``build_dataset("clotho", ARGS)``.

    Args:
        prog: the name its usage and errors start with (default: the running script's file name).

    Returns:
        The exit status (0); a bad command line exits with status 2, a problem with the input with status 1 and
        one line ``<prog>: error: <message>``.

    Raises:
        ValueError: ``builder`` names no builder.
    """
    from .dataset_builders import BUILDERS, single_builder_parser

    parser = single_builder_parser(builder, prog)
    return BUILDERS[builder].run(parser, parser.parse_args(argv))


__all__ = ["add_build_dataset_parser", "build_dataset", "run_build_dataset"]
