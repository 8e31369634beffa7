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
- ``shards`` writes a saved ``DatasetDict`` as WebDataset or parquet shards.

A builder that loads no corpus (a synthesizer) is one more row: its arguments and a function that makes its
``DatasetDict`` (:func:`dataset_builder`), or a run function of its own.

The options are declared in :mod:`~hf_atr.commands.builder_options` and the output written by
:mod:`~hf_atr.commands.dataset_output`; their names are importable from here too.

A problem with the input ends the command with one line, ``<prog>: error: <message>``, and exit status 1
(:func:`exit_on_input_error`); a bad command line exits with status 2, as ``argparse`` does. This module imports
``datasets`` and the loaders: :mod:`hf_atr.commands.build_dataset` imports it only once the command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from datasets import DatasetDict, load_from_disk

from hf_atr.commands.builder_options import (
    ENCODING_OPTION,
    OUTPUT_OPTIONS,
    OVERLAP_OPTIONS,
    Option,
    add_options,
    audio_dir_option,
    missing_option,
    option,
    path_argument,
    splits_option,
)
from hf_atr.commands.dataset_output import (
    apply_overlap_arguments,
    check_export_arguments,
    exit_on_input_error,
    export_dataset_dict,
)
from hf_atr.data.audiocaps import AUDIOCAPS_FILENAME_PATTERNS
from hf_atr.data.corpora import load_corpus
from hf_atr.data.corpus_utils import MISSING_POLICIES, expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.moment_synthesis import DEFAULT_SAMPLING_RATE, synthesize_moments
from hf_atr.data.multilingual import load_translations
from hf_atr.data.shards import DEFAULT_CLIPS_PER_SHARD, SHARD_FORMATS, write_audio_text_shards
from hf_atr.data.wavcaps import WAVCAPS_OFFICIAL_CLIPS


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


def build_moments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run of ``moments``: the source split, without the clips of the overlap filter's references, laid over the
    backgrounds (:func:`hf_atr.data.moment_synthesis.synthesize_moments`)."""
    with exit_on_input_error(parser):
        source = load_corpus(str(args.dataset_dir))
        if args.source_split not in source:
            parser.error(f"{args.dataset_dir} has no split {args.source_split!r}; it has {sorted(source)}.")
        clips, summaries = apply_overlap_arguments(
            DatasetDict({args.source_split: source[args.source_split]}), args
        )
        for summary in summaries.values():
            print(f"{args.source_split}: {summary}")
        report = synthesize_moments(
            clips[args.source_split],
            args.backgrounds,
            args.output_dir,
            args.num_recordings,
            duration_range=tuple(args.duration),
            events_range=tuple(args.events),
            snr_db=tuple(args.snr_db),
            sampling_rate=args.sampling_rate,
            seed=args.seed,
            split=args.split,
            missing=args.missing,
        )
    print(report.summary())
    for problem in report.skipped:
        print(f"  skipped {problem}")
    return 0


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
    "shards": Builder(
        help="write a saved DatasetDict as WebDataset or parquet shards, for streamed training",
        description="Write a saved shared-schema DatasetDict as WebDataset (.tar: <key>.flac/.wav + <key>.json "
        "with 'text') or parquet shards, one folder per split.",
        arguments=(
            path_argument("dataset_dir", "A DatasetDict saved with save_to_disk."),
            option(
                "--output-dir", type=expand_path, required=True, help="Folder for <split>/ shard folders."
            ),
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
    ),
    "moments": Builder(
        help="synthesise moment-retrieval data (Clotho-Moment style): captioned clips over long backgrounds",
        description="Lay the captioned clips of a saved shared-schema DatasetDict over background recordings at random, "
        "non-overlapping times (seeded, SNR range, RMS levels) and write the recordings (<output-dir>/audio/*.flac) and "
        "their moments (<output-dir>/moments_<split>_release.jsonl, readable by hf_atr.load_moments).",
        arguments=(
            path_argument(
                "dataset_dir", "A DatasetDict saved with save_to_disk (e.g. by build_clotho.py): the events."
            ),
            option(
                "--source-split",
                default="train",
                help="Its split whose clips become events (default: train).",
            ),
            option(
                "--backgrounds",
                nargs="+",
                type=expand_path,
                required=True,
                metavar="PATH",
                help="Background audio files or folders; recordings shorter than a synthesised one are joined.",
            ),
            option(
                "--output-dir", type=expand_path, required=True, help="Folder for audio/ and the JSONL file."
            ),
            option(
                "--split", default="train", help="Split named in the JSONL file name: train, val or test."
            ),
            option(
                "--num-recordings", type=int, default=100, help="Recordings to synthesise (default: 100)."
            ),
            option(
                "--duration",
                type=float,
                nargs=2,
                default=[30.0, 300.0],
                metavar=("MIN", "MAX"),
                help="Shortest and longest recording in seconds (default: 30 300).",
            ),
            option(
                "--events",
                type=int,
                nargs=2,
                default=[1, 5],
                metavar=("MIN", "MAX"),
                help="Fewest and most events per recording (default: 1 5).",
            ),
            option(
                "--snr-db",
                type=float,
                nargs=2,
                default=[0.0, 20.0],
                metavar=("MIN", "MAX"),
                help="Range of an event's RMS level over the background's, in dB (default: 0 20).",
            ),
            option(
                "--sampling-rate",
                type=int,
                default=DEFAULT_SAMPLING_RATE,
                help=f"Rate of the written recordings (default: {DEFAULT_SAMPLING_RATE}).",
            ),
            option(
                "--seed",
                type=int,
                default=0,
                help="Seed: the output is a function of the inputs and the seed.",
            ),
            option(
                "--missing",
                choices=MISSING_POLICIES,
                default="skip",
                help="Skip (default) or raise on unreadable clips and backgrounds.",
            ),
            *OVERLAP_OPTIONS,
        ),
        run=build_moments,
    ),
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
    "ENCODING_OPTION",
    "OUTPUT_OPTIONS",
    "OVERLAP_OPTIONS",
    "Builder",
    "Option",
    "add_options",
    "command_parser",
    "dataset_builder",
    "exit_on_input_error",
    "export_dataset_dict",
    "loader_builder",
    "option",
    "single_builder_parser",
]
