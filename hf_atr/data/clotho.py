"""Clotho v2 / v2.1 (Drossos et al., ICASSP 2020) from a user's directory, as a ``DatasetDict`` in the
shared schema.

Two caption layouts, both ``file_name,caption_1,...,caption_5`` (file names contain spaces, commas and
quotes; captions contain quoted commas):

- official: ``clotho_captions_{development,validation,evaluation}.csv``;
- WavCaps-style: ``train.csv``, ``val.csv``, ``test.csv`` (as the WavCaps repository ships Clotho).

Audio of a split is in the first existing folder of ``development/`` / ``clotho_audio_development/`` /
``train/`` (``validation/`` / ``clotho_audio_validation/`` / ``val/``, ``evaluation/`` /
``clotho_audio_evaluation/`` / ``test/``) under ``audio_dir`` (default ``data_dir``), whatever the CSV
layout; without such a folder the audio is directly in ``audio_dir`` (a flat folder).

Clotho has file names in two splits (different recordings under one name). With per-split folders each
split reads its own file. In a flat folder one file cannot be both, so a file name that another split
whose audio is also in that folder lists too is an error naming both CSV rows (skipped and reported under
``missing="skip"``): loading one split then also reads the other splits' caption CSVs that are present.

When ``clotho_metadata_<split>.csv`` (Clotho's own metadata, ISO-8859-1 in v2.x) is in ``data_dir``, its
``sound_id`` gives each clip's ``source_id`` (``freesound:<sound_id>``), which the overlap filter
(:mod:`hf_atr.data.overlap`) matches against web-scale corpora built from Freesound.

Clotho's splits become the ``DatasetDict`` splits ``train`` (development), ``validation`` and ``test``
(evaluation), the names every hf-atr corpus uses; ``splits=`` accepts either name. With per-split
folders, a file name that occurs in two splits gives one row in each, with that split's captions.
``audio_id`` is the CSV's ``file_name``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from datasets import DatasetDict

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    MetadataEncodingError,
    assemble_splits,
    audio_root,
    audio_value,
    build_split,
    caption_columns,
    check_caption_slots,
    check_clip_audio,
    expand_path,
    location,
    read_csv_records,
    record_problem,
    select_splits,
    split_audio_dir,
    split_provenance,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN, atr_features
from hf_atr.data.source_ids import freesound_source_id
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

CLOTHO_SPLITS: dict[str, str] = {"train": "development", "validation": "validation", "test": "evaluation"}
"""hf-atr split name -> Clotho's own split name (CSV suffix and audio folder)."""

WAVCAPS_CSV_NAMES: dict[str, str] = {"train": "train", "validation": "val", "test": "test"}
"""hf-atr split name -> stem of the WavCaps-style CSV (``val.csv``) and of its audio folder (``val/``)."""

CLOTHO_OFFICIAL_CLIPS: dict[str, int] = {"train": 3839, "validation": 1045, "test": 1045}
"""Clips per split in Clotho v2.1 as distributed (development 3,839, validation 1,045, evaluation 1,045;
the Zenodo description counts 3,840 and 1,046)."""

CLOTHO_RELEASE = "Clotho v2.1"
CLOTHO_CAPTIONS_PER_CLIP = 5

CLOTHO_METADATA_ENCODING = "ISO-8859-1"
"""Encoding of ``clotho_metadata_<split>.csv`` in Clotho v2 and v2.1 (not UTF-8); tried after UTF-8."""

_SPLIT_ALIASES = {
    **{name: name for name in CLOTHO_SPLITS},
    **{clotho_name: name for name, clotho_name in CLOTHO_SPLITS.items()},
    **{wavcaps_name: name for name, wavcaps_name in WAVCAPS_CSV_NAMES.items()},
}


def clotho_captions_file(data_dir: str | os.PathLike, split: str) -> Path:
    """Path of the official captions CSV of an hf-atr split name (``train`` -> ``clotho_captions_development.csv``)."""
    return expand_path(data_dir) / f"clotho_captions_{CLOTHO_SPLITS[split]}.csv"


def clotho_metadata_file(data_dir: str | os.PathLike, split: str) -> Path:
    """Path of Clotho's metadata CSV of an hf-atr split name (``test`` -> ``clotho_metadata_evaluation.csv``)."""
    return expand_path(data_dir) / f"clotho_metadata_{CLOTHO_SPLITS[split]}.csv"


def _captions_file(data_dir: Path, split: str) -> tuple[Path, str] | None:
    """The captions CSV of a split and its layout: the official name first, else the WavCaps-style one."""
    official = clotho_captions_file(data_dir, split)
    if official.is_file():
        return official, "official CSV"
    wavcaps = data_dir / f"{WAVCAPS_CSV_NAMES[split]}.csv"
    return (wavcaps, "WavCaps-style CSV") if wavcaps.is_file() else None


def load_clotho(
    data_dir: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    splits: Iterable[str] | str | None = None,
    missing: str = "error",
    encoding: str = "utf-8",
) -> DatasetDict:
    """Load Clotho into a ``DatasetDict`` with splits ``train``, ``validation``, ``test``.

    Args:
        data_dir: directory with ``clotho_captions_<split>.csv`` or ``train.csv``/``val.csv``/``test.csv``
            (and optionally ``clotho_metadata_<split>.csv``).
        audio_dir: directory with the split folders (see the module docstring); default ``data_dir``.
        splits: hf-atr or Clotho split names; ``None`` loads every split whose CSV exists.
        missing: ``"error"`` raises on the first absent or unreadable clip or malformed row (wrong field
            count, empty file name or caption, file name repeated within the split), naming the file and
            CSV line; ``"skip"`` drops them and logs how many and which. A split left without clips is
            dropped with a warning (``"skip"``) or refused (``"error"``).
        encoding: text encoding of the captions CSVs.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id``
        (the file name), ``captions`` (the five captions in slot order) and ``source_id``
        (``freesound:<sound_id>`` from the metadata CSV, else ``None``); each split's provenance
        (:func:`hf_atr.data.schema.corpus_provenance`) names the layout and counts the clips found
        against Clotho v2.1's.
    """
    data_dir = expand_path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"Clotho data_dir {data_dir} is not a directory.")
    chosen = select_splits(splits, _SPLIT_ALIASES, "Clotho")
    captions_files = {split: _captions_file(data_dir, split) for split in CLOTHO_SPLITS}
    if splits is None:
        chosen = [split for split in chosen if captions_files[split] is not None]
        if not chosen:
            raise FileNotFoundError(
                f"No Clotho captions in {data_dir}: expected clotho_captions_<split>.csv for a split in "
                f"{list(CLOTHO_SPLITS.values())}, or the WavCaps-style train.csv, val.csv, test.csv."
            )
    for split in chosen:
        if captions_files[split] is None:
            raise FileNotFoundError(
                f"No captions for Clotho split '{split}' in {data_dir}: expected "
                f"{clotho_captions_file(data_dir, split).name} or {WAVCAPS_CSV_NAMES[split]}.csv."
            )
    root = audio_root(data_dir, audio_dir, None)
    split_dirs = {split: split_audio_dir(root, _audio_folders(split)) for split in CLOTHO_SPLITS}
    # A flat folder holds the audio of every split without a folder of its own: a file name that two of
    # them list names one file, which cannot belong to both.
    flat = [split for split in CLOTHO_SPLITS if split_dirs[split] == root and captions_files[split]]
    flat_csvs = {split: captions_files[split][0] for split in flat}
    first_rows = _first_rows(flat_csvs, encoding) if len(flat) > 1 and set(flat) & set(chosen) else {}
    loaded, sources = {}, {}
    for split in chosen:
        csv_path, layout = captions_files[split]
        clotho_split = CLOTHO_SPLITS[split]
        split_dir = split_dirs[split]
        other_rows = {
            other: rows for other, rows in first_rows.items() if other != split and split in first_rows
        }
        if other_rows:
            logger.info(
                f"Clotho {split}: audio in the flat folder {split_dir} with that of split(s) "
                f"{list(other_rows)}: file names checked against "
                f"{[flat_csvs[other].name for other in other_rows]}."
            )
        problems = CorpusProblems(missing, "Clotho", split)
        sound_ids, metadata_files = _sound_ids(clotho_metadata_file(data_dir, split))
        rows = _split_rows(csv_path, split_dir, problems, encoding, sound_ids, other_rows)
        problems.log_summary()
        provenance = split_provenance(
            "Clotho",
            layout,
            split,
            [csv_path, *metadata_files, *[flat_csvs[other] for other in other_rows]],
            (CLOTHO_RELEASE, CLOTHO_OFFICIAL_CLIPS[split]),
            problems,
            corpus_split=clotho_split,
            source_ids="freesound (clotho metadata sound_id)" if sound_ids else None,
        )
        loaded[split] = build_split(rows, atr_features(with_source_id=True), provenance)
        sources[split] = str(csv_path)
        logger.info(f"Clotho {split}: {len(rows)} clips from {csv_path}, audio in {split_dir}")
    return assemble_splits(loaded, "Clotho", missing, sources)


def _audio_folders(split: str) -> list[str]:
    """The folder names that hold a split's audio under ``audio_dir``, in the order they are looked for."""
    clotho_split = CLOTHO_SPLITS[split]
    return [clotho_split, f"clotho_audio_{clotho_split}", WAVCAPS_CSV_NAMES[split]]


def _first_rows(csv_paths: dict[str, Path], encoding: str) -> dict[str, dict[str, str]]:
    """``split -> {file_name: "<csv>, line <n>"}``: the first row of each file name in the captions CSVs
    ``csv_paths`` (split -> CSV)."""
    first_rows: dict[str, dict[str, str]] = {}
    for split, csv_path in csv_paths.items():
        _, records = read_csv_records(csv_path, ("file_name",), encoding)
        rows = first_rows[split] = {}
        for record in records:
            file_name = record.values.get("file_name")
            if file_name and file_name not in rows:
                rows[file_name] = location(csv_path, record.line)
    return first_rows


def _sound_ids(metadata_path: Path) -> tuple[dict[str, str], list[Path]]:
    """``file_name -> freesound:<sound_id>`` from Clotho's metadata CSV, and the files read (none if absent)."""
    if not metadata_path.is_file():
        return {}, []
    try:
        header, records = read_csv_records(metadata_path, ("file_name", "sound_id"))
    except MetadataEncodingError:
        header, records = read_csv_records(metadata_path, ("file_name", "sound_id"), CLOTHO_METADATA_ENCODING)
        logger.info(
            f"{metadata_path} is not UTF-8: read as {CLOTHO_METADATA_ENCODING} (Clotho v2.x metadata)."
        )
    sound_ids = {}
    for record in records:
        identifier = freesound_source_id(record.values.get("sound_id"))
        if identifier is not None and record.values.get("file_name"):
            sound_ids[record.values["file_name"]] = identifier
    return sound_ids, [metadata_path]


def _split_rows(
    csv_path: Path,
    split_dir: Path,
    problems: CorpusProblems,
    encoding: str,
    sound_ids: dict[str, str],
    other_rows: dict[str, dict[str, str]],
) -> list[dict]:
    """The rows of one split's captions CSV; ``other_rows`` holds the file names of the other splits whose
    audio is in the same flat folder (:func:`_first_rows`), which this split's rows may not use."""
    header, records = read_csv_records(csv_path, ("file_name",), encoding)
    columns = [column for column in caption_columns(header) if column != "caption"]
    if not columns:
        raise CorpusFormatError(
            f"{location(csv_path, 1)}: header {header} has no caption_1..caption_N columns."
        )
    check_caption_slots(csv_path, columns, CLOTHO_CAPTIONS_PER_CLIP)
    first_line: dict[str, int] = {}
    rows = []
    for record in records:
        problem = record_problem(csv_path, record, header, non_empty=["file_name", *columns])
        file_name = record.values.get("file_name")
        if problem is None and file_name in first_line:
            problem = f"{location(csv_path, record.line)}: file_name {file_name!r} already on line {first_line[file_name]}."
        elsewhere = [
            f"split '{other}' at {rows[file_name]}" for other, rows in other_rows.items() if file_name in rows
        ]
        if problem is None and elsewhere:
            problem = (
                f"{location(csv_path, record.line)}: file_name {file_name!r} is also in "
                f"{'; '.join(elsewhere)}, and the audio of both splits is in the one folder {split_dir}, so "
                "its file cannot belong to both; put each split's audio in its own folder (development/, "
                "validation/, evaluation/)."
            )
        if problem is not None:
            problems.flag(CorpusFormatError(problem))
            continue
        first_line[file_name] = record.line
        audio_path = split_dir / file_name
        if not check_clip_audio(audio_path, location(csv_path, record.line), problems):
            continue
        rows.append(
            {
                "audio": audio_value(audio_path),
                "audio_id": file_name,
                "captions": [record.values[column].strip() for column in columns],
                SOURCE_ID_COLUMN: sound_ids.get(file_name),
            }
        )
    if sound_ids:
        unmatched = sum(row[SOURCE_ID_COLUMN] is None for row in rows)
        if unmatched:
            logger.warning(f"{csv_path}: {unmatched} clip(s) have no sound_id in the Clotho metadata file.")
    return rows
