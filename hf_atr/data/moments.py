"""Audio moment retrieval data: when, in a long recording, a described sound happens.

The annotation format is the JSON Lines file of Moment-DETR that Lighthouse (``line/lighthouse``) uses for
CASTELLA and Clotho-Moment, one query per line::

    {"qid": "rqfQRErjfk8_2", "query": "Loud cheering and applause from a crowd", "duration": 190,
     "vid": "rqfQRErjfk8", "relevant_windows": [[169, 190]]}

``qid`` names the query (CASTELLA: ``<vid>_<n>``; Clotho-Moment: a number written as a string), ``vid`` the
recording, ``duration`` its length and ``relevant_windows`` the moments ``[start, end]`` in seconds (CASTELLA:
whole seconds, in any order, possibly touching or overlapping, some running past ``duration``). Other fields
(Clotho-Moment's ``fg_dB``) are ignored, but ``source_id`` and ``source_audio_id``, which
:mod:`hf_atr.data.moment_synthesis` writes, are kept.
Lighthouse names the files ``<corpus>_<split>_release.jsonl`` (``castella_val_release.jsonl``).

Queries and windows are kept as released: the metric reads the windows as the file gives them, and predictions
carry the query text byte for byte. What must lie inside the recording (training crops, the timeline figure) clips
the windows there (:func:`windows_inside`); what the model encodes is :func:`query_text_for_model`.

A recording is the file ``<vid>.<ext>`` (any extension of :data:`~hf_atr.data.audio.AUDIO_EXTENSIONS`) in the
audio folder: CASTELLA's downloader writes ``<YouTube id>.wav``, Clotho-Moment's generator ``<vid>.wav``.

:func:`load_moments` returns one row per query; several queries share a recording, which an encoder should
read once: :func:`moment_recordings` gives the distinct recordings and each query's recording. Each line of a file
is read and checked by :mod:`hf_atr.data.moment_annotations`; this module finds the recordings and makes the dataset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, Features, List, Value

from hf_atr.data.audio import AUDIO_EXTENSIONS, check_audio_file, is_appledouble
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    assemble_splits,
    audio_root,
    audio_value,
    build_split,
    expand_path,
    location,
    select_splits,
    split_provenance,
)
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.moment_annotations import (
    SOURCE_AUDIO_ID_COLUMN,
    MomentQuery,
    read_queries,
    read_translations,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN
from hf_atr.deprecation import moved_names
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

MOMENT_COLUMNS = ("audio", "recording_id", "duration", "qid", "query", "windows")
"""The columns of a moment dataset (:func:`load_moments`) that training and evaluation read."""

MOMENT_SPLITS: dict[str, str] = {"train": "train", "val": "validation", "valid": "validation", "test": "test"}
"""The split names in moment file names (Lighthouse: ``train``, ``val``, ``test``; Clotho-Moment's generator:
``valid``) -> hf-atr's."""

_RELEASE_FILE = re.compile(r"(?P<corpus>.+)_(?P<split>train|val|valid|validation|test)_release\.jsonl")


def moment_features(translation_languages: Iterable[str] = (), with_sources: bool = False) -> Features:
    """The ``datasets.Features`` of a moment dataset (``audio`` as an Arrow struct until it is cast)."""
    features = {
        "audio": {"bytes": Value("binary"), "path": Value("string")},
        "recording_id": Value("string"),
        "duration": Value("float64"),
        "qid": Value("string"),
        "query": Value("string"),
        "windows": List(List(Value("float64"))),
    }
    languages = list(translation_languages)
    if languages:
        features["translations"] = {language: List(Value("string")) for language in languages}
    if with_sources:
        features[SOURCE_AUDIO_ID_COLUMN] = Value("string")
        features[SOURCE_ID_COLUMN] = Value("string")
    return Features(features)


def load_moments(
    path: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    *,
    translations: Mapping[str, str | os.PathLike] | None = None,
    missing: str = "error",
    split: str | None = None,
) -> Dataset:
    """Read a moment annotation file (JSON Lines, module docstring) and find its recordings.

    Args:
        path: the ``.jsonl`` file (``castella_val_release.jsonl``).
        audio_dir: the folder of the recordings ``<vid>.<ext>``; default ``<path's folder>/audio`` when it
            exists, else the file's folder.
        translations: language code (``"ja"``, ``"jpn"``, ``"jpn_Jpan"``) -> a file of the same format whose
            ``query`` is the translation of the query with the same ``qid`` (other fields are not read). They
            ride along as in the shared schema: ``translations[<ISO 639-3>]`` is a one-element list aligned
            with ``query``, ``None`` for a query the file does not translate.
        missing: ``"error"`` raises on the first problem (a malformed line, a missing field, a window that is
            not two numbers or has ``start >= end``, a duplicated ``qid``, two durations for one recording, a
            missing or unreadable recording), naming the file and line; ``"skip"`` drops those queries and logs
            them. A window that runs outside its recording is not a problem (below).
        split: the split name recorded in the provenance (default: from the file name, else ``"test"``).

    Returns:
        A ``Dataset``, one row per query in file order: ``audio`` (``Audio(decode=False)``, absolute path),
        ``recording_id`` (``vid``), ``duration`` (seconds), ``qid`` (an integer ``qid`` as its decimal
        string), ``query`` (as released, white space included), ``windows`` (``[[start, end], ...]`` in
        seconds, as released and in file order), ``translations`` when given (as released),
        ``source_audio_id`` and ``source_id`` when the file has them. Windows that run outside ``[0,
        duration]`` are kept and counted in one warning that shows the first few (line, window, duration, by
        how much).

    Raises:
        FileNotFoundError: ``path`` or ``audio_dir`` does not exist (and, under ``"error"``, a recording).
        CorpusFormatError: the first problem under ``missing="error"``, or no query left.
    """
    path = expand_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Moment annotation file not found: {path}")
    root = audio_root(path.parent, audio_dir, "audio")
    split = split or _split_of(path) or "test"
    problems = CorpusProblems(missing, "moments", split)
    queries = read_queries(path, problems)
    recordings = _resolve_recordings(path, queries, root, problems)
    queries = [query for query in queries if query.vid in recordings]
    languages = {
        normalize_language_code(code): expand_path(file) for code, file in (translations or {}).items()
    }
    translated = {language: read_translations(file, queries) for language, file in languages.items()}
    with_sources = any(query.source_audio_id is not None for query in queries)
    rows = [
        {
            "audio": audio_value(recordings[query.vid]),
            "recording_id": query.vid,
            "duration": query.duration,
            "qid": query.qid,
            "query": query.query,
            "windows": query.windows,
            **(
                {"translations": {lang: texts.get(query.qid) for lang, texts in translated.items()}}
                if translated
                else {}
            ),
            **(
                {SOURCE_AUDIO_ID_COLUMN: query.source_audio_id, SOURCE_ID_COLUMN: query.source_id}
                if with_sources
                else {}
            ),
        }
        for query in queries
    ]
    problems.log_summary()
    if not rows:
        raise CorpusFormatError(f"{path}: no query could be loaded (see the problems logged above).")
    provenance = split_provenance(
        "moments",
        "Moment-DETR JSON Lines",
        split,
        [path, *languages.values()],
        None,
        problems,
        recordings=len(recordings),
    )
    dataset = build_split(rows, moment_features(translated, with_sources), provenance)
    logger.info(f"{path}: {len(dataset)} queries over {len(recordings)} recordings in {root}")
    return dataset


def load_moment_splits(
    data_dir: str | os.PathLike,
    audio_dir: str | os.PathLike | None = None,
    splits: Iterable[str] | str | None = None,
    missing: str = "error",
) -> DatasetDict:
    """Every ``<corpus>_<split>_release.jsonl`` in ``data_dir`` as a ``DatasetDict``: splits ``train``, ``validation`` (``val``, ``valid``) and ``test``, each read by :func:`load_moments`
    with ``audio_dir`` (default ``data_dir/audio``, else ``data_dir``).

    Raises:
        FileNotFoundError: no such file, or none for a split asked for.
        CorpusFormatError: two files for one split.
    """
    data_dir = expand_path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"Moments data_dir {data_dir} is not a directory.")
    files: dict[str, Path] = {}
    for file in sorted(data_dir.glob("*_release.jsonl")):
        match = _RELEASE_FILE.fullmatch(file.name)
        if match is None:
            continue
        split = MOMENT_SPLITS.get(match["split"], match["split"])
        if split in files:
            raise CorpusFormatError(
                f"{data_dir}: two files for split {split!r}: {files[split].name}, {file.name}."
            )
        files[split] = file
    aliases = {**MOMENT_SPLITS, "validation": "validation"}
    chosen = [
        name for name in select_splits(splits, aliases, "moments") if splits is not None or name in files
    ]
    absent = [name for name in chosen if name not in files]
    if absent or not chosen:
        raise FileNotFoundError(
            f"No moment file for split(s) {absent or ['train', 'validation', 'test']} in {data_dir}: expected "
            "<corpus>_<split>_release.jsonl with split train, val or test (castella_val_release.jsonl)."
        )
    loaded = {name: load_moments(files[name], audio_dir, missing=missing, split=name) for name in chosen}
    return assemble_splits(loaded, "moments", missing, {name: files[name].name for name in chosen})


def is_moment_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` has the columns of :func:`load_moments` (:data:`MOMENT_COLUMNS`)."""
    return set(MOMENT_COLUMNS) <= set(getattr(dataset, "column_names", ()) or ())


def moment_recordings(dataset: Dataset) -> tuple[Dataset, list[int]]:
    """The distinct recordings of a moment dataset and, for each query row, the index of its recording.

    Encode ``recordings`` (``recording_id``, ``audio``, ``duration``; one row per recording, in the order of
    their first query) once, then read query ``i``'s recording embedding at ``recording_of[i]``. Computed from
    the ``recording_id`` column, so it holds for any ``select`` / ``filter`` of the dataset.

    Returns:
        ``(recordings, recording_of)``: a ``Dataset`` and a list of ``len(dataset)`` indices into it.
    """
    ordinal: dict[str, int] = {}
    first_rows, recording_of = [], []
    for row, recording in enumerate(dataset["recording_id"]):
        if recording not in ordinal:
            ordinal[recording] = len(first_rows)
            first_rows.append(row)
        recording_of.append(ordinal[recording])
    return dataset.select_columns(["recording_id", "audio", "duration"]).select(first_rows), recording_of


def _split_of(path: Path) -> str | None:
    match = _RELEASE_FILE.fullmatch(path.name)
    return MOMENT_SPLITS.get(match["split"], match["split"]) if match else None


def windows_inside(windows: Sequence[Sequence[float]], duration: float) -> list[list[float]]:
    """The parts of ``windows`` (``[[start, end], ...]`` seconds) that lie inside ``[0, duration]``, in order; a
    window with no length there is left out (``[69, 70]`` in a recording of 69 s). What a crop or a figure of the
    recording reads; the metric reads the windows as released."""
    clipped = [[max(float(start), 0.0), min(float(end), float(duration))] for start, end in windows]
    return [[start, end] for start, end in clipped if end > start]


def query_text_for_model(query: str) -> str:
    """The text the model encodes for a released ``query``: without the white space around it.

    Released files have it (most queries of Lighthouse's ActivityNet release start with a space), and
    :func:`load_moments` keeps the query as released so that predictions carry it unchanged; the clip corpora's
    loaders strip their captions, so a model is trained and evaluated on stripped text.
    """
    return query.strip()


def _resolve_recordings(
    path: Path, queries: Sequence[MomentQuery], root: Path, problems: CorpusProblems
) -> dict[str, Path]:
    """``vid -> <root>/<vid>.<ext>`` for each recording found and readable; the others are flagged with the
    first line that names them."""
    by_stem: dict[str, list[Path]] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            name = Path(entry.name)
            if entry.is_file() and name.suffix.lower() in AUDIO_EXTENSIONS and not is_appledouble(name):
                by_stem.setdefault(name.stem, []).append(root / name)
    found: dict[str, Path] = {}
    flagged: set[str] = set()
    for query in queries:
        if query.vid in found or query.vid in flagged:
            continue
        where = location(path, query.line)
        candidates = sorted(by_stem.get(query.vid, []))
        try:
            if not candidates:
                raise FileNotFoundError(f"{where}: no recording {query.vid}.<ext> in {root}.")
            if len(candidates) > 1:
                raise CorpusFormatError(
                    f"{where}: recording {query.vid!r} is ambiguous: {[file.name for file in candidates]} in {root}."
                )
            check_audio_file(candidates[0])
        except (FileNotFoundError, CorpusFormatError, AudioDecodeError) as error:
            flagged.add(query.vid)
            problems.flag(
                AudioDecodeError(where, str(error)) if isinstance(error, AudioDecodeError) else error
            )
            continue
        found[query.vid] = candidates[0]
    return found


MOVED_NAMES = {"MOMENT_FIELDS": "hf_atr.data.moment_annotations"}
"""Public names of this module that moved, and their new module (read from there with a deprecation warning)."""
__getattr__ = moved_names(__name__, MOVED_NAMES)


__all__ = [
    "MOMENT_COLUMNS",
    "is_moment_dataset",
    "load_moment_splits",
    "load_moments",
    "moment_features",
    "moment_recordings",
    "query_text_for_model",
    "windows_inside",
]
