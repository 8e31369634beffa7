"""Build an AudioCaps ``DatasetDict`` (shared hf-atr schema) from a local AudioCaps directory and save it.

Example::

    python datasets_scripts/build_audiocaps.py ~/data/audiocaps --missing skip --output-dir audiocaps_hf
    python datasets_scripts/build_audiocaps.py ~/data/audiocaps --filename-pattern "Y{youtube_id}.wav" \\
        --output-dir audiocaps_parquet --parquet --embed-audio
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hf_atr.data.audiocaps import AUDIOCAPS_FILENAME_PATTERNS, load_audiocaps
from hf_atr.data.corpus_utils import (
    MISSING_POLICIES,
    add_encoding_argument,
    add_export_arguments,
    check_export_arguments,
    exit_on_input_error,
    expand_path,
    export_dataset_dict,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Turn AudioCaps (train.csv/val.csv/test.csv + audio) into a datasets.DatasetDict.",
    )
    parser.add_argument("data_dir", type=expand_path, help="Directory with train.csv, val.csv, test.csv.")
    parser.add_argument(
        "--audio-dir", type=expand_path, help="Audio directory (default: <data_dir>/audio or <data_dir>)."
    )
    parser.add_argument(
        "--splits", nargs="+", help="Splits to load: train validation test (default: all present)."
    )
    parser.add_argument(
        "--missing", choices=MISSING_POLICIES, default="error", help="Raise on or skip bad clips/rows."
    )
    parser.add_argument(
        "--filename-pattern",
        help=f"Audio file name with {{youtube_id}} and {{start_time}} (default: detect {list(AUDIOCAPS_FILENAME_PATTERNS)}).",
    )
    add_encoding_argument(parser)
    add_export_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_export_arguments(parser, args)
    with exit_on_input_error(parser):
        dataset = load_audiocaps(
            args.data_dir,
            audio_dir=args.audio_dir,
            splits=args.splits,
            missing=args.missing,
            filename_pattern=args.filename_pattern,
            encoding=args.encoding,
        )
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
