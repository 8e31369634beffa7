"""Build a ``DatasetDict`` (shared hf-atr schema) from a folder of audio files with a ``metadata.csv`` or
``metadata.jsonl`` (the ``datasets`` AudioFolder convention) and save it.

Example::

    python datasets_scripts/build_audio_text_folder.py ~/my_sounds --missing skip --output-dir my_sounds_hf
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hf_atr.data.audio_text_folder import load_audio_text_folder
from hf_atr.data.corpus_utils import (
    MISSING_POLICIES,
    add_encoding_argument,
    add_export_arguments,
    add_overlap_arguments,
    apply_overlap_arguments,
    check_export_arguments,
    exit_on_input_error,
    expand_path,
    export_dataset_dict,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Turn a folder of audio files with metadata.csv / metadata.jsonl (file_name + caption, "
        "captions or caption_1..N) into a datasets.DatasetDict.",
    )
    parser.add_argument(
        "data_dir", type=expand_path, help="The folder (metadata at the top or per split folder)."
    )
    parser.add_argument("--splits", nargs="+", help="Splits to keep (default: all found).")
    parser.add_argument(
        "--missing", choices=MISSING_POLICIES, default="error", help="Raise on or skip bad clips/rows."
    )
    add_encoding_argument(parser)
    add_overlap_arguments(parser)
    add_export_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_export_arguments(parser, args)
    with exit_on_input_error(parser):
        dataset = load_audio_text_folder(
            args.data_dir, splits=args.splits, missing=args.missing, encoding=args.encoding
        )
        dataset, overlap_summaries = apply_overlap_arguments(dataset, args)
        for split, summary in overlap_summaries.items():
            print(f"{split}: {summary}")
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
