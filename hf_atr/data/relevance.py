"""Relevance judgements: which clips of an evaluation set are relevant to which caption (DCASE 2025).

The classic protocol counts only a caption's own clip as relevant. DCASE 2025 (language-based audio
retrieval) judged further (caption, clip) pairs and ranks systems by mAP@16 with several relevant clips
per caption. :func:`load_relevance_judgements` reads such judgements into what
:func:`hf_atr.metrics.retrieval.retrieval_metrics` takes as ``text_to_audio``: the relevant clips of
each judged caption, as row indices of a shared-schema dataset. Two CSV layouts are read, told apart by
their header:

- **graded pairs**: ``caption,file_name,relevance``, one row per judged pair; a pair is relevant when its
  ``relevance`` is at least ``threshold`` (without a threshold the values must be 0 or 1);
- **DCASE 2025 lists**: ``query,audio_filenames``, one row per caption with a Python list literal of the
  file names judged relevant, e.g. ``"['bird_in_rain.wav', 'woodsbirds.wav']"`` (the layout of the file
  the DCASE 2025 task 6 baseline evaluates its multi-relevance mAP on, ``resources/metadata_eval.csv``).

Captions are matched exactly to the dataset's English ``captions`` and file names to its ``audio_id``
(Clotho's ``audio_id`` is the file name).
"""

from __future__ import annotations

import ast
import math
import os
from pathlib import Path
from typing import Any

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    CsvRecord,
    check_missing_policy,
    location,
    read_csv_records,
    record_problem,
)
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

GRADED_COLUMNS: tuple[str, ...] = ("caption", "file_name", "relevance")
"""Header of the graded-pairs layout: one row per judged (caption, clip) pair."""
LIST_COLUMNS: tuple[str, ...] = ("query", "audio_filenames")
"""Header of the DCASE 2025 list layout: one row per caption, the relevant file names as a list literal."""

_LISTED_IN_WARNING = 5


def load_relevance_judgements(
    path: str | os.PathLike,
    dataset: Any,
    *,
    threshold: float | None = None,
    missing: str = "error",
) -> dict[str, list[int]]:
    """The clips of `dataset` relevant to each judged caption, from a relevance-judgement CSV.

    Args:
        path: the CSV file (``~`` is expanded), in either layout of the module docstring.
        dataset: shared-schema ``datasets.Dataset`` (one row per clip) with ``audio_id`` and ``captions``.
        threshold: graded layout only: a pair is relevant when its ``relevance`` is >= `threshold`. Without
            one, ``relevance`` must be 0 or 1.
        missing: a caption that is not one of the dataset's English captions, or a file name that is no
            clip's ``audio_id``: ``"error"`` raises, ``"skip"`` drops the row (or, in the list layout, the
            file name) and logs how many were dropped.

    Returns:
        ``{caption: [clip row index, ...]}`` in file order, for every judged caption with at least one
        relevant clip; captions judged with no relevant clip are left out and counted in a warning.

    Raises:
        FileNotFoundError: `path` does not exist.
        CorpusFormatError: a header of neither layout, a malformed row, a relevance that is not a number
            (or not 0/1 without `threshold`), a bad list literal, or a caption (pair) judged twice; the
            message names the file, line, field and value.
        ValueError: a caption or file name absent from `dataset` under ``missing="error"`` (message as
            above), a `threshold` that is not a finite number or given for the list layout, or a dataset
            without ``audio_id`` / ``captions``.
    """
    check_missing_policy(missing)
    path = Path(path).expanduser()
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
    ):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}.")
    absent_columns = [name for name in ("audio_id", "captions") if name not in dataset.column_names]
    if absent_columns:
        raise ValueError(f"The dataset lacks column(s) {absent_columns} needed to resolve {path}.")
    header, records = read_csv_records(path, ())
    rows = dataset.select_columns(["audio_id", "captions"])
    clip_of_file = {}
    for index, audio_id in enumerate(rows["audio_id"]):
        clip_of_file.setdefault(audio_id, index)
    captions = {caption for clip_captions in rows["captions"] for caption in clip_captions or []}
    problems = CorpusProblems(missing, "relevance judgements", path.name)
    if all(name in header for name in GRADED_COLUMNS):
        judgements = _graded_pairs(path, header, records, threshold, captions, clip_of_file, problems)
    elif all(name in header for name in LIST_COLUMNS):
        if threshold is not None:
            raise ValueError(
                f"{path} lists the relevant clips of each caption ({','.join(LIST_COLUMNS)}); threshold applies "
                f"only to graded judgements ({','.join(GRADED_COLUMNS)})."
            )
        judgements = _relevant_lists(path, header, records, captions, clip_of_file, problems)
    else:
        raise CorpusFormatError(
            f"{location(path, 1)}: header {header} is neither graded pairs ({','.join(GRADED_COLUMNS)}) nor "
            f"relevance lists ({','.join(LIST_COLUMNS)})."
        )
    problems.log_summary()
    unmatched = [caption for caption, clips in judgements.items() if not clips]
    if unmatched:
        shown = "; ".join(repr(caption) for caption in unmatched[:_LISTED_IN_WARNING])
        logger.warning(
            f"{path}: {len(unmatched)} judged caption(s) have no relevant clip"
            f"{'' if threshold is None else f' at threshold {threshold}'} and are left out, e.g. {shown}."
        )
    return {caption: clips for caption, clips in judgements.items() if clips}


def _graded_pairs(
    path: Path,
    header: list[str],
    records: list[CsvRecord],
    threshold: float | None,
    captions: set[str],
    clip_of_file: dict[str, int],
    problems: CorpusProblems,
) -> dict[str, list[int]]:
    judgements: dict[str, list[int]] = {}
    line_of_pair: dict[tuple[str, str], int] = {}
    for record in records:
        problem = record_problem(path, record, header, non_empty=GRADED_COLUMNS)
        if problem is not None:
            raise CorpusFormatError(problem)
        caption, file_name, value = (record.values[name] for name in GRADED_COLUMNS)
        relevance = _relevance_value(path, record.line, value, threshold)
        previous = line_of_pair.setdefault((caption, file_name), record.line)
        if previous != record.line:
            raise CorpusFormatError(
                f"{location(path, record.line)}: caption {caption!r} and file_name {file_name!r} are judged "
                f"again (first on line {previous})."
            )
        if not _known(path, record.line, caption, file_name, captions, clip_of_file, problems):
            continue
        clips = judgements.setdefault(caption, [])
        if relevance >= (1 if threshold is None else threshold):
            clips.append(clip_of_file[file_name])
    return judgements


def _relevance_value(path: Path, line: int, value: str, threshold: float | None) -> float:
    try:
        relevance = float(value)
    except ValueError:
        relevance = math.nan
    if not math.isfinite(relevance):
        raise CorpusFormatError(f"{location(path, line)}: field 'relevance' is not a number: {value!r}.")
    if threshold is None and relevance not in (0, 1):
        raise CorpusFormatError(
            f"{location(path, line)}: field 'relevance' = {value!r} is graded; pass threshold= to binarise "
            "the judgements (relevant when relevance >= threshold), or give 0/1 values."
        )
    return relevance


def _relevant_lists(
    path: Path,
    header: list[str],
    records: list[CsvRecord],
    captions: set[str],
    clip_of_file: dict[str, int],
    problems: CorpusProblems,
) -> dict[str, list[int]]:
    judgements: dict[str, list[int]] = {}
    line_of_caption: dict[str, int] = {}
    for record in records:
        problem = record_problem(path, record, header, non_empty=LIST_COLUMNS)
        if problem is not None:
            raise CorpusFormatError(problem)
        caption, listed = (record.values[name] for name in LIST_COLUMNS)
        file_names = _file_name_list(path, record.line, listed)
        previous = line_of_caption.setdefault(caption, record.line)
        if previous != record.line:
            raise CorpusFormatError(
                f"{location(path, record.line)}: field 'query' = {caption!r} is listed again (first on line "
                f"{previous})."
            )
        if caption not in captions:
            problems.flag(_unknown_caption(path, record.line, "query", caption))
            continue
        clips = judgements.setdefault(caption, [])
        for file_name in dict.fromkeys(file_names):
            if file_name in clip_of_file:
                clips.append(clip_of_file[file_name])
            else:
                problems.flag(_unknown_file(path, record.line, "audio_filenames", file_name))
    return judgements


def _file_name_list(path: Path, line: int, listed: str) -> list[str]:
    try:
        file_names = ast.literal_eval(listed)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        file_names = None
    if not isinstance(file_names, (list, tuple)) or not all(isinstance(name, str) for name in file_names):
        raise CorpusFormatError(
            f"{location(path, line)}: field 'audio_filenames' is not a list of file names: {listed!r}."
        )
    return list(file_names)


def _known(
    path: Path,
    line: int,
    caption: str,
    file_name: str,
    captions: set[str],
    clip_of_file: dict[str, int],
    problems: CorpusProblems,
) -> bool:
    if caption not in captions:
        problems.flag(_unknown_caption(path, line, "caption", caption))
        return False
    if file_name not in clip_of_file:
        problems.flag(_unknown_file(path, line, "file_name", file_name))
        return False
    return True


def _unknown_caption(path: Path, line: int, field: str, caption: str) -> ValueError:
    return ValueError(
        f"{location(path, line)}: field {field!r} = {caption!r} is not an English caption of the dataset."
    )


def _unknown_file(path: Path, line: int, field: str, file_name: str) -> ValueError:
    return ValueError(
        f"{location(path, line)}: field {field!r} names {file_name!r}, which is no clip's audio_id."
    )
