"""A retrieval pipeline's indexes on disk: their folder and file names, writing and reading them, and ``skipped.tsv``.

A saved index is a directory holding ``audio_index`` and/or ``text_index`` (each two files,
:meth:`~hf_atr.pipelines.index.EmbeddingIndex.save`: safetensors + ids JSON) and, when audio was left out,
``skipped.tsv`` (one row per file, ``path<TAB>reason``). ``<model dir>/retrieval_index`` is where
``pipe.save_index()`` writes by default and where the next ``pipeline()`` on that model finds it
(:func:`default_index_dir`; the Hub's copy is fetched by :func:`hf_atr.pipelines.sharing.hub_index_dir`).
Under several processes the first process writes and every process returns once the files are there.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hf_atr.audio_encoding import SkippedAudio
from hf_atr.distributed import rank_and_world_size, wait_for_all
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.index_storage import model_fingerprints, replaced_atomically

INDEX_DIRNAME = "retrieval_index"
"""Sub-folder of a model directory where ``pipe.save_index()`` writes by default."""
AUDIO_INDEX_NAME = "audio_index"
TEXT_INDEX_NAME = "text_index"
INDEX_NAMES = (AUDIO_INDEX_NAME, TEXT_INDEX_NAME)
SKIPPED_FILENAME = "skipped.tsv"
"""Written beside a saved index: one row per file left out (``path``, ``reason``), tab-separated."""


def holds_index(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a saved audio or caption index."""
    return any((Path(directory) / f"{name}.json").is_file() for name in INDEX_NAMES)


def default_index_dir(model: Any) -> Path | None:
    """``<model dir>/retrieval_index`` for a model loaded from a local directory, else ``None`` (a model built in
    memory has no directory: not the working directory, which an empty name would give)."""
    name = str(getattr(model, "name_or_path", "") or "")
    return Path(name) / INDEX_DIRNAME if name and Path(name).is_dir() else None


def save_indexes(
    directory: str | os.PathLike,
    audio_index: EmbeddingIndex | None,
    text_index: EmbeddingIndex | None,
    skipped: Sequence[SkippedAudio],
    *,
    report_skipped: bool = True,
) -> list[Path]:
    """Write the indexes given and, with ``report_skipped``, ``skipped.tsv`` (removed when ``skipped`` is empty,
    so that no stale list stays); returns the files written. Under several processes only the first writes, and
    every process returns once the files are there."""
    directory = Path(directory)
    rank, _ = rank_and_world_size()
    written = []
    for name, index in ((AUDIO_INDEX_NAME, audio_index), (TEXT_INDEX_NAME, text_index)):
        if index is not None:
            written.extend(
                index.save(directory, name)
                if rank == 0
                else [directory / f"{name}.safetensors", directory / f"{name}.json"]
            )
    if report_skipped:
        report = directory / SKIPPED_FILENAME
        if skipped:
            if rank == 0:
                write_skipped_report(report, skipped)
            written.append(report)
        elif rank == 0:
            report.unlink(missing_ok=True)
    wait_for_all()
    return written


def load_indexes(
    directory: str | os.PathLike, model: Any
) -> tuple[EmbeddingIndex | None, EmbeddingIndex | None, list[SkippedAudio]]:
    """``(audio index, caption index, skipped audio)`` saved in ``directory``, each index checked against
    ``model`` (dimension and fingerprint); an index not saved there is ``None``.

    Raises:
        IndexFormatError: a corrupt file, or an index built by another model (rebuild it).
        FileNotFoundError: ``directory`` holds no index.
    """
    directory = Path(directory)
    if not holds_index(directory):
        raise FileNotFoundError(f"No {AUDIO_INDEX_NAME}.json or {TEXT_INDEX_NAME}.json in {directory}.")
    expected = {
        "expected_dim": model.config.projection_dim,
        "expected_fingerprint": model_fingerprints(model),
    }
    audio_index, text_index = (
        EmbeddingIndex.load(directory, name, **expected) if (directory / f"{name}.json").is_file() else None
        for name in INDEX_NAMES
    )
    report = directory / SKIPPED_FILENAME
    return audio_index, text_index, read_skipped_report(report) if report.is_file() else []


def write_skipped_report(path: Path, skipped: Sequence[SkippedAudio]) -> None:
    """Write ``path`` (tab-separated, header ``path<TAB>reason``), replacing it in one rename."""
    with replaced_atomically(path) as partial, partial.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["path", "reason"])
        writer.writerows((item.name, item.reason) for item in skipped)


def read_skipped_report(path: Path) -> list[SkippedAudio]:
    """The rows of a ``skipped.tsv`` written by :func:`write_skipped_report`."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    return [SkippedAudio(position, row[0], row[1]) for position, row in enumerate(rows[1:]) if len(row) == 2]


__all__ = [
    "AUDIO_INDEX_NAME",
    "INDEX_DIRNAME",
    "INDEX_NAMES",
    "SKIPPED_FILENAME",
    "TEXT_INDEX_NAME",
    "default_index_dir",
    "holds_index",
    "load_indexes",
    "read_skipped_report",
    "save_indexes",
    "write_skipped_report",
]
