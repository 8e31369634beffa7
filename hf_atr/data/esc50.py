"""ESC-50 (Piczak, ACM MM 2015) from a user's directory, as a ``DatasetDict`` in the shared schema.

Layout: ``meta/esc50.csv`` with header ``filename,fold,target,category,esc10,src_file,take`` (2,000 rows,
5 folds, 50 classes x 40 clips) and the 5 s clips in ``audio/``. Each selected fold is one split,
``fold1`` ... ``fold5``: cross-validation trains on four and tests on the fifth, the zero-shot protocol
tests on one fold or on all of them (``datasets.concatenate_datasets(list(dataset.values()))``).

The class becomes text through templates (:func:`class_prompts`): ``captions`` holds one caption per
template, ``label`` the category as written in the CSV (``chirping_birds``), ``audio_id`` the file name,
``source_id`` ``freesound:<src_file>`` (ESC-50's clips are cut from Freesound recordings).

Every fold's provenance records the corpus's class list (``classes``: every category of ``esc50.csv``, in the
order of its ``target`` numbers), however few of its classes the fold holds: zero-shot classification scores a
fold against all 50 classes (:func:`hf_atr.data.schema.class_list`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from datasets import DatasetDict

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    CorpusProblems,
    CsvRecord,
    assemble_splits,
    audio_value,
    build_split,
    check_clip_audio,
    expand_path,
    location,
    read_csv_records,
    record_problem,
    split_provenance,
)
from hf_atr.data.schema import SOURCE_ID_COLUMN, atr_features
from hf_atr.data.source_ids import freesound_source_id
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

ESC50_FOLDS: tuple[int, ...] = (1, 2, 3, 4, 5)
ESC50_CLIPS_PER_FOLD = 400
"""2,000 clips in 5 folds of 400 (50 classes x 8 clips per fold)."""
ESC50_CLASSES = 50
"""The number of classes in the release's ``esc50.csv``."""
ESC50_DEFAULT_TEMPLATES: tuple[str, ...] = ("This is a sound of {class}.",)
"""Caption templates; ``{class}`` is replaced by the class name in words."""


def esc50_split_name(fold: int) -> str:
    """The ``DatasetDict`` split name of an ESC-50 fold (``3`` -> ``"fold3"``)."""
    return f"fold{fold}"


def esc50_fold(split: str) -> int:
    """The fold of an ESC-50 split name (``"fold3"`` -> ``3``).

    Raises:
        ValueError: a name that is not one of ``fold1`` ... ``fold5``.
    """
    for fold in ESC50_FOLDS:
        if esc50_split_name(fold) == split:
            return fold
    raise ValueError(
        f"{split!r} is not an ESC-50 split; its splits are {[esc50_split_name(fold) for fold in ESC50_FOLDS]}."
    )


def class_prompts(label: str, templates: Sequence[str] | None = None) -> list[str]:
    """The captions of one ESC-50 class: each template with ``{class}`` replaced by the class name,
    underscores turned into spaces (``"chirping_birds"`` -> ``"This is a sound of chirping birds."``).

    The same function builds the dataset's captions and the zero-shot label queries, so both agree.
    """
    templates = _checked_templates(templates)
    words = label.replace("_", " ").strip()
    return [template.format(**{"class": words}) for template in templates]


def _checked_templates(templates: Sequence[str] | None) -> tuple[str, ...]:
    if templates is None:
        return ESC50_DEFAULT_TEMPLATES
    if isinstance(templates, str):
        templates = [templates]
    templates = tuple(templates)
    if not templates:
        raise ValueError(
            "templates is empty; give at least one caption template such as 'A sound of {class}.'"
        )
    for template in templates:
        if not isinstance(template, str) or "{class}" not in template:
            raise ValueError(f"Template {template!r} must be a string containing '{{class}}'.")
        try:
            template.format(**{"class": "x"})
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(
                f"Template {template!r} may use only the field {{class}} (write other braces as {{{{ }}}})."
            ) from error
    return templates


def load_esc50(
    data_dir: str | os.PathLike,
    folds: Iterable[int] | int | None = None,
    templates: Sequence[str] | None = None,
    missing: str = "error",
    encoding: str = "utf-8",
) -> DatasetDict:
    """Load ESC-50 into a ``DatasetDict`` with one split per selected fold (``fold1`` ... ``fold5``).

    The class list comes from every row of ``esc50.csv`` (all folds, clips present or not), ordered by
    ``target`` (by name when the file has no ``target`` column); a file naming other than 50 classes is
    loaded with a warning.

    Args:
        data_dir: the ESC-50 directory (with ``meta/esc50.csv`` and ``audio/``).
        folds: fold numbers (1-5) to load; ``None`` loads all five.
        templates: caption templates with ``{class}``; default :data:`ESC50_DEFAULT_TEMPLATES`.
        missing: ``"error"`` raises on the first absent or unreadable clip or malformed row (wrong field
            count, empty file name or category, fold not in 1-5), naming the file and CSV line;
            ``"skip"`` drops them and logs how many and which; a ``target`` that is not a whole number, or that
            numbers two categories (or a category numbered twice), is such a malformed row. A fold left without
            clips is dropped with a
            warning (``"skip"``) or refused (``"error"``).
        encoding: text encoding of ``esc50.csv``.

    Returns:
        ``DatasetDict`` of rows ``audio`` (``Audio(decode=False)``, absolute path), ``audio_id`` (file
        name), ``captions`` (one per template), ``label`` (the category) and ``source_id``
        (``freesound:<src_file>``); each fold's provenance (:func:`hf_atr.data.schema.corpus_provenance`)
        counts its clips against the 400 of the release and lists the classes (``classes``).
    """
    templates = _checked_templates(templates)
    chosen_folds = _checked_folds(folds)
    data_dir = expand_path(data_dir)
    csv_path = data_dir / "meta" / "esc50.csv"
    audio_dir = (data_dir / "audio").resolve()
    header, records = read_csv_records(csv_path, ("filename", "fold", "category"), encoding)
    problems = CorpusProblems(missing, "ESC-50", ",".join(map(esc50_split_name, chosen_folds)))
    rows_per_fold: dict[int, list[dict]] = {fold: [] for fold in chosen_folds}
    classes = _ClassNumbering(csv_path, numbered="target" in header)
    for record in records:
        problem = record_problem(csv_path, record, header, non_empty=["filename", "fold", "category"])
        fold = _parse_fold(record.values["fold"]) if problem is None else None
        if problem is None and fold is None:
            problem = f"{location(csv_path, record.line)}: fold {record.values['fold']!r} is not one of {list(ESC50_FOLDS)}."
        if problem is None:
            problem = classes.add(record)
        if problem is not None:
            problems.flag(CorpusFormatError(problem))
            continue
        if fold not in rows_per_fold:
            continue
        filename = record.values["filename"]
        audio_path = audio_dir / filename
        if not check_clip_audio(audio_path, location(csv_path, record.line), problems):
            continue
        category = record.values["category"].strip()
        rows_per_fold[fold].append(
            {
                "audio": audio_value(audio_path),
                "audio_id": filename,
                "captions": class_prompts(category, templates),
                "label": category,
                SOURCE_ID_COLUMN: freesound_source_id(record.values.get("src_file")),
            }
        )
    problems.log_summary()
    class_names = classes.names()
    if len(class_names) != ESC50_CLASSES:
        logger.warning(
            f"ESC-50: {csv_path} names {len(class_names)} classes where the release has {ESC50_CLASSES}; "
            f"zero-shot classification chooses among these {len(class_names)}."
        )
    features = atr_features(with_label=True, with_source_id=True)
    loaded = {}
    for fold, rows in rows_per_fold.items():
        split = esc50_split_name(fold)
        provenance = split_provenance(
            "ESC-50",
            "official CSV (meta/esc50.csv)",
            split,
            [csv_path],
            ("ESC-50", ESC50_CLIPS_PER_FOLD),
            classes=class_names,
        )
        loaded[split] = build_split(rows, features, provenance)
    logger.info(f"ESC-50: {sum(len(rows) for rows in rows_per_fold.values())} clips from {csv_path}")
    return assemble_splits(loaded, "ESC-50", missing, dict.fromkeys(loaded, str(csv_path)))


class _ClassNumbering:
    """The classes of ``esc50.csv`` by their ``target`` number, checked row by row for consistency."""

    def __init__(self, csv_path: Path, numbered: bool) -> None:
        self.csv_path = csv_path
        self.numbered = numbered
        self.category_of: dict[int, tuple[str, int]] = {}  # target -> (category, CSV line)
        self.target_of: dict[str, tuple[int | None, int]] = {}  # category -> (target, CSV line)

    def add(self, record: CsvRecord) -> str | None:
        """Record the row's class; a message naming the row when its ``target`` is not a whole number or
        disagrees with an earlier row's, ``None`` otherwise."""
        where = location(self.csv_path, record.line)
        category = record.values["category"].strip()
        target = None
        if self.numbered:
            text = record.values["target"].strip()
            if not text.isdigit():
                return f"{where}: target {record.values['target']!r} is not a whole number."
            target = int(text)
            if target in self.category_of and self.category_of[target][0] != category:
                other, line = self.category_of[target]
                return f"{where}: target {target} is {category!r} here but {other!r} on line {line}."
        if category in self.target_of and self.target_of[category][0] != target:
            other_target, line = self.target_of[category]
            return (
                f"{where}: category {category!r} has target {target} here but {other_target} on line {line}."
            )
        self.target_of.setdefault(category, (target, record.line))
        if target is not None:
            self.category_of.setdefault(target, (category, record.line))
        return None

    def names(self) -> list[str]:
        """The categories in ``target`` order (by name without numbers)."""
        if not self.numbered:
            return sorted(self.target_of)
        return [self.category_of[target][0] for target in sorted(self.category_of)]


def _checked_folds(folds: Iterable[int] | int | None) -> list[int]:
    if folds is None:
        return list(ESC50_FOLDS)
    if isinstance(folds, int):
        folds = [folds]
    folds = list(folds)
    invalid = [fold for fold in folds if not isinstance(fold, int) or fold not in ESC50_FOLDS]
    if invalid or not folds:
        raise ValueError(f"folds={folds!r}: choose fold numbers from {list(ESC50_FOLDS)}.")
    return sorted(set(folds))


def _parse_fold(text: str) -> int | None:
    try:
        fold = int(text.strip())
    except ValueError:
        return None
    return fold if fold in ESC50_FOLDS else None
