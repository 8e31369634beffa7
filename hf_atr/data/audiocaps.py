"""AudioCaps (Kim et al., NAACL 2019) from a user's directory, as a ``DatasetDict`` in the shared schema.

Two metadata layouts are read, detected from each CSV's header:

- official: ``train.csv``, ``val.csv``, ``test.csv`` with ``audiocap_id,youtube_id,start_time,caption``,
  one caption per row (train: one per clip; val/test: five per clip). Rows are grouped into clips by
  ``youtube_id`` (the ``audio_id``), captions in file order, and their ``audiocap_id`` kept in the
  ``caption_ids`` column so that per-caption translation files can be aligned with them.
- WavCaps-style: ``file_name,caption`` (one caption per row, rows grouped by file) or
  ``file_name,caption_1,...,caption_5``; ``audio_id`` is ``file_name`` and there is no ``caption_ids``.

Audio is whatever the user downloaded: ``<audio_dir>/<split>/`` (``train``, ``validation`` or ``val``,
``test``) when such a folder exists, else ``<audio_dir>/`` itself; ``audio_dir`` defaults to
``<data_dir>/audio`` when that exists, else ``data_dir``. File names follow ``filename_pattern`` or, when
it is ``None``, whichever of :data:`AUDIOCAPS_FILENAME_PATTERNS` matches the most clips of the split.

``source_id`` is ``youtube:<youtube_id>`` (WavCaps-style: from file names such as ``Y<youtube_id>.wav``),
which the overlap filter (:mod:`hf_atr.data.overlap`) matches against AudioSet-based corpora.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from datasets import DatasetDict

from hf_atr.data.corpus_utils import (
    CAPTION_IDS_COLUMN,
    CAPTION_IDS_FEATURE,
    CorpusFormatError,
    CorpusProblems,
    CsvRecord,
    assemble_splits,
    audio_root,
    audio_value,
    build_split,
    caption_columns,
    check_caption_slots,
    check_clip_audio,
    expand_path,
    list_files,
    location,
    read_csv_records,
    record_problem,
    select_splits,
    split_audio_dir,
    split_provenance,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN, atr_features
from hf_atr.data.source_ids import youtube_source_id
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

AUDIOCAPS_SPLIT_FILES: dict[str, str] = {"train": "train.csv", "validation": "val.csv", "test": "test.csv"}
"""Canonical split name -> metadata file name (the names AudioCaps ships)."""

AUDIOCAPS_OFFICIAL_CLIPS: dict[str, int] = {"train": 49838, "validation": 495, "test": 975}
"""Clips per split of the AudioCaps (v1) release's CSVs; YouTube downloads usually find 90-95 % of them."""

AUDIOCAPS_RELEASE = "AudioCaps v1"
AUDIOCAPS_EVAL_CAPTIONS_PER_CLIP = 5

_SPLIT_ALIASES = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}

AUDIOCAPS_FILENAME_PATTERNS: tuple[str, ...] = (
    "{youtube_id}.wav",
    "Y{youtube_id}.wav",
    "{youtube_id}_{start_time}.wav",
    "{youtube_id}.flac",
    "Y{youtube_id}.flac",
    "{youtube_id}_{start_time}.flac",
)
"""Audio file names common in AudioCaps downloads, tried in this order when no pattern is given.
``{start_time}`` is the CSV's value as written (e.g. ``30``)."""

_OFFICIAL_COLUMNS = ("audiocap_id", "youtube_id", "start_time", "caption")


def load_audiocaps(
    data_dir: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    splits: Iterable[str] | str | None = None,
    missing: str = "error",
    filename_pattern: str | None = None,
    encoding: str = "utf-8",
) -> DatasetDict:
    """Load AudioCaps into a ``DatasetDict`` with splits ``train``, ``validation``, ``test``.

    Args:
        data_dir: directory with ``train.csv``, ``val.csv``, ``test.csv`` (official or WavCaps-style).
        audio_dir: directory with the audio (see the module docstring for the default and sub-folders).
        splits: split names to load (``"val"`` is accepted for ``"validation"``); ``None`` loads every
            split whose CSV exists.
        missing: ``"error"`` raises on the first absent or unreadable clip or malformed row, naming the
            file and CSV line; ``"skip"`` drops them and logs how many and which.
        filename_pattern: official layout only: audio file name with ``{youtube_id}`` and
            ``{start_time}`` fields, e.g. ``"Y{youtube_id}.wav"``; ``None`` detects it per split.
        encoding: text encoding of the CSVs.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id``,
        ``captions``, ``source_id`` (``youtube:<id>``) and, for the official layout, ``caption_ids`` (the
        ``audiocap_id`` of each caption). A split left without clips is dropped with a warning
        (``missing="skip"``) or refused (``"error"``); each split's provenance
        (:func:`hf_atr.data.schema.corpus_provenance`) counts the clips found against AudioCaps v1's.
    """
    data_dir = expand_path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"AudioCaps data_dir {data_dir} is not a directory.")
    if filename_pattern is not None:
        _check_filename_pattern(filename_pattern)
    chosen = select_splits(splits, _SPLIT_ALIASES, "AudioCaps")
    if splits is None:
        chosen = [split for split in chosen if (data_dir / AUDIOCAPS_SPLIT_FILES[split]).is_file()]
        if not chosen:
            raise FileNotFoundError(
                f"No AudioCaps metadata in {data_dir}: expected one of {sorted(AUDIOCAPS_SPLIT_FILES.values())}."
            )
    root = audio_root(data_dir, audio_dir, "audio")
    loaded, sources = {}, {}
    for split in chosen:
        csv_path = data_dir / AUDIOCAPS_SPLIT_FILES[split]
        split_dir = split_audio_dir(root, [split, Path(AUDIOCAPS_SPLIT_FILES[split]).stem])
        problems = CorpusProblems(missing, "AudioCaps", split)
        header, records = read_csv_records(csv_path, (), encoding)
        if all(column in header for column in _OFFICIAL_COLUMNS):
            layout = "official CSV"
            rows = _official_rows(csv_path, header, records, split_dir, filename_pattern, problems)
            features = atr_features(with_source_id=True)
            features[CAPTION_IDS_COLUMN] = CAPTION_IDS_FEATURE
        elif "file_name" in header and caption_columns(header):
            layout = "WavCaps-style CSV"
            rows = _file_name_rows(csv_path, header, records, split_dir, problems)
            features = atr_features(with_source_id=True)
        else:
            raise CorpusFormatError(
                f"{location(csv_path, 1)}: header {header} is neither the official AudioCaps layout "
                f"({','.join(_OFFICIAL_COLUMNS)}) nor the WavCaps-style one (file_name,caption or "
                "file_name,caption_1,...,caption_5)."
            )
        problems.log_summary()
        provenance = split_provenance(
            "AudioCaps",
            layout,
            split,
            [csv_path],
            (AUDIOCAPS_RELEASE, AUDIOCAPS_OFFICIAL_CLIPS[split]),
            problems,
            corpus_split=Path(AUDIOCAPS_SPLIT_FILES[split]).stem,
        )
        loaded[split] = build_split(rows, features, provenance)
        sources[split] = str(csv_path)
        logger.info(f"AudioCaps {split}: {len(rows)} clips from {csv_path}, audio in {split_dir}")
    return assemble_splits(loaded, "AudioCaps", missing, sources)


def _check_filename_pattern(filename_pattern: str) -> None:
    try:
        filename_pattern.format(youtube_id="x", start_time="0")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"filename_pattern {filename_pattern!r} is not valid: it may use only the fields "
            f"{{youtube_id}} and {{start_time}} ({error!r})."
        ) from error


def _official_rows(
    csv_path: Path,
    header: list[str],
    records: list[CsvRecord],
    split_dir: Path,
    filename_pattern: str | None,
    problems: CorpusProblems,
) -> list[dict]:
    """Group one-caption-per-row records into clips keyed by ``youtube_id``, then resolve and check audio."""
    clips: dict[str, dict] = {}
    for record in records:
        problem = record_problem(csv_path, record, header, non_empty=_OFFICIAL_COLUMNS)
        values = record.values
        if problem is None:
            try:
                float(values["start_time"])
            except ValueError:
                problem = (
                    f"{location(csv_path, record.line)}: start_time {values['start_time']!r} is not a number."
                )
        youtube_id = values.get("youtube_id", "").strip()
        start_time = values.get("start_time", "").strip()
        if problem is None and youtube_id in clips and clips[youtube_id]["start_time"] != start_time:
            # Common file names carry no start time, so two segments of one video cannot be told apart.
            problem = (
                f"{location(csv_path, record.line)}: youtube_id {youtube_id} has start_time {start_time} here "
                f"but {clips[youtube_id]['start_time']} on line {clips[youtube_id]['line']}."
            )
        if problem is not None:
            problems.flag(CorpusFormatError(problem))
            continue
        clip = clips.setdefault(
            youtube_id, {"start_time": start_time, "line": record.line, "captions": [], "caption_ids": []}
        )
        clip["captions"].append(values["caption"].strip())
        clip["caption_ids"].append(values["audiocap_id"].strip())

    available = list_files(split_dir)
    pattern = filename_pattern or _detect_filename_pattern(clips, available, split_dir)
    rows = []
    for youtube_id, clip in clips.items():
        audio_path = split_dir / pattern.format(youtube_id=youtube_id, start_time=clip["start_time"])
        if not check_clip_audio(audio_path, location(csv_path, clip["line"]), problems):
            continue
        rows.append(
            {
                "audio": audio_value(audio_path),
                "audio_id": youtube_id,
                "captions": clip["captions"],
                SOURCE_ID_COLUMN: youtube_source_id(youtube_id),
                CAPTION_IDS_COLUMN: clip["caption_ids"],
            }
        )
    return rows


def _detect_filename_pattern(clips: dict[str, dict], available: set[str], split_dir: Path) -> str:
    """The pattern of :data:`AUDIOCAPS_FILENAME_PATTERNS` that names the most existing files."""
    matches = {
        pattern: sum(
            pattern.format(youtube_id=youtube_id, start_time=clip["start_time"]) in available
            for youtube_id, clip in clips.items()
        )
        for pattern in AUDIOCAPS_FILENAME_PATTERNS
    }
    best = max(AUDIOCAPS_FILENAME_PATTERNS, key=lambda pattern: matches[pattern])
    if matches[best] == 0:
        logger.warning(
            f"No AudioCaps audio file in {split_dir} matches any of {list(AUDIOCAPS_FILENAME_PATTERNS)}; "
            "pass filename_pattern= or audio_dir=."
        )
    else:
        logger.info(f"AudioCaps audio in {split_dir}: detected file names {best!r} ({matches[best]} clips).")
    return best


def _file_name_rows(
    csv_path: Path, header: list[str], records: list[CsvRecord], split_dir: Path, problems: CorpusProblems
) -> list[dict]:
    """WavCaps-style records (``file_name`` + ``caption`` or ``caption_1..N``) grouped by ``file_name``."""
    columns = caption_columns(header)
    if columns != ["caption"]:
        check_caption_slots(csv_path, columns, AUDIOCAPS_EVAL_CAPTIONS_PER_CLIP)
    clips: dict[str, dict] = {}
    for record in records:
        problem = record_problem(csv_path, record, header, non_empty=["file_name", *columns])
        if problem is not None:
            problems.flag(CorpusFormatError(problem))
            continue
        file_name = record.values["file_name"]
        clip = clips.setdefault(file_name, {"line": record.line, "captions": []})
        clip["captions"].extend(record.values[column].strip() for column in columns)

    available = list_files(split_dir)
    rows = []
    for file_name, clip in clips.items():
        # WavCaps-style lists sometimes drop the extension of the file the user has on disk.
        candidates = (
            [file_name] if Path(file_name).suffix else [file_name, f"{file_name}.wav", f"{file_name}.flac"]
        )
        resolved = next((name for name in candidates if name in available), candidates[0])
        audio_path = split_dir / resolved
        if not check_clip_audio(audio_path, location(csv_path, clip["line"]), problems):
            continue
        rows.append(
            {
                "audio": audio_value(audio_path),
                "audio_id": file_name,
                "captions": clip["captions"],
                SOURCE_ID_COLUMN: youtube_source_id(file_name),
            }
        )
    return rows
