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

A problem with the input ends the command with one line, ``<prog>: error: <message>``, and exit status 1
(:func:`exit_on_input_error`); a bad command line exits with status 2, as ``argparse`` does. This module imports
``datasets`` and the loaders: :mod:`hf_atr.commands.build_dataset` imports it only once the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from datasets import DatasetDict, load_from_disk

from hf_atr.data.audiocaps import AUDIOCAPS_FILENAME_PATTERNS
from hf_atr.data.corpora import load_corpus
from hf_atr.data.corpus_utils import MISSING_POLICIES, embed_audio_bytes, expand_path
from hf_atr.data.esc50 import ESC50_DEFAULT_TEMPLATES, ESC50_FOLDS
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.multilingual import load_translations
from hf_atr.data.overlap import OVERLAP_CRITERIA, read_wavcaps_blocklist, remove_overlap
from hf_atr.data.shards import DEFAULT_CLIPS_PER_SHARD, SHARD_FORMATS, write_audio_text_shards
from hf_atr.data.wavcaps import WAVCAPS_OFFICIAL_CLIPS
from hf_atr.lazy import get_logger

logger = get_logger(__name__)


@dataclass(frozen=True)
class Option:
    """One command-line argument of a builder.

    Attributes:
        flags: ``("--audio-dir",)``; for a positional argument its name (``("data_dir",)``).
        settings: the keywords of ``ArgumentParser.add_argument`` (``help``, ``type``, ``choices``, ``dest``, ...).
        group: the title of the argument group that lists it in ``--help`` (``None``: the parser's own options).
        exclusive: options with the same name here exclude one another (``None``: no such set).
    """

    flags: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    group: str | None = None
    exclusive: str | None = None

    @property
    def dest(self) -> str:
        """The attribute that holds its value after parsing (``argparse``'s rule: ``dest``, else the first flag
        without its dashes, inner dashes as underscores)."""
        return self.settings.get("dest") or self.flags[0].lstrip("-").replace("-", "_")


def option(*flags: str, group: str | None = None, exclusive: str | None = None, **settings: Any) -> Option:
    """``option("--splits", nargs="+", help=...)``: an :class:`Option` written as ``add_argument`` is called."""
    return Option(flags, settings, group, exclusive)


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add ``options`` to ``parser`` in order, each group (and set of exclusive options) created at its first option."""
    groups: dict[str, Any] = {}
    exclusive_sets: dict[str, Any] = {}
    for argument in options:
        container: Any = parser
        if argument.group is not None:
            if argument.group not in groups:
                groups[argument.group] = parser.add_argument_group(argument.group)
            container = groups[argument.group]
        if argument.exclusive is not None:
            if argument.exclusive not in exclusive_sets:
                exclusive_sets[argument.exclusive] = container.add_mutually_exclusive_group()
            container = exclusive_sets[argument.exclusive]
        container.add_argument(*argument.flags, **argument.settings)


def path_argument(name: str, help: str) -> Option:
    """The positional argument ``name``: a path (``~`` expanded), described by ``help``."""
    return option(name, type=expand_path, help=help)


def audio_dir_option(help: str) -> Option:
    """``--audio-dir DIR`` (the loaders' ``audio_dir``): where the corpus's audio is, as ``help`` says."""
    return option("--audio-dir", type=expand_path, help=help)


def splits_option(help: str) -> Option:
    """``--splits NAME ...`` (the loaders' ``splits``), described by ``help``."""
    return option("--splits", nargs="+", help=help)


def missing_option(what: str = "bad clips/rows") -> Option:
    """``--missing error|skip`` (the loaders' ``missing``): raise on or skip ``what``."""
    return option("--missing", choices=MISSING_POLICIES, default="error", help=f"Raise on or skip {what}.")


ENCODING_OPTION = option(
    "--encoding",
    default="utf-8",
    help="Text encoding of the metadata files (a Python codec name such as cp1252 or shift_jis; default utf-8).",
)
"""``--encoding``: the text encoding of the metadata files, for every command that loads a corpus (the builders,
``examples/zero_shot_esc50.py``); a file not valid in it fails with a message naming the encodings to try."""

OUTPUT_OPTIONS: tuple[Option, ...] = (
    option(
        "--output-dir",
        type=expand_path,
        help="Directory to write to: DatasetDict.save_to_disk, or <split>.parquet files with --parquet.",
        group="output",
    ),
    option("--parquet", action="store_true", help="Write one Parquet file per split.", group="output"),
    option(
        "--embed-audio",
        action="store_true",
        help="With --parquet: store the audio bytes instead of absolute paths to the files (save_to_disk and "
        "--push-to-hub always store the bytes).",
        group="output",
    ),
    option(
        "--push-to-hub",
        metavar="REPO",
        help="Also push to this Hugging Face Hub dataset repository (needs network and a token; audio is embedded).",
        group="output",
    ),
    option("--private", action="store_true", help="Create the Hub repository as private.", group="output"),
)
"""Where a :func:`dataset_builder` writes its ``DatasetDict`` (:func:`export_dataset_dict`)."""

OVERLAP_GROUP = "overlap filter (remove evaluation clips from training data)"
OVERLAP_OPTIONS: tuple[Option, ...] = (
    option(
        "--exclude-overlap-with",
        nargs="+",
        type=expand_path,
        default=[],
        metavar="DIR",
        help="DatasetDicts saved by the other build_*.py scripts (e.g. Clotho and AudioCaps test): clips "
        "that are clips of theirs are removed.",
        group=OVERLAP_GROUP,
    ),
    option(
        "--blocklist",
        type=expand_path,
        metavar="JSON",
        help="A WavCaps block list (json_files/blacklist/*.json): its Freesound and YouTube ids are removed.",
        group=OVERLAP_GROUP,
    ),
    option(
        "--overlap-by",
        nargs="+",
        choices=OVERLAP_CRITERIA,
        default=list(OVERLAP_CRITERIA),
        help="Match by source id and/or audio content (default: both).",
        group=OVERLAP_GROUP,
    ),
)
"""The overlap filter (:mod:`hf_atr.data.overlap`) of the builders of training data (:func:`apply_overlap_arguments`)."""


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
