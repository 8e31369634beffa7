"""WavCaps (Mei et al., TASLP 2024) from a user's directory, as a ``DatasetDict`` in the shared schema.

WavCaps ships one JSON file per source, ``{"num_captions_per_audio": 1, "data": [record, ...]}``:

=====================  =====================  ======================================================
source                 file                   record fields (``audio`` is the placeholder ``"wav_path"``)
=====================  =====================  ======================================================
``FreeSound``          ``fsd_final.json``     ``id`` (Freesound id), ``file_name``, ``href``, ``tags``,
                                              ``description``, ``author``, ``duration``,
                                              ``download_link``, ``caption``, ``audio``
``BBC_Sound_Effects``  ``bbc_final.json``     ``description``, ``category``, ``caption``, ``id``,
                                              ``duration``, ``audio``, ``download_link``
``SoundBible``         ``sb_final.json``      ``title``, ``description``, ``author``, ``href``,
                                              ``caption``, ``id``, ``duration``, ``audio``,
                                              ``download_link``
``AudioSet_SL``        ``as_final.json``      ``id`` (``Y<youtube id>.wav``), ``caption``, ``audio``,
                                              ``duration``
=====================  =====================  ======================================================

The same container with ``caption_1..caption_N`` instead of ``caption`` (WavCaps' own AudioCaps and
Clotho JSON files) is read too. The released audio is FLAC named after the id (``180913.flac``,
``Yb0RFKhbpFJA.flac``). A record's audio is, in this order: its ``audio`` field when that names an existing
file (absolute, or relative to the JSON file or ``audio_dir``), its ``wav`` field relative to ``audio_dir``,
else the first file of ``audio_dir`` named after the ``audio`` / ``wav`` file name or the id
(``<id>``, ``<id stem>.flac``, ``<id>.flac``, ``<id stem>.wav``, ``<id>.wav``).

A record whose ``id`` is ``"Not found"`` (WavCaps' placeholder where it found no source id: 6 records of
its Clotho ``val.json``) identifies no clip: it is a missing record, left out and reported (file, record
number, reason) under either ``missing`` policy, and counted as ``missing_records`` in the provenance.

``audio_id`` is the record's ``id`` (else its audio file name); ``source_id`` comes from the id
(:mod:`hf_atr.data.source_ids`), so the overlap filter (:mod:`hf_atr.data.overlap`) can remove the Clotho
clips of FreeSound and the AudioCaps clips of AudioSet_SL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path, PurePath

from datasets import DatasetDict

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    assemble_splits,
    audio_value,
    build_split,
    caption_columns,
    check_clip_audio,
    decode_metadata,
    expand_path,
    list_files,
    split_provenance,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN, atr_features
from hf_atr.data.source_ids import freesound_source_id, source_id, youtube_source_id
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

WAVCAPS_OFFICIAL_CLIPS: dict[str, int] = {
    "FreeSound": 262300,
    "BBC_Sound_Effects": 31201,
    "SoundBible": 1232,
    "AudioSet_SL": 108317,
}
"""Records per source in the WavCaps release's JSON files (the paper's Table I)."""

WAVCAPS_JSON_FILES: dict[str, str] = {
    "fsd_final": "FreeSound",
    "bbc_final": "BBC_Sound_Effects",
    "sb_final": "SoundBible",
    "as_final": "AudioSet_SL",
}
"""Stem of each source's JSON file in the release -> source name."""

_SOURCE_IDS: dict[str, Callable[[str], str | None]] = {
    "FreeSound": freesound_source_id,
    "BBC_Sound_Effects": lambda identifier: source_id("bbc", identifier),
    "SoundBible": lambda identifier: source_id("soundbible", identifier),
    "AudioSet_SL": youtube_source_id,
}

_PLACEHOLDER_AUDIO = "wav_path"
"""The ``audio`` value of every record of the released JSON files: not a path."""

_PLACEHOLDER_ID = "Not found"
"""The ``id`` WavCaps wrote where it found no source id for a clip (6 records of its Clotho ``val.json``):
not an id. Such records are missing records: left out and reported, never kept, never a duplicate."""


def wavcaps_source(json_file: str | os.PathLike, source: str | None = None) -> str | None:
    """The WavCaps source of a JSON file: ``source`` (any letter case) when given, else from the file name
    (``fsd_final*.json``) or its folder (``json_files/FreeSound/``); ``None`` when neither tells."""
    names = {name.casefold(): name for name in WAVCAPS_OFFICIAL_CLIPS}
    if source is not None:
        if source.casefold() not in names:
            raise ValueError(
                f"Unknown WavCaps source {source!r}; choose from {list(WAVCAPS_OFFICIAL_CLIPS)}."
            )
        return names[source.casefold()]
    path = expand_path(json_file)
    for stem, name in WAVCAPS_JSON_FILES.items():
        if path.stem.startswith(stem):
            return name
    return names.get(path.parent.name.casefold())


def load_wavcaps(
    json_file: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    source: str | None = None,
    missing: str = "error",
    split: str = "train",
    encoding: str = "utf-8",
) -> DatasetDict:
    """Load one WavCaps JSON file into a ``DatasetDict`` with one split (``split``, default ``train``).

    Args:
        json_file: a WavCaps JSON file (``{"data": [...]}`` or a list of records).
        audio_dir: the folder with the source's audio (default: the JSON file's folder).
        source: ``FreeSound``, ``BBC_Sound_Effects``, ``SoundBible`` or ``AudioSet_SL``; ``None`` detects
            it from the file (:func:`wavcaps_source`). Without a source, ``source_id`` is ``None``.
        missing: ``"error"`` raises on the first record without caption or id, repeated id, or absent or
            unreadable audio, naming the file and record; ``"skip"`` drops them and logs how many and
            which. No clip at all is an error. Records with the placeholder id ``"Not found"`` are left out
            and reported under both policies.
        split: the name of the one split.
        encoding: text encoding of the JSON file.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id`` (the id),
        ``captions`` and ``source_id``; the provenance (:func:`hf_atr.data.schema.corpus_provenance`)
        counts the clips found against the release's records of that source.
    """
    json_path = expand_path(json_file)
    if not json_path.is_file():
        raise FileNotFoundError(f"WavCaps JSON file not found: {json_path}")
    source = wavcaps_source(json_path, source)
    if source is None:
        logger.info(f"{json_path}: WavCaps source not recognised (pass source=): no source ids.")
    root = expand_path(audio_dir) if audio_dir is not None else json_path.parent
    if not root.is_dir():
        raise FileNotFoundError(f"audio_dir {root} is not a directory.")
    records = _read_records(json_path, encoding)
    problems = CorpusProblems(missing, "WavCaps", split)
    placeholders = _placeholder_records(json_path, records)
    rows = _rows(json_path, records, root.resolve(), source, problems, placeholders)
    problems.log_summary()
    provenance = split_provenance(
        "WavCaps",
        "WavCaps JSON",
        split,
        [json_path],
        (f"WavCaps {source}", WAVCAPS_OFFICIAL_CLIPS[source]) if source else None,
        problems,
        source=source,
        missing_records=len(placeholders),
    )
    dataset = build_split(rows, atr_features(with_source_id=True), provenance)
    logger.info(f"WavCaps {source or json_path.name}: {len(rows)} clips from {json_path}, audio in {root}")
    return assemble_splits({split: dataset}, "WavCaps", missing, {split: str(json_path)})


def _read_records(json_path: Path, encoding: str) -> list:
    text = decode_metadata(json_path, json_path.read_bytes(), encoding)
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        raise CorpusFormatError(f"{json_path}, line {error.lineno}: not valid JSON ({error.msg}).") from error
    records = content.get("data") if isinstance(content, dict) else content
    if not isinstance(records, list):
        raise CorpusFormatError(f'{json_path}: expected {{"data": [records]}} or a list of records.')
    return records


def _placeholder_records(json_path: Path, records: list) -> set[int]:
    """The numbers (from 1) of the records whose ``id`` is WavCaps' placeholder :data:`_PLACEHOLDER_ID`,
    reported in one warning naming each record and its audio."""
    numbers = {
        number
        for number, record in enumerate(records, start=1)
        if isinstance(record, dict) and str(record.get("id", "")).strip() == _PLACEHOLDER_ID
    }
    if numbers:
        listed = "\n  ".join(
            f"{json_path}, record {number}: id {_PLACEHOLDER_ID!r} is a placeholder, not an id "
            f"(audio {_audio_name(records[number - 1])!r})"
            for number in sorted(numbers)
        )
        logger.warning(
            f"{json_path}: left out {len(numbers)} missing record(s): WavCaps found no source id for them "
            f"and wrote {_PLACEHOLDER_ID!r} instead, so they identify no clip:\n  {listed}"
        )
    return numbers


def _audio_name(record: dict) -> str | None:
    """The file name of a record's ``audio`` (unless the placeholder) or ``wav`` field, else ``None``."""
    for field in ("audio", "wav"):
        value = record.get(field)
        if isinstance(value, str) and value.strip() and value != _PLACEHOLDER_AUDIO:
            return PurePath(value).name
    return None


def _rows(
    json_path: Path,
    records: list,
    root: Path,
    source: str | None,
    problems: CorpusProblems,
    placeholders: set[int],
) -> list[dict]:
    """The rows of the records, but the missing records numbered in ``placeholders``."""
    available = list_files(root)
    to_source_id = _SOURCE_IDS.get(source, lambda identifier: None)
    first_record: dict[str, int] = {}
    rows = []
    for number, record in enumerate(records, start=1):
        if number in placeholders:
            continue
        where = f"{json_path}, record {number}"
        problem = _record_problem(record, where)
        audio_id = None if problem else _audio_id(record)
        if problem is None and audio_id is None:
            problem = f"{where}: neither 'id' nor an 'audio' / 'wav' file name."
        if problem is None and audio_id in first_record:
            problem = f"{where}: id {audio_id!r} already in record {first_record[audio_id]}."
        if problem is not None:
            problems.flag(CorpusFormatError(problem))
            continue
        first_record[audio_id] = number
        audio_path = _audio_path(record, json_path.parent, root, available)
        if not check_clip_audio(audio_path, where, problems):
            continue
        rows.append(
            {
                "audio": audio_value(audio_path),
                "audio_id": audio_id,
                "captions": [record[column].strip() for column in caption_columns(list(record))],
                SOURCE_ID_COLUMN: to_source_id(str(record["id"])) if record.get("id") is not None else None,
            }
        )
    return rows


def _record_problem(record: object, where: str) -> str | None:
    if not isinstance(record, dict):
        return f"{where}: expected an object, got {type(record).__name__}."
    columns = caption_columns(list(record))
    if not columns:
        return f"{where}: no 'caption' or 'caption_1..N' field."
    blank = [
        column for column in columns if not isinstance(record[column], str) or not record[column].strip()
    ]
    return f"{where}: empty or non-text {', '.join(blank)}." if blank else None


def _audio_id(record: dict) -> str | None:
    if record.get("id") not in (None, ""):
        return str(record["id"])
    return _audio_name(record)


def _audio_path(record: dict, json_dir: Path, root: Path, available: set[str]) -> Path:
    """The record's audio file (see the module docstring); the most likely path when none exists, so that
    the problem message names it."""
    audio = record.get("audio") if record.get("audio") != _PLACEHOLDER_AUDIO else None
    wav = record.get("wav")
    for value, bases in ((audio, (json_dir, root)), (wav, (root,))):
        if isinstance(value, str) and value.strip():
            path = expand_path(value)
            for candidate in [path] if path.is_absolute() else [base / path for base in bases]:
                if candidate.is_file():
                    return candidate
    identifier = str(record["id"]) if record.get("id") not in (None, "") else None
    names = [PurePath(value).name for value in (audio, wav) if isinstance(value, str) and value.strip()]
    if identifier is not None:
        stem = PurePath(identifier).stem
        # The release's own name first: it is the one a "not found" message should show.
        names = [f"{stem}.flac", *names, identifier, f"{identifier}.flac", f"{stem}.wav", f"{identifier}.wav"]
    return root / next((name for name in names if name in available), names[0])
