"""What ``hf-atr build-dataset`` builds, in one table: each builder's options and how it runs.

A builder is a row of :data:`BUILDERS`: its line in ``hf-atr build-dataset --help``, its description, its
command-line arguments (:class:`Option`: flags and ``argparse`` settings, whose ``dest`` is the keyword of the
function they feed) and the function that runs it.

- The corpus loaders of :data:`hf_atr.data.corpora.CORPUS_LOADERS` are rows made by :func:`loader_builder`: the
  corpus location and the options go to ``load_corpus(name, location, **options)``.
- ``translations`` adds caption translations to a saved ``DatasetDict``.
- Both are :func:`dataset_builder` rows: a ``DatasetDict`` made from the arguments and written by the output
  options (:data:`OUTPUT_OPTIONS`), the loaders of training data filtered first by the overlap filter
  (:data:`OVERLAP_OPTIONS`).
- ``shards`` writes a saved ``DatasetDict`` as WebDataset or parquet shards (:mod:`~hf_atr.commands.build_dataset.shards_builder`);
  ``moments`` synthesises moment-retrieval data (:mod:`~hf_atr.commands.build_dataset.moments_builder`).

A builder that loads no corpus (a synthesizer) is one more row: its arguments and a function that makes its
``DatasetDict`` (:func:`dataset_builder`), or a run function of its own.

What a row is (:class:`~hf_atr.commands.build_dataset.builder_rows.Builder`, :func:`dataset_builder`) is defined in
:mod:`~hf_atr.commands.build_dataset.builder_rows`, the options in :mod:`~hf_atr.commands.build_dataset.builder_options` and the output written
by :mod:`~hf_atr.commands.build_dataset.dataset_output`, which their names are imported from.

A problem with the input ends the command with one line, ``<prog>: error: <message>``, and exit status 1
(:func:`exit_on_input_error`); a bad command line exits with status 2, as ``argparse`` does. This module imports
``datasets`` and the loaders: :mod:`hf_atr.commands.build_dataset.command` imports it only once the command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from datasets import DatasetDict, load_from_disk

from hf_atr.commands.build_dataset.builder_options import (
    ENCODING_OPTION,
    Option,
    add_options,
    audio_dir_option,
    missing_option,
    option,
    path_argument,
    splits_option,
)
from hf_atr.commands.build_dataset.builder_rows import Builder, dataset_builder
from hf_atr.commands.build_dataset.moments_builder import MOMENTS_BUILDER
from hf_atr.commands.build_dataset.shards_builder import SHARDS_BUILDER
from hf_atr.data.audiocaps import AUDIOCAPS_FILENAME_PATTERNS
from hf_atr.data.corpora import load_corpus
from hf_atr.data.corpus_utils import expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.multilingual import load_translations
from hf_atr.data.wavcaps import WAVCAPS_OFFICIAL_CLIPS


def loader_builder(
    loader: str,
    help: str,
    description: str,
    location: Option,
    options: Sequence[Option],
    *,
    overlap: bool = False,
) -> Builder:
    """The :func:`dataset_builder` of the corpus loader ``loader`` (a name of ``CORPUS_LOADERS``).

    Args:
        location: the positional argument naming the corpus (its directory; WavCaps: its JSON file).
        options: the loader's options; each one's ``dest`` is a keyword of the loader. ``--encoding`` follows them.
    """
    keywords = tuple(argument.dest for argument in (*options, ENCODING_OPTION))
    return dataset_builder(
        help,
        description,
        (location, *options, ENCODING_OPTION),
        partial(load_named_corpus, loader, location.dest, keywords),
        overlap=overlap,
    )


def load_named_corpus(
    loader: str,
    location: str,
    keywords: Sequence[str],
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
) -> DatasetDict:
    """``load_corpus(loader, args.<location>, <keyword>=args.<keyword>, ...)``; options left unset (``None``) take
    the loader's default."""
    return load_corpus(
        loader, getattr(args, location), **{keyword: getattr(args, keyword) for keyword in keywords}
    )


def add_translations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> DatasetDict:
    """What ``translations`` makes: the saved ``DatasetDict`` ``args.base_dir`` with the ``--translation`` files."""
    translations = parse_translation_arguments(parser, args.translation)
    base = load_from_disk(str(args.base_dir))
    return load_translations(base, translations, key=args.key, encoding=args.encoding)


def parse_translation_arguments(
    parser: argparse.ArgumentParser, values: Sequence[str]
) -> dict[str, Path | dict[str, Path]]:
    """``["fra_Latn=a.csv", "test:deu=b.csv"]`` -> ``{"fra": Path("a.csv"), "deu": {"test": Path("b.csv")}}``.

    A value that is not ``[SPLIT:]LANG=PATH``, an unknown language, or a language given twice ends the command
    through ``parser.error`` (exit status 2).
    """
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


BUILDERS: dict[str, Builder] = {
    "audiocaps": loader_builder(
        "audiocaps",
        help="AudioCaps (train.csv/val.csv/test.csv + audio)",
        description="Turn AudioCaps (train.csv/val.csv/test.csv + audio) into a datasets.DatasetDict.",
        location=path_argument("data_dir", "Directory with train.csv, val.csv, test.csv."),
        options=(
            audio_dir_option("Audio directory (default: <data_dir>/audio or <data_dir>)."),
            splits_option("Splits to load: train validation test (default: all present)."),
            missing_option(),
            option(
                "--filename-pattern",
                help="Audio file name with {youtube_id} and {start_time} "
                f"(default: detect {list(AUDIOCAPS_FILENAME_PATTERNS)}).",
            ),
        ),
    ),
    "clotho": loader_builder(
        "clotho",
        help="Clotho v2 (clotho_captions_<split>.csv + audio folders)",
        description="Turn Clotho (clotho_captions_<split>.csv + audio folders) into a datasets.DatasetDict.",
        location=path_argument("data_dir", "Directory with the clotho_captions_<split>.csv files."),
        options=(
            audio_dir_option("Directory with development/ validation/ evaluation/ (default: data_dir)."),
            splits_option("Splits to load, hf-atr or Clotho names (default: all present)."),
            missing_option(),
        ),
    ),
    "esc50": loader_builder(
        "esc50",
        help="ESC-50 (meta/esc50.csv + audio/), one split per fold",
        description="Turn ESC-50 (meta/esc50.csv + audio/) into a datasets.DatasetDict with splits fold1..fold5.",
        location=path_argument("data_dir", "The ESC-50 directory (with meta/ and audio/)."),
        options=(
            option(
                "--folds", type=int, nargs="+", choices=ESC50_FOLDS, help="Folds to load (default: all five)."
            ),
            option(
                "--template",
                dest="templates",
                action="append",
                help="Caption template with {class}; repeat for several "
                f"(default: {ESC50_DEFAULT_TEMPLATES[0]!r}).",
            ),
            missing_option(),
        ),
    ),
    "wavcaps": loader_builder(
        "wavcaps",
        help="one WavCaps JSON file and its audio, optionally without the clips of evaluation sets",
        description="Turn a WavCaps JSON file ({'data': [{'id', 'caption', 'audio', ...}]}) and its audio into a "
        "datasets.DatasetDict, optionally removing evaluation clips (overlap filter).",
        location=path_argument(
            "json_file", "fsd_final.json, bbc_final.json, sb_final.json or as_final.json."
        ),
        options=(
            audio_dir_option("The source's audio folder (default: the JSON's folder)."),
            option(
                "--source",
                choices=list(WAVCAPS_OFFICIAL_CLIPS),
                help="WavCaps source (default: from the file name).",
            ),
            missing_option("bad clips/records"),
        ),
        overlap=True,
    ),
    "audiofolder": loader_builder(
        "audiofolder",
        help="a folder of audio files with metadata.csv / metadata.jsonl",
        description="Turn a folder of audio files with metadata.csv / metadata.jsonl (file_name + caption, "
        "captions or caption_1..N) into a datasets.DatasetDict.",
        location=path_argument("data_dir", "The folder (metadata at the top or per split folder)."),
        options=(
            splits_option("Splits to keep (default: all found)."),
            missing_option(),
        ),
        overlap=True,
    ),
    "translations": dataset_builder(
        help="add translated captions to a saved DatasetDict",
        description="Add translated captions (CSV or JSON per language) to a saved DatasetDict.",
        arguments=(
            path_argument("base_dir", "A DatasetDict saved with save_to_disk (e.g. by build_audiocaps.py)."),
            option(
                "--translation",
                action="append",
                required=True,
                metavar="[SPLIT:]LANG=PATH",
                help="A translation file; LANG is ISO 639-1 (fr), ISO 639-3 (fra) or NLLB (fra_Latn); SPLIT "
                "restricts it to one split. Repeat.",
            ),
            option(
                "--key",
                help="Key column/field of the translation files (default: audiocap_id, else file_name, ...; "
                "ML-CLAP JSON: wav, id or audio, whichever names a clip).",
            ),
            ENCODING_OPTION,
        ),
        make=add_translations,
    ),
    "shards": SHARDS_BUILDER,
    "moments": MOMENTS_BUILDER,
}
"""Builder name -> :class:`Builder`: ``hf-atr build-dataset NAME`` and ``datasets_scripts/`` run these rows."""


def command_parser() -> argparse.ArgumentParser:
    """The parser of ``hf-atr build-dataset``: one sub-parser per builder (``hf-atr build-dataset clotho ...``),
    each remembering itself as ``args.builder_parser`` (its ``prog`` opens the builder's error messages)."""
    parser = argparse.ArgumentParser(
        prog="hf-atr build-dataset",
        description="Build a datasets.DatasetDict in the hf-atr schema from a corpus on disk and write it "
        "(save_to_disk, Parquet or the Hub), add caption translations to a saved one, or write a saved one as "
        "shards for streamed training. `hf-atr build-dataset BUILDER --help` lists a builder's options; "
        "datasets_scripts/ holds the same builders as scripts (build_clotho.py is `hf-atr build-dataset clotho`).",
    )
    builders = parser.add_subparsers(dest="builder", required=True, metavar="BUILDER", title="builders")
    for name, builder in BUILDERS.items():
        builder_parser = builders.add_parser(name, help=builder.help, description=builder.description)
        add_options(builder_parser, builder.arguments)
        builder_parser.set_defaults(builder_parser=builder_parser)
    return parser


def single_builder_parser(name: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The parser of builder ``name`` alone (a ``datasets_scripts/`` script's; ``prog`` defaults to the script's
    file name)."""
    if name not in BUILDERS:
        raise ValueError(f"No dataset builder {name!r}; the builders: {', '.join(BUILDERS)}.")
    parser = argparse.ArgumentParser(prog=prog, description=BUILDERS[name].description)
    add_options(parser, BUILDERS[name].arguments)
    return parser


__all__ = [
    "BUILDERS",
    "command_parser",
    "loader_builder",
    "single_builder_parser",
]
