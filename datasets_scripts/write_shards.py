"""Write the splits of a shared-schema DatasetDict (saved by any ``build_*.py`` script) as WebDataset tar shards in
the LAION-CLAP layout or as parquet shards, for streamed training (``AtrTrainer`` with
``hf_atr.data.shards.load_audio_text_shards``).

Example::

    python datasets_scripts/build_wavcaps.py ... --output-dir wavcaps_freesound
    python datasets_scripts/write_shards.py wavcaps_freesound --output-dir wavcaps_shards --num-shards 64
    # wavcaps_shards/train/shard-00000.tar ... shard-00063.tar, sizes.json

Choose ``--num-shards`` as a multiple of the number of training processes, and at least the processes times the
DataLoader workers: each process streams its own shards, each worker its own part of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from datasets import load_from_disk

from hf_atr.data.corpus_utils import MISSING_POLICIES, exit_on_input_error, expand_path
from hf_atr.data.shards import DEFAULT_CLIPS_PER_SHARD, SHARD_FORMATS, write_audio_text_shards


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Write a saved shared-schema DatasetDict as WebDataset (.tar: <key>.flac/.wav + <key>.json with "
        "'text') or parquet shards, one folder per split.",
    )
    parser.add_argument("dataset_dir", type=expand_path, help="A DatasetDict saved with save_to_disk.")
    parser.add_argument(
        "--output-dir", type=expand_path, required=True, help="Folder for <split>/ shard folders."
    )
    parser.add_argument("--format", choices=SHARD_FORMATS, default="webdataset", help="Shard format.")
    parser.add_argument("--splits", nargs="+", help="Splits to write (default: all).")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--num-shards", type=int, help="Shards per split (capped at the split's clip count).")
    size.add_argument(
        "--clips-per-shard",
        type=int,
        default=DEFAULT_CLIPS_PER_SHARD,
        help="Clips per shard without --num-shards.",
    )
    parser.add_argument(
        "--missing",
        choices=MISSING_POLICIES,
        default="error",
        help="Raise on or skip clips with unreadable audio.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with exit_on_input_error(parser):
        dataset = load_from_disk(str(args.dataset_dir))
    splits = args.splits or list(dataset)
    unknown = sorted(set(splits) - set(dataset))
    if unknown:
        parser.error(f"{args.dataset_dir} has no split(s) {unknown}; it has {sorted(dataset)}.")
    for split in splits:
        clips = dataset[split]
        num_shards = None if args.num_shards is None else min(args.num_shards, max(1, len(clips)))
        with exit_on_input_error(
            parser
        ):  # a bad clip under --missing error: its message, the splits before kept
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


if __name__ == "__main__":
    raise SystemExit(main())
