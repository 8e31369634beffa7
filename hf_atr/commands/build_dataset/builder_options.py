"""The command-line options of ``hf-atr build-dataset``'s builders, each written once: :class:`Option` and the shared ones.

An :class:`Option` is one argument as ``ArgumentParser.add_argument`` takes it, with the help group it is listed
under (:func:`add_options` adds a builder's options to a parser). The options several builders share are here:
the corpus location and loader options (:func:`path_argument`, :func:`audio_dir_option`, :func:`splits_option`,
:func:`missing_option`, :data:`ENCODING_OPTION`), where a dataset is written (:data:`OUTPUT_OPTIONS`) and the
overlap filter (:data:`OVERLAP_OPTIONS`); :mod:`hf_atr.commands.build_dataset.dataset_output` acts on the last two. Importing
this module costs ``argparse`` and :mod:`hf_atr.data` names only.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hf_atr.data.corpus_utils import MISSING_POLICIES, expand_path
from hf_atr.data.overlap import OVERLAP_CRITERIA


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
"""Where a builder writes its ``DatasetDict`` (:func:`~hf_atr.commands.build_dataset.dataset_output.export_dataset_dict`)."""

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
"""The overlap filter (:mod:`hf_atr.data.overlap`) of the builders of training data (:func:`~hf_atr.commands.build_dataset.dataset_output.apply_overlap_arguments`)."""
