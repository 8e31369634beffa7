"""Build an ESC-50 ``DatasetDict`` (shared hf-atr schema, one split per fold) from a local ESC-50
directory and save it.

Example::

    python datasets_scripts/build_esc50.py ~/data/ESC-50-master --output-dir esc50_hf \\
        --template "This is a sound of {class}." --template "A recording of {class}."
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hf_atr.data.corpus_utils import (
    MISSING_POLICIES,
    add_encoding_argument,
    add_export_arguments,
    check_export_arguments,
    exit_on_input_error,
    expand_path,
    export_dataset_dict,
)
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS, load_esc50


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Turn ESC-50 (meta/esc50.csv + audio/) into a datasets.DatasetDict with splits fold1..fold5.",
    )
    parser.add_argument("data_dir", type=expand_path, help="The ESC-50 directory (with meta/ and audio/).")
    parser.add_argument(
        "--folds", type=int, nargs="+", choices=ESC50_FOLDS, help="Folds to load (default: all five)."
    )
    parser.add_argument(
        "--template",
        dest="templates",
        action="append",
        help=f"Caption template with {{class}}; repeat for several (default: {ESC50_DEFAULT_TEMPLATES[0]!r}).",
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
        dataset = load_esc50(
            args.data_dir,
            folds=args.folds,
            templates=args.templates,
            missing=args.missing,
            encoding=args.encoding,
        )
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
