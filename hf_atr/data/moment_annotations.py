"""The lines of a moment annotation file, read and checked: one query per line (:class:`MomentQuery`).

The format, Moment-DETR's JSON Lines, is described in :mod:`hf_atr.data.moments`, whose
:func:`~hf_atr.data.moments.load_moments` reads a file through :func:`read_queries`. A line that is not a JSON
object, lacks a field of :data:`MOMENT_FIELDS`, or holds a value that is not what it names (a window that is not two
numbers with ``start < end``, a duplicated ``qid``, two durations for one recording) is a problem flagged with its
file and line; windows that run outside their recording are kept and counted in one warning.
:func:`read_translations` reads a translation file against the queries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hf_atr.data.corpus_utils import CorpusFormatError, CorpusProblems, location
from hf_atr.data.schema import SOURCE_ID_COLUMN
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

MOMENT_FIELDS: tuple[str, ...] = ("qid", "query", "duration", "vid", "relevant_windows")
"""The fields every line of a moment annotation file has."""

SOURCE_AUDIO_ID_COLUMN = "source_audio_id"
"""Optional column of synthesised moments: the ``audio_id`` of the clip the moment was made from."""

_LISTED_IN_WARNING = 5


@dataclass(frozen=True)
class MomentQuery:
    """One checked line of a moment file: its line number, ``qid``, query text (as released), recording (``vid``)
    and its ``duration`` in seconds, its ``windows`` ``[[start, end], ...]`` in seconds, and the two source fields of
    synthesised moments (``None`` when absent)."""

    line: int
    qid: str
    query: str
    duration: float
    vid: str
    windows: list[list[float]]
    source_audio_id: str | None
    source_id: str | None


def read_queries(path: Path, problems: CorpusProblems) -> list[MomentQuery]:
    """The queries of the moment file ``path`` in file order, each problem flagged in ``problems`` (its line left
    out); windows outside their recording are said in one warning."""
    queries: list[MomentQuery] = []
    first_line: dict[str, int] = {}
    durations: dict[str, tuple[float, int]] = {}
    outside: list[str] = []
    for number, record in _read_records(path, problems):
        where = location(path, number)
        try:
            query = _check_record(record, where)
            if query.qid in first_line:
                raise CorpusFormatError(
                    f"{where}: qid {query.qid!r} is already on line {first_line[query.qid]}."
                )
            known = durations.setdefault(query.vid, (query.duration, number))
            if known[0] != query.duration:
                raise CorpusFormatError(
                    f"{where}: recording {query.vid!r} has duration {query.duration:g}, but {known[0]:g} on line "
                    f"{known[1]}."
                )
        except CorpusFormatError as error:
            problems.flag(error)
            continue
        first_line[query.qid] = number
        queries.append(replace(query, line=number))
        outside += [
            f"{where}: relevant_windows[{k}] {record['relevant_windows'][k]!r} {note}"
            for k, (start, end) in enumerate(query.windows)
            if (note := _outside_note(start, end, query.duration)) is not None
        ]
    if outside:
        shown = "\n  ".join(outside[:_LISTED_IN_WARNING])
        more = (
            f"\n  ... and {len(outside) - _LISTED_IN_WARNING} more"
            if len(outside) > _LISTED_IN_WARNING
            else ""
        )
        logger.warning(
            f"{path}: {len(outside)} window(s) run outside their recording [0, duration]. They are kept as "
            "released (the metric reads them); training crops and the timeline figure clip them to the recording "
            f"and skip those left with no length:\n  {shown}{more}"
        )
    return queries


def _read_records(path: Path, problems: CorpusProblems) -> Iterable[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each non-blank line of a JSON Lines file that holds a JSON object."""
    with open(path, encoding="utf-8-sig") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as error:
                problems.flag(CorpusFormatError(f"{location(path, number)}: not a JSON object ({error})."))
                continue
            if not isinstance(record, dict):
                problems.flag(
                    CorpusFormatError(f"{location(path, number)}: not a JSON object but {record!r}.")
                )
                continue
            yield number, record


def _outside_note(start: float, end: float, duration: float) -> str | None:
    """How the window ``[start, end]`` (seconds) runs outside a recording of ``duration`` seconds, in words
    (``"ends 1 s past the end of the 5-s recording"``), or ``None`` when it lies inside ``[0, duration]``."""
    recording = f"the {duration:g}-s recording"
    if start >= duration:
        where = "at" if start == duration else f"{start - duration:g} s past"
        return f"starts {where} the end of {recording} and ends {end - duration:g} s past it: none of it is inside"
    if end <= 0:
        where = "at" if end == 0 else f"{-end:g} s before"
        return f"ends {where} the start of {recording}: none of it is inside"
    notes = []
    if start < 0:
        notes.append(f"starts {-start:g} s before the start of {recording}")
    if end > duration:
        notes.append(f"ends {end - duration:g} s past the end of {recording}")
    return " and ".join(notes) or None


def _check_record(record: dict[str, Any], where: str) -> MomentQuery:
    absent = [field for field in MOMENT_FIELDS if field not in record]
    if absent:
        raise CorpusFormatError(f"{where}: no field(s) {absent}; a line needs {list(MOMENT_FIELDS)}.")
    qid = record["qid"]
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
        raise CorpusFormatError(f"{where}: qid {qid!r} is not a non-empty string or an integer.")
    query, vid = record["query"], record["vid"]
    if not isinstance(query, str) or not query.strip():
        raise CorpusFormatError(f"{where}: query {query!r} is empty or not a string.")
    if not isinstance(vid, str) or not vid.strip() or "/" in vid or "\\" in vid:
        raise CorpusFormatError(
            f"{where}: vid {vid!r} is not a recording name (a non-empty string without '/')."
        )
    duration = _number(record["duration"])
    if duration is None or duration <= 0:
        raise CorpusFormatError(
            f"{where}: duration {record['duration']!r} is not a positive number of seconds."
        )
    windows = record["relevant_windows"]
    if not isinstance(windows, list) or not windows:
        raise CorpusFormatError(
            f"{where}: relevant_windows {windows!r} is not a non-empty list of [start, end]."
        )
    checked = [_check_window(window, k, where) for k, window in enumerate(windows)]
    source_audio_id, source_id = record.get(SOURCE_AUDIO_ID_COLUMN), record.get(SOURCE_ID_COLUMN)
    return MomentQuery(0, str(qid), query, duration, vid, checked, source_audio_id, source_id)


def _check_window(window: Any, k: int, where: str) -> list[float]:
    """``[start, end]`` as floats; a window that is not two finite numbers with ``start < end`` is an error."""
    bounds = [_number(value) for value in window] if isinstance(window, list) else []
    if len(bounds) != 2 or None in bounds:
        raise CorpusFormatError(
            f"{where}: relevant_windows[{k}] {window!r} is not [start, end]: two finite numbers of seconds."
        )
    start, end = bounds
    if start == end:
        raise CorpusFormatError(
            f"{where}: relevant_windows[{k}] {window!r} has no length (it starts and ends at {start:g} s); a "
            "window needs start < end."
        )
    if start > end:
        raise CorpusFormatError(
            f"{where}: relevant_windows[{k}] {window!r} ends {start - end:g} s before it starts; a window needs "
            "start < end."
        )
    return [start, end]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def read_translations(path: Path, queries: Sequence[MomentQuery]) -> dict[str, list[str]]:
    """``qid -> [translated query]`` from a translation file (fields ``qid`` and ``query``); its lines that are
    malformed or name no query of the base are errors naming the line."""
    if not path.is_file():
        raise FileNotFoundError(f"Translation file not found: {path}")
    qids = {query.qid for query in queries}
    translated: dict[str, list[str]] = {}
    strict = CorpusProblems("error", "moments", "translations")
    for number, record in _read_records(path, strict):
        qid, text = record.get("qid"), record.get("query")
        where = location(path, number)
        if str(qid) not in qids:
            raise CorpusFormatError(f"{where}: qid {qid!r} is not a query of the annotation file.")
        if not isinstance(text, str) or not text.strip():
            raise CorpusFormatError(f"{where}: query {text!r} is empty or not a string.")
        translated[str(qid)] = [text]
    untranslated = len(qids) - len(translated)
    if untranslated:
        logger.warning(f"{path}: {untranslated} of {len(qids)} queries have no translation (None).")
    return translated


__all__ = ["MOMENT_FIELDS", "SOURCE_AUDIO_ID_COLUMN", "MomentQuery", "read_queries", "read_translations"]
