"""Clotho v2 / v2.1 (Drossos et al., ICASSP 2020) from a user's directory, as a ``DatasetDict`` in the
shared schema.

Layout: ``clotho_captions_{development,validation,evaluation}.csv`` with header
``file_name,caption_1,...,caption_5`` (file names contain spaces, commas and quotes; captions contain
quoted commas), audio in ``development/``, ``validation/``, ``evaluation/`` under ``audio_dir``
(default ``data_dir``; a missing split folder means the audio is directly in ``audio_dir``).

Clotho's splits become the ``DatasetDict`` splits ``train`` (development), ``validation`` and ``test``
(evaluation), the names every hf-atr corpus uses; ``splits=`` accepts either name. Splits are loaded
independently, so a file name that occurs in two splits (it does in Clotho) gives one row in each.
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
    audio_root,
    audio_value,
    build_split,
    caption_columns,
    check_clip_audio,
    location,
    read_csv_records,
    record_problem,
    select_splits,
    split_audio_dir,
)
from hf_atr.data.schema import atr_features
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

CLOTHO_SPLITS: dict[str, str] = {"train": "development", "validation": "validation", "test": "evaluation"}
"""hf-atr split name -> Clotho's own split name (CSV suffix and audio folder)."""

_SPLIT_ALIASES = {
    **{name: name for name in CLOTHO_SPLITS},
    **{clotho_name: name for name, clotho_name in CLOTHO_SPLITS.items()},
}


def clotho_captions_file(data_dir: str | os.PathLike, split: str) -> Path:
    """Path of the captions CSV of an hf-atr split name (``train`` -> ``clotho_captions_development.csv``)."""
    return Path(data_dir) / f"clotho_captions_{CLOTHO_SPLITS[split]}.csv"


def load_clotho(
    data_dir: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    splits: Iterable[str] | str | None = None,
    missing: str = "error",
) -> DatasetDict:
    """Load Clotho into a ``DatasetDict`` with splits ``train``, ``validation``, ``test``.

    Args:
        data_dir: directory with the ``clotho_captions_<split>.csv`` files.
        audio_dir: directory with ``development/``, ``validation/``, ``evaluation/`` (default ``data_dir``).
        splits: hf-atr or Clotho split names; ``None`` loads every split whose CSV exists.
        missing: ``"error"`` raises on the first absent or unreadable clip or malformed row (wrong field
            count, empty file name or caption, file name repeated within the split), naming the file and
            CSV line; ``"skip"`` drops them and logs how many and which.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id``
        (the file name) and ``captions`` (the five captions in slot order).
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"Clotho data_dir {data_dir} is not a directory.")
    chosen = select_splits(splits, _SPLIT_ALIASES, "Clotho")
    if splits is None:
        chosen = [split for split in chosen if clotho_captions_file(data_dir, split).is_file()]
        if not chosen:
            raise FileNotFoundError(
                f"No Clotho captions in {data_dir}: expected clotho_captions_<split>.csv for a split in "
                f"{list(CLOTHO_SPLITS.values())}."
            )
    root = audio_root(data_dir, audio_dir, None)
    dataset = DatasetDict()
    for split in chosen:
        csv_path = clotho_captions_file(data_dir, split)
        split_dir = split_audio_dir(root, [CLOTHO_SPLITS[split], f"clotho_audio_{CLOTHO_SPLITS[split]}"])
        problems = CorpusProblems(missing, "Clotho", split)
        rows = _split_rows(csv_path, split_dir, problems)
        problems.log_summary()
        dataset[split] = build_split(rows, atr_features())
        logger.info(f"Clotho {split}: {len(rows)} clips from {csv_path}, audio in {split_dir}")
    return dataset


def _split_rows(csv_path: Path, split_dir: Path, problems: CorpusProblems) -> list[dict]:
    header, records = read_csv_records(csv_path, ("file_name",))
    columns = [column for column in caption_columns(header) if column != "caption"]
    if not columns:
        raise CorpusFormatError(
            f"{location(csv_path, 1)}: header {header} has no caption_1..caption_N columns."
        )
    first_line: dict[str, int] = {}
    rows = []
    for record in records:
        problem = record_problem(csv_path, record, header, non_empty=["file_name", *columns])
        file_name = record.values.get("file_name")
        if problem is None and file_name in first_line:
            problem = f"{location(csv_path, record.line)}: file_name {file_name!r} already on line {first_line[file_name]}."
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
            }
        )
    return rows
