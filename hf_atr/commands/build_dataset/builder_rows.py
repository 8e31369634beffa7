"""What a row of ``hf-atr build-dataset``'s table is: :class:`Builder`, and the row that writes a ``DatasetDict``.

A builder is its line in ``--help``, its description, its arguments (:class:`~hf_atr.commands.build_dataset.builder_options.Option`)
and ``run(parser, args) -> exit status``. :func:`dataset_builder` makes the common kind: a function that makes a
``DatasetDict`` from the arguments, its output written by the output options (overlap filter first, for training
data). The table itself is :data:`hf_atr.commands.build_dataset.dataset_builders.BUILDERS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from datasets import DatasetDict

from hf_atr.commands.build_dataset.builder_options import OUTPUT_OPTIONS, OVERLAP_OPTIONS, Option
from hf_atr.commands.build_dataset.dataset_output import (
    apply_overlap_arguments,
    check_export_arguments,
    exit_on_input_error,
    export_dataset_dict,
)


@dataclass(frozen=True)
class Builder:
    """One row of :data:`BUILDERS`.

    Attributes:
        help: its line in ``hf-atr build-dataset --help``.
        description: the top of its own ``--help`` (and of its ``datasets_scripts/`` script's).
        arguments: its command-line arguments, in the order ``--help`` lists them.
        run: ``run(parser, args) -> exit status``, with the parser that parsed ``args`` (for its errors).
    """

    help: str
    description: str
    arguments: tuple[Option, ...]
    run: Callable[[argparse.ArgumentParser, argparse.Namespace], int]


DatasetMaker = Callable[[argparse.ArgumentParser, argparse.Namespace], DatasetDict]
"""``make(parser, args) -> DatasetDict``: what a :func:`dataset_builder` writes."""


def dataset_builder(
    help: str, description: str, arguments: Sequence[Option], make: DatasetMaker, *, overlap: bool = False
) -> Builder:
    """A builder that writes the ``DatasetDict`` ``make`` returns, as its output options say.

    Its arguments are ``arguments``, then the overlap filter's (with ``overlap``, for training data), then
    :data:`OUTPUT_OPTIONS`.
    """
    return Builder(
        help=help,
        description=description,
        arguments=(*arguments, *(OVERLAP_OPTIONS if overlap else ()), *OUTPUT_OPTIONS),
        run=partial(build_and_write, make, overlap),
    )


def build_and_write(
    make: DatasetMaker, overlap: bool, parser: argparse.ArgumentParser, args: argparse.Namespace
) -> int:
    """Run of a :func:`dataset_builder`: make the dataset, filter it (``overlap``), write it, print what was written."""
    check_export_arguments(parser, args)
    with exit_on_input_error(parser):
        dataset = make(parser, args)
        if overlap:
            dataset, overlap_summaries = apply_overlap_arguments(dataset, args)
            for split, summary in overlap_summaries.items():
                print(f"{split}: {summary}")
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


__all__ = ["Builder", "DatasetMaker", "build_and_write", "dataset_builder"]
