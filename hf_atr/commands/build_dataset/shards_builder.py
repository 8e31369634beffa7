"""The ``shards`` row of ``hf-atr build-dataset``: a saved ``DatasetDict`` written as WebDataset or parquet shards
(:func:`hf_atr.data.shards.write_audio_text_shards`), one folder per split."""

from __future__ import annotations

import argparse

from datasets import load_from_disk

from hf_atr.commands.build_dataset.builder_options import missing_option, option, path_argument, splits_option
from hf_atr.commands.build_dataset.builder_rows import Builder
from hf_atr.commands.build_dataset.dataset_output import exit_on_input_error
from hf_atr.data.corpus_utils import expand_path
from hf_atr.data.shards import DEFAULT_CLIPS_PER_SHARD, SHARD_FORMATS, write_audio_text_shards


def write_shards(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run of ``shards``: each chosen split of the saved ``DatasetDict`` as shards in ``<output-dir>/<split>/``.

    A bad clip under ``--missing error`` ends the command with its message; the splits written before it are kept.
    """
    with exit_on_input_error(parser):
        dataset = load_from_disk(str(args.dataset_dir))
    splits = args.splits or list(dataset)
    unknown = sorted(set(splits) - set(dataset))
    if unknown:
        parser.error(f"{args.dataset_dir} has no split(s) {unknown}; it has {sorted(dataset)}.")
    for split in splits:
        clips = dataset[split]
        num_shards = None if args.num_shards is None else min(args.num_shards, max(1, len(clips)))
        with exit_on_input_error(parser):
            report = write_audio_text_shards(
                clips,
                args.output_dir / split,
                shard_format=args.format,
                num_shards=num_shards,
                clips_per_shard=args.clips_per_shard,
                missing=args.missing,
            )
        print(
            f"{split}: {report.clips} clips in {len(report.files)} {args.format} shards in {args.output_dir / split}"
        )
        for audio_id, reason in report.skipped:
            print(f"  skipped {audio_id}: {reason}")
    return 0


SHARDS_BUILDER = Builder(
    help="write a saved DatasetDict as WebDataset or parquet shards, for streamed training",
    description="Write a saved shared-schema DatasetDict as WebDataset (.tar: <key>.flac/.wav + <key>.json "
    "with 'text') or parquet shards, one folder per split.",
    arguments=(
        path_argument("dataset_dir", "A DatasetDict saved with save_to_disk."),
        option("--output-dir", type=expand_path, required=True, help="Folder for <split>/ shard folders."),
        option("--format", choices=SHARD_FORMATS, default="webdataset", help="Shard format."),
        splits_option("Splits to write (default: all)."),
        option(
            "--num-shards",
            type=int,
            help="Shards per split (capped at the split's clip count).",
            exclusive="size",
        ),
        option(
            "--clips-per-shard",
            type=int,
            default=DEFAULT_CLIPS_PER_SHARD,
            help="Clips per shard without --num-shards.",
            exclusive="size",
        ),
        missing_option("clips with unreadable audio"),
    ),
    run=write_shards,
)
"""``hf-atr build-dataset shards`` and ``datasets_scripts/write_shards.py``."""


__all__ = ["SHARDS_BUILDER", "write_shards"]
