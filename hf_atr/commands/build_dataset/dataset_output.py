"""What a builder's output options do with the ``DatasetDict`` it made: filter it, write it, and end on bad input.

:func:`check_export_arguments` and :func:`export_dataset_dict` act on :data:`~hf_atr.commands.build_dataset.builder_options.
OUTPUT_OPTIONS` (``save_to_disk``, Parquet, the Hub), :func:`apply_overlap_arguments` on :data:`~hf_atr.commands.
builder_options.OVERLAP_OPTIONS` (:mod:`hf_atr.data.overlap`); :func:`exit_on_input_error` turns a problem with the
input into one line and exit status 1. Imports ``datasets``: only once a builder runs.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from datasets import DatasetDict, load_from_disk

from hf_atr.data.corpus_utils import embed_audio_bytes
from hf_atr.data.overlap import read_wavcaps_blocklist, remove_overlap
from hf_atr.lazy import get_logger

logger = get_logger(__name__)


@contextlib.contextmanager
def exit_on_input_error(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Within the block, a problem with the command's input (a loader's ``FileNotFoundError``, or a ``ValueError``
    such as ``CorpusFormatError`` or ``AudioDecodeError``, whose messages name the file, line, field or value) ends
    the command with that message and exit status 1 instead of a traceback."""
    try:
        yield
    except (FileNotFoundError, ValueError) as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")


def check_export_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fail through ``parser.error`` (exit status 2) when no destination is given."""
    if args.output_dir is None and args.push_to_hub is None:
        parser.error("give --output-dir and/or --push-to-hub REPO.")
    if args.parquet and args.output_dir is None:
        parser.error("--parquet needs --output-dir.")


def apply_overlap_arguments(
    dataset: DatasetDict, args: argparse.Namespace
) -> tuple[DatasetDict, dict[str, str]]:
    """Run the overlap filter the options of :data:`OVERLAP_OPTIONS` ask for.

    Returns the filtered dataset and, per split, the filter's one-line summary for the command to show
    (``(dataset, {})`` when no option asks for the filter).
    """
    if not args.exclude_overlap_with and args.blocklist is None:
        return dataset, {}
    references = [load_from_disk(str(path)) for path in args.exclude_overlap_with]
    blocked = read_wavcaps_blocklist(args.blocklist) if args.blocklist is not None else set()
    filtered, reports = remove_overlap(dataset, references, by=args.overlap_by, exclude_source_ids=blocked)
    return filtered, {split: report.summary() for split, report in reports.items()}


def export_dataset_dict(dataset: DatasetDict, args: argparse.Namespace) -> list[str]:
    """Write ``dataset`` as the options of :data:`OUTPUT_OPTIONS` ask; returns what was written.

    ``save_to_disk`` and ``push_to_hub`` copy the audio files' bytes into the dataset (``datasets`` embeds
    local files of ``Audio`` columns), so their output no longer needs the corpus directory; Parquet keeps
    the absolute paths unless ``--embed-audio`` is given.
    """
    empty = [split for split, split_dataset in dataset.items() if len(split_dataset) == 0]
    if empty:
        # datasets cannot reload a saved 0-row split (IndexError); an empty split is never worth writing.
        logger.warning(f"Not writing empty split(s) {empty}.")
        dataset = DatasetDict({split: data for split, data in dataset.items() if split not in empty})
        if not dataset:
            raise ValueError(f"Every split is empty ({empty}); nothing to write.")
    written = []
    if args.output_dir is not None:
        if args.parquet:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            parquet_dataset = embed_audio_bytes(dataset) if args.embed_audio else dataset
            for split, split_dataset in parquet_dataset.items():
                parquet_path = args.output_dir / f"{split}.parquet"
                split_dataset.to_parquet(parquet_path)
                written.append(str(parquet_path))
        else:
            dataset.save_to_disk(args.output_dir)
            written.append(str(args.output_dir))
    if args.push_to_hub is not None:
        dataset.push_to_hub(args.push_to_hub, private=args.private)
        written.append(f"hub:{args.push_to_hub}")
    return written
