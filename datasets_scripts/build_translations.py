"""Add caption translations to a DatasetDict saved by another ``build_*.py`` script and save the result.

Example::

    python datasets_scripts/build_translations.py audiocaps_hf \\
        --translation fra=~/data/audiocaps_fra/val_fra.csv --translation validation:deu=val_deu.csv \\
        --output-dir audiocaps_multilingual
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from datasets import load_from_disk

from hf_atr.data.corpus_utils import (
    add_encoding_argument,
    add_export_arguments,
    check_export_arguments,
    exit_on_input_error,
    expand_path,
    export_dataset_dict,
)
from hf_atr.data.multilingual import load_translations, normalize_language_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Add translated captions (CSV or JSON per language) to a saved DatasetDict.",
    )
    parser.add_argument(
        "base_dir",
        type=expand_path,
        help="A DatasetDict saved with save_to_disk (e.g. by build_audiocaps.py).",
    )
    parser.add_argument(
        "--translation",
        action="append",
        required=True,
        metavar="[SPLIT:]LANG=PATH",
        help="A translation file; LANG is ISO 639-1 (fr), ISO 639-3 (fra) or NLLB (fra_Latn); SPLIT restricts it to one split. Repeat.",
    )
    parser.add_argument(
        "--key",
        help="Key column/field of the translation files (default: audiocap_id, else file_name, ...; "
        "ML-CLAP JSON: wav, id or audio, whichever names a clip).",
    )
    add_encoding_argument(parser)
    add_export_arguments(parser)
    return parser


def parse_translation_arguments(
    parser: argparse.ArgumentParser, values: Sequence[str]
) -> dict[str, Path | dict[str, Path]]:
    """``["fra_Latn=a.csv", "test:deu=b.csv"]`` -> ``{"fra": Path("a.csv"), "deu": {"test": Path("b.csv")}}``."""
    translations: dict[str, Path | dict[str, Path]] = {}
    for value in values:
        target, separator, path = value.partition("=")
        split, _, code = target.rpartition(":")
        if not separator or not code or not path:
            parser.error(f"--translation {value!r}: expected [SPLIT:]LANG=PATH.")
        try:
            # fra and fra_Latn name one language: group their files before load_translations sees them.
            language = normalize_language_code(code)
        except ValueError as error:
            parser.error(f"--translation {value!r}: {error}")
        if split:
            per_split = translations.setdefault(language, {})
            if not isinstance(per_split, dict):
                parser.error(
                    f"--translation {value!r}: {language} is given both for all splits and for {split}."
                )
            per_split[split] = expand_path(path)
        elif language in translations:
            parser.error(f"--translation {value!r}: {language} is given twice.")
        else:
            translations[language] = expand_path(path)
    return translations


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_export_arguments(parser, args)
    translations = parse_translation_arguments(parser, args.translation)
    with exit_on_input_error(parser):
        base = load_from_disk(str(args.base_dir))
        dataset = load_translations(base, translations, key=args.key, encoding=args.encoding)
        written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
