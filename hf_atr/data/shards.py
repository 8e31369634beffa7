"""Sharded corpora for streamed training: WebDataset tar shards in the LAION-CLAP layout, and parquet shards.

Layouts:

- **WebDataset** (LAION-CLAP's ``audio-dataset`` layout, which ML-CLAP-style pipelines read too): each tar shard
  holds, per clip, ``<key>.<ext>`` (the audio file's bytes; ``flac``, ``wav``, ``ogg`` or ``mp3``) and
  ``<key>.json`` with ``"text"`` (the list of captions) and, written by hf-atr, ``"audio_id"``,
  ``"translations"`` (``{iso639_3: [captions]}``) and the clip's other columns under ``"original_data"``;
  ``sizes.json`` beside the shards counts the clips of each. Keys are numbers (WebDataset splits a key at its
  first dot, so clip ids are kept in the JSON).
- **parquet**: the shared schema itself (``audio`` as a ``{"bytes", "path"}`` struct, ``audio_id``, ``captions``,
  optional ``translations``), one file per shard.

:func:`write_audio_text_shards` writes either from a shared-schema dataset; :func:`load_audio_text_shards` reads
them back as a ``datasets.IterableDataset`` in the shared schema (``audio`` left undecoded), which
:class:`~hf_atr.training.streaming.StreamingPairs` trains on. Neither needs torchcodec: the WebDataset builder is
given explicit features that declare the audio members as ``Value("binary")`` (without them it types them
``Audio`` and asks for torchcodec), and audio is decoded with soundfile later, in the DataLoader workers.
"""

from __future__ import annotations

import io
import json
import math
import os
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as parquet
from datasets import Audio, ClassLabel, Dataset, Features, IterableDataset, List, Value, load_dataset

from .audio import check_audio_bytes
from .audio_arrays import AudioDecodeError
from .corpus_utils import check_missing_policy
from .schema import atr_features

SHARD_FORMATS: tuple[str, ...] = ("webdataset", "parquet")
AUDIO_EXTENSIONS: tuple[str, ...] = ("flac", "wav", "ogg", "mp3")
"""Audio members a WebDataset sample may hold (the first present one is the clip's audio)."""
SIZES_FILE = "sizes.json"
"""Clips per tar shard, as LAION-CLAP's ``make_tar.py`` writes it."""
DEFAULT_CLIPS_PER_SHARD = 512
"""LAION-CLAP's ``--num_element`` default: a few tens of MB of FLAC per shard."""

_SOUNDFILE_EXTENSIONS = {"WAV": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}
_SHARD_SUFFIXES = {".tar": "webdataset", ".parquet": "parquet"}
_STRUCT_COLUMNS = ("audio", "audio_id", "captions", "translations")


def webdataset_features(translation_languages: Iterable[str] = ()) -> Features:
    """Explicit features for ``load_dataset("webdataset", ...)``: the audio members as bytes, the JSON's fields."""
    metadata = {"text": List(Value("string")), "audio_id": Value("string")}
    translation_languages = list(translation_languages)
    if translation_languages:
        metadata["translations"] = {language: List(Value("string")) for language in translation_languages}
    return Features(
        {
            "__key__": Value("string"),
            "__url__": Value("string"),
            **{extension: Value("binary") for extension in AUDIO_EXTENSIONS},
            "json": metadata,
        }
    )


def shard_format_of(data_files: Sequence[str]) -> str:
    """``"webdataset"`` for ``.tar`` files, ``"parquet"`` for ``.parquet`` (glob patterns allowed)."""
    formats = {_SHARD_SUFFIXES.get(Path(str(pattern)).suffix.lower()) for pattern in data_files}
    if None in formats or len(formats) != 1:
        raise ValueError(
            f"Shards must all be .tar (WebDataset) or all .parquet files, got {list(data_files)}; pass "
            "shard_format= to read other names."
        )
    return formats.pop()


class _WebDatasetRow:
    """One WebDataset sample → a shared-schema row (a callable, so ``datasets`` can pickle it to workers)."""

    def __init__(self, translation_languages: Sequence[str]) -> None:
        self.translation_languages = list(translation_languages)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        where = f"{sample['__url__']}: sample {sample['__key__']!r}"
        extension = next((name for name in AUDIO_EXTENSIONS if sample.get(name) is not None), None)
        if extension is None:
            raise ValueError(f"{where} has no audio member (one of {', '.join(AUDIO_EXTENSIONS)}).")
        metadata = sample.get("json") or {}
        captions = metadata.get("text")
        if not captions:
            raise ValueError(f"{where} has no captions: its .json needs a non-empty 'text' list.")
        row = {
            "audio": {"bytes": sample[extension], "path": f"{sample['__key__']}.{extension}"},
            "audio_id": metadata.get("audio_id") or sample["__key__"],
            "captions": list(captions),
        }
        if self.translation_languages:
            row["translations"] = metadata.get("translations") or dict.fromkeys(self.translation_languages)
        return row


def load_audio_text_shards(
    data_files: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    shard_format: str | None = None,
    translation_languages: Iterable[str] = (),
    streaming: bool = True,
) -> IterableDataset | Dataset:
    """Read WebDataset or parquet shards as a shared-schema dataset (streamed by default).

    Args:
        data_files: shard paths or glob patterns (``"shards/train/*.tar"``), read in the given order.
        shard_format: ``"webdataset"`` or ``"parquet"``; default from the file suffixes.
        translation_languages: ISO 639-3 codes of the ``translations`` to read (none by default).
        streaming: ``True`` returns a ``datasets.IterableDataset`` with one shard per file; ``False`` a
            ``Dataset`` (written to the ``datasets`` cache).

    Returns:
        Rows with ``audio`` ``{"bytes", "path"}`` (undecoded), ``audio_id``, ``captions`` and, when languages
        are given, ``translations``.
    """
    files = [str(data_files)] if isinstance(data_files, (str, os.PathLike)) else [str(f) for f in data_files]
    if not files:
        raise ValueError("load_audio_text_shards needs at least one shard file.")
    shard_format = shard_format or shard_format_of(files)
    if shard_format not in SHARD_FORMATS:
        raise ValueError(f"shard_format must be one of {SHARD_FORMATS}, got {shard_format!r}.")
    languages = list(translation_languages)
    if shard_format == "parquet":
        rows = load_dataset("parquet", data_files={"train": files}, split="train", streaming=streaming)
        columns = ["audio", "audio_id", "captions", *(["translations"] if languages else [])]
        absent = [column for column in columns if column not in (rows.features or {})]
        if absent:
            raise ValueError(f"The parquet shards {files[:3]} lack the shared-schema column(s) {absent}.")
        if isinstance(rows.features["audio"], Audio):
            rows = rows.cast_column("audio", Audio(decode=False))
        return rows.select_columns(columns)
    samples = load_dataset(
        "webdataset",
        data_files={"train": files},
        split="train",
        streaming=streaming,
        features=webdataset_features(languages),
    )
    return samples.map(
        _WebDatasetRow(languages), remove_columns=list(samples.features), features=atr_features(languages)
    )


@dataclass
class ShardWriteReport:
    """What :func:`write_audio_text_shards` wrote: the shard files, the clip count, and the clips it skipped."""

    files: list[Path] = field(default_factory=list)
    clips: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _audio_bytes(audio: Any, audio_id: str) -> tuple[bytes, str]:
    """The clip's audio file bytes and their extension, checked readable from the header (no decoding)."""
    if not isinstance(audio, dict) or ("bytes" not in audio and "path" not in audio):
        raise AudioDecodeError(
            f"Clip {audio_id!r}",
            f"expected an undecoded audio value {{'bytes', 'path'}}, got {type(audio).__name__}.",
        )
    data = audio.get("bytes")
    if data is None:
        path = audio.get("path")
        if not path or not Path(path).is_file():
            raise AudioDecodeError(f"Clip {audio_id!r}", f"no audio bytes and no readable file at {path!r}.")
        data = Path(path).read_bytes()
    info = check_audio_bytes(data, f"Clip {audio_id!r}")
    extension = _SOUNDFILE_EXTENSIONS.get(info.format)
    if extension is None:
        raise AudioDecodeError(
            f"Clip {audio_id!r}", f"audio format {info.format} cannot be stored as one of {AUDIO_EXTENSIONS}."
        )
    return data, extension


def _shard_ranges(count: int, num_shards: int) -> list[range]:
    """``num_shards`` contiguous ranges covering ``range(count)``, sizes differing by at most one."""
    base, extra = divmod(count, num_shards)
    ranges, start = [], 0
    for index in range(num_shards):
        stop = start + base + (index < extra)
        ranges.append(range(start, stop))
        start = stop
    return ranges


def write_audio_text_shards(
    dataset: Dataset,
    output_dir: str | os.PathLike,
    *,
    shard_format: str = "webdataset",
    num_shards: int | None = None,
    clips_per_shard: int = DEFAULT_CLIPS_PER_SHARD,
    prefix: str = "shard",
    missing: str = "error",
) -> ShardWriteReport:
    """Write a shared-schema dataset as WebDataset tar shards or parquet shards (see the module docstring).

    Args:
        dataset: rows with ``audio`` (undecoded ``{"bytes", "path"}``), ``audio_id``, ``captions`` and optionally
            ``translations``; other columns with a plain value (``label``, ``source_id``, ...) go to the JSON's
            ``original_data`` (WebDataset), the rest (e.g. precomputed features) is not written.
        output_dir: created if needed; shards are ``<prefix>-00000.tar`` / ``.parquet``, in the dataset's order.
        num_shards: how many shards (make it a multiple of the number of training processes, and at least the
            processes times the DataLoader workers); default ``ceil(len(dataset) / clips_per_shard)``.
        clips_per_shard: used when ``num_shards`` is not given.
        missing: ``"error"`` raises on the first clip whose audio is absent or unreadable (checked from the file
            header); ``"skip"`` leaves it out and reports it in :attr:`ShardWriteReport.skipped`.
    """
    if shard_format not in SHARD_FORMATS:
        raise ValueError(f"shard_format must be one of {SHARD_FORMATS}, got {shard_format!r}.")
    check_missing_policy(missing)
    missing_columns = [
        column for column in ("audio", "audio_id", "captions") if column not in dataset.column_names
    ]
    if missing_columns:
        raise ValueError(
            f"The dataset lacks the shared-schema column(s) {missing_columns} to write shards from."
        )
    if num_shards is None:
        if not (isinstance(clips_per_shard, int) and clips_per_shard >= 1):
            raise ValueError(f"clips_per_shard must be a positive int, got {clips_per_shard!r}.")
        num_shards = max(1, math.ceil(len(dataset) / clips_per_shard))
    if not (isinstance(num_shards, int) and 1 <= num_shards <= max(1, len(dataset))):
        raise ValueError(
            f"num_shards must be an int in [1, {max(1, len(dataset))}] (the clips), got {num_shards!r}."
        )
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    languages = list(dataset.features["translations"]) if "translations" in dataset.column_names else []
    # Only the columns a shard can hold are read: a row of, say, precomputed features costs milliseconds to read.
    dataset = dataset.select_columns(_written_columns(dataset.features))
    report = ShardWriteReport()
    sizes = {}
    for shard_index, rows in enumerate(_shard_ranges(len(dataset), num_shards)):
        path = (
            output_dir / f"{prefix}-{shard_index:05d}.{'tar' if shard_format == 'webdataset' else 'parquet'}"
        )
        records = []
        for index in rows:
            row = dataset[index]
            audio_id = str(row["audio_id"])
            try:
                data, extension = _audio_bytes(row["audio"], audio_id)
            except AudioDecodeError as error:
                if missing == "error":
                    raise
                report.skipped.append((audio_id, str(error)))
                continue
            records.append((index, row, data, extension))
        if shard_format == "webdataset":
            _write_tar(path, records, languages)
        else:
            _write_parquet(path, records, languages)
        sizes[path.name] = len(records)
        report.files.append(path)
        report.clips += len(records)
    if shard_format == "webdataset":
        (output_dir / SIZES_FILE).write_text(json.dumps(sizes, indent=1))
    return report


def _written_columns(features: Features) -> list[str]:
    """The columns a shard can hold: the shared schema's, and those whose values can be plain (``original_data``)."""
    return [
        name
        for name, feature in features.items()
        if name in _STRUCT_COLUMNS or isinstance(feature, (Value, ClassLabel))
    ]


def _write_tar(path: Path, records: list[tuple[int, dict, bytes, str]], languages: Sequence[str]) -> None:
    with tarfile.open(path, "w") as tar:
        for index, row, data, extension in records:
            key = f"{index:09d}"
            metadata = {"text": list(row["captions"]), "audio_id": str(row["audio_id"])}
            if languages:
                metadata["translations"] = row.get("translations") or dict.fromkeys(languages)
            others = {
                name: value
                for name, value in row.items()
                if name not in _STRUCT_COLUMNS and isinstance(value, (str, int, float, bool))
            }
            if others:
                metadata["original_data"] = others
            for name, payload in (
                (f"{key}.{extension}", data),
                (f"{key}.json", json.dumps(metadata).encode()),
            ):
                member = tarfile.TarInfo(name)
                member.size = len(payload)
                tar.addfile(member, io.BytesIO(payload))


def _write_parquet(path: Path, records: list[tuple[int, dict, bytes, str]], languages: Sequence[str]) -> None:
    rows = []
    for _, row, data, extension in records:
        shard_row = {
            "audio": {"bytes": data, "path": f"{row['audio_id']}.{extension}"},
            "audio_id": str(row["audio_id"]),
            "captions": list(row["captions"]),
        }
        if languages:
            shard_row["translations"] = row.get("translations") or dict.fromkeys(languages)
        rows.append(shard_row)
    # The table carries the features in its schema metadata, so datasets reads the struct back as written.
    parquet.write_table(Dataset.from_list(rows, features=atr_features(languages)).data.table, path)
