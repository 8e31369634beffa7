"""A user's own folder of audio and captions, in the ``datasets`` AudioFolder convention, as a
``DatasetDict`` in the shared schema.

Layout (as ``load_dataset("audiofolder")`` expects it, read here with the ``csv`` / ``json`` modules: the
AudioFolder builder of datasets 5 needs torchcodec even for plain file paths)::

    my_sounds/                           my_sounds/
      metadata.csv                         train/metadata.jsonl
      rain on a tin roof.wav               train/a.flac
      birds/dawn chorus.flac               test/metadata.csv
                                           test/b.wav

- ``metadata.csv`` or ``metadata.jsonl`` with a ``file_name`` column: the audio file's path relative to the
  metadata file. One metadata file at the top, or one per split folder.
- Captions: ``caption`` (one per row; rows of one file are grouped in order), ``captions`` (a list in
  JSON Lines, a JSON list string in CSV) or ``caption_1..caption_N``.
- Optional columns: ``audio_id`` (default: ``file_name``), ``source_id`` (``freesound:<id>``, ...) and
  ``label``.
- Splits: folder names as ``datasets`` reads them (``train``/``training``, ``validation``/``valid``/
  ``val``/``dev``, ``test``/``testing``/``eval``/``evaluation``): each split folder's own metadata file,
  or the top metadata file's rows by the first folder of their ``file_name``; anything else is ``train``.

Audio files in the folder that no metadata row names are counted and named in a warning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from datasets import DatasetDict
from datasets.data_files import SPLIT_KEYWORDS

from hf_atr.data.audio import AUDIO_EXTENSIONS
from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    assemble_splits,
    audio_value,
    build_split,
    caption_columns,
    check_caption_slots,
    check_clip_audio,
    check_missing_policy,
    decode_metadata,
    expand_path,
    location,
    read_csv_records,
    record_problem,
    select_splits,
    split_provenance,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN, atr_features
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

METADATA_FILE_NAMES: tuple[str, ...] = ("metadata.csv", "metadata.jsonl")
"""The metadata file names of the AudioFolder convention, tried in this order."""

_SPLIT_OF_FOLDER = {keyword: str(split) for split, keywords in SPLIT_KEYWORDS.items() for keyword in keywords}
_SPLIT_ALIASES = {**_SPLIT_OF_FOLDER, **{str(split): str(split) for split in SPLIT_KEYWORDS}}
_LISTED_UNLISTED_FILES = 10


def load_audio_text_folder(
    data_dir: str | os.PathLike,
    splits: Iterable[str] | str | None = None,
    missing: str = "error",
    encoding: str = "utf-8",
) -> DatasetDict:
    """Load a folder of audio files and captions (AudioFolder convention, module docstring).

    Args:
        data_dir: the folder (``~`` is expanded).
        splits: split names to keep (``val``/``dev``/``eval`` are accepted); ``None`` keeps all found.
        missing: ``"error"`` raises on the first absent or unreadable file or malformed row (wrong field
            count, empty file name or caption, a file name twice in a ``captions`` / ``caption_k``
            layout), naming the metadata file and line; ``"skip"`` drops them and logs how many and which.
            A split left without clips is dropped with a warning (``"skip"``) or refused (``"error"``).
        encoding: text encoding of the metadata files.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id``,
        ``captions``, ``source_id`` and (when the metadata has it) ``label``.
    """
    check_missing_policy(missing)
    data_dir = expand_path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data_dir {data_dir} is not a directory.")
    metadata_files = _metadata_files(data_dir)
    wanted = set(select_splits(splits, _SPLIT_ALIASES, "audio folder")) if splits is not None else None
    rows_per_split: dict[str, list[dict]] = {}
    problems_per_split: dict[str, CorpusProblems] = {}
    metadata_per_split: dict[str, list[Path]] = {}
    with_label = False

    def problems_of(split: str) -> CorpusProblems:
        return problems_per_split.setdefault(split, CorpusProblems(missing, "Audio folder", split))

    for metadata_path, folder_split in metadata_files:
        for split, record_rows, label in _read_metadata(metadata_path, folder_split, encoding, problems_of):
            if wanted is not None and split not in wanted:
                continue
            with_label = with_label or label
            rows_per_split.setdefault(split, []).extend(_checked_rows(record_rows, problems_of(split)))
            metadata_per_split.setdefault(split, []).append(metadata_path)
    if not rows_per_split:
        raise FileNotFoundError(f"{data_dir}: no metadata rows for split(s) {sorted(wanted or [])}.")
    _report_unlisted_audio(data_dir, [row for rows in rows_per_split.values() for row in rows])
    features = atr_features(with_label=with_label, with_source_id=True)
    loaded, sources = {}, {}
    for split, rows in rows_per_split.items():
        problems_of(split).log_summary()
        for row in rows:
            row.setdefault("label", None)
        provenance = split_provenance(
            "Audio folder",
            "AudioFolder metadata",
            split,
            metadata_per_split[split],
            None,
            problems_per_split[split],
            folder=data_dir.name,
        )
        loaded[split] = build_split(rows, features, provenance)
        sources[split] = ", ".join(map(str, metadata_per_split[split]))
    return assemble_splits(loaded, "Audio folder", missing, sources)


def _metadata_files(data_dir: Path) -> list[tuple[Path, str | None]]:
    """``(metadata file, split of its folder or None for the top one)``: the top file, else one per split folder."""
    top = _metadata_file(data_dir)
    if top is not None:
        return [(top, None)]
    found = []
    for folder in sorted(path for path in data_dir.iterdir() if path.is_dir()):
        split = _SPLIT_OF_FOLDER.get(folder.name.lower())
        metadata = _metadata_file(folder)
        if split is not None and metadata is not None:
            found.append((metadata, split))
    if not found:
        raise FileNotFoundError(
            f"No metadata in {data_dir}: expected {' or '.join(METADATA_FILE_NAMES)} (columns file_name and "
            "caption, captions or caption_1..N) in it or in its split folders (train/, validation/, test/)."
        )
    return found


def _metadata_file(folder: Path) -> Path | None:
    present = [folder / name for name in METADATA_FILE_NAMES if (folder / name).is_file()]
    if len(present) > 1:
        raise CorpusFormatError(f"{folder} has both {' and '.join(p.name for p in present)}; keep one.")
    return present[0] if present else None


def _read_metadata(
    metadata_path: Path, folder_split: str | None, encoding: str, problems_of: Callable[[str], CorpusProblems]
) -> list[tuple[str, list[tuple[str, dict]], bool]]:
    """``(split, [(location, row values)], has_label)`` per split of one metadata file; rows of one file
    name with one ``caption`` each are grouped into one clip. Malformed rows go to ``problems_of(split)``."""
    if metadata_path.suffix == ".csv":
        header, records = read_csv_records(metadata_path, ("file_name",), encoding)
        located = []
        for record in records:
            where = location(metadata_path, record.line)
            problem = record_problem(metadata_path, record, header, non_empty=["file_name"])
            located.append((where, problem, dict(record.values)))
        columns = list(header)
    else:
        located, columns = _read_jsonl(metadata_path, encoding)
    caption_fields = ["captions"] if "captions" in columns else caption_columns(columns)
    if not caption_fields:
        raise CorpusFormatError(
            f"{location(metadata_path, 1)}: no caption column in {columns}: expected 'caption', 'captions' or "
            "'caption_1..N'."
        )
    check_caption_slots(metadata_path, caption_fields, None)
    # A split folder's metadata without records still names its split (assemble_splits reports it).
    per_split: dict[str, dict[str, tuple[str, dict]]] = {folder_split: {}} if folder_split else {}
    for where, problem, values in located:
        captions = None if problem else _captions(values, caption_fields, where)
        if isinstance(captions, str):
            problem, captions = captions, None
        file_name = values.get("file_name")
        split = folder_split or _split_of_file(file_name)
        clips = per_split.setdefault(split, {})
        if problem is None and file_name in clips and caption_fields != ["caption"]:
            problem = f"{where}: file_name {file_name!r} already at {clips[file_name][0]}."
        if problem is not None:
            problems_of(split).flag(CorpusFormatError(problem))
            continue
        if file_name in clips:
            clips[file_name][1]["captions"].extend(captions)
            continue
        clips[file_name] = (
            where,
            {
                "audio_path": metadata_path.parent / file_name,
                "audio_id": str(values.get("audio_id") or file_name),
                "captions": captions,
                SOURCE_ID_COLUMN: (str(values["source_id"]).strip() or None)
                if values.get("source_id")
                else None,
                "label": values.get("label"),
            },
        )
    return [(split, list(clips.values()), "label" in columns) for split, clips in per_split.items()]


def _read_jsonl(metadata_path: Path, encoding: str) -> tuple[list[tuple[str, str | None, dict]], list[str]]:
    text = decode_metadata(metadata_path, metadata_path.read_bytes(), encoding)
    located, columns = [], {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = location(metadata_path, number)
        try:
            values = json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusFormatError(f"{where}: not valid JSON ({error.msg}).") from error
        if not isinstance(values, dict):
            raise CorpusFormatError(f"{where}: expected a JSON object, got {type(values).__name__}.")
        columns.update(dict.fromkeys(values))
        file_name = values.get("file_name")
        problem = None if isinstance(file_name, str) and file_name.strip() else f"{where}: empty file_name."
        located.append((where, problem, values))
    if "file_name" not in columns:
        raise CorpusFormatError(
            f"{metadata_path}: no 'file_name' field in any record (fields: {list(columns)})."
        )
    return located, list(columns)


def _captions(values: dict, fields: list[str], where: str) -> list[str] | str:
    """The captions of one row, or a problem message."""
    if fields == ["captions"]:
        captions = values.get("captions")
        if isinstance(captions, str):
            try:
                captions = json.loads(captions)
            except json.JSONDecodeError:
                return f'{where}: \'captions\' must be a list (in CSV, a JSON list such as ["a", "b"]).'
        if not isinstance(captions, list) or not captions:
            return f"{where}: 'captions' must be a non-empty list of captions."
    else:
        captions = [values.get(field) for field in fields]
    blank = [
        index for index, text in enumerate(captions, start=1) if not isinstance(text, str) or not text.strip()
    ]
    if blank:
        return f"{where}: empty or non-text caption(s) {blank}."
    return [text.strip() for text in captions]


def _split_of_file(file_name: str | None) -> str:
    parts = PurePosixPath(str(file_name or "").replace("\\", "/")).parts
    return _SPLIT_OF_FOLDER.get(parts[0].lower(), "train") if len(parts) > 1 else "train"


def _checked_rows(record_rows: list[tuple[str, dict]], problems: CorpusProblems) -> list[dict]:
    rows = []
    for where, values in record_rows:
        audio_path = values.pop("audio_path")
        if check_clip_audio(audio_path, where, problems):
            rows.append({"audio": audio_value(audio_path), **values})
    return rows


def _report_unlisted_audio(data_dir: Path, rows: list[dict]) -> None:
    listed = {os.path.normcase(row["audio"]["path"]) for row in rows}
    unlisted = sorted(
        str(path.relative_to(data_dir))
        for path in data_dir.rglob("*")
        if path.suffix.lower() in AUDIO_EXTENSIONS
        and not path.name.startswith(".")
        and os.path.normcase(os.path.abspath(path)) not in listed
    )
    if unlisted:
        shown = ", ".join(map(repr, unlisted[:_LISTED_UNLISTED_FILES]))
        more = (
            f" and {len(unlisted) - _LISTED_UNLISTED_FILES} more"
            if len(unlisted) > _LISTED_UNLISTED_FILES
            else ""
        )
        logger.warning(f"{data_dir}: {len(unlisted)} audio file(s) named by no metadata row: {shown}{more}")
