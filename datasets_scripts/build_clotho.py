"""Build a Clotho ``DatasetDict`` (shared hf-atr schema; splits train/validation/test for Clotho's
development/validation/evaluation) from a local Clotho v2 directory and save it.

Example::

    python datasets_scripts/build_clotho.py ~/data/clotho --output-dir clotho_hf
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hf_atr.data.clotho import load_clotho
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
        description="Turn Clotho (clotho_captions_<split>.csv + audio folders) into a datasets.DatasetDict.",
    )
    parser.add_argument(
        "data_dir", type=expand_path, help="Directory with the clotho_captions_<split>.csv files."
    )
    parser.add_argument(
        "--audio-dir",
        type=expand_path,
        help="Directory with development/ validation/ evaluation/ (default: data_dir).",
    )
    parser.add_argument(
        "--splits", nargs="+", help="Splits to load, hf-atr or Clotho names (default: all present)."
    )
    parser.add_argument(
        "--missing", choices=MISSING_POLICIES, default="error", help="Raise on or skip bad clips/rows."
    )
    add_encoding_argument(parser)
    add_export_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_export_arguments(parser, args)
    with exit_on_input_error(parser):
        dataset = load_clotho(
            args.data_dir,
            audio_dir=args.audio_dir,
            splits=args.splits,
            missing=args.missing,
            encoding=args.encoding,
        )
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
