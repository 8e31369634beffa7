"""Translation files read into tables of translated captions, per caption id or per clip key.

The layouts (per-language CSV in AudioCaps or Clotho layout, translation columns beside the English ones, one
``caption`` per row, ML-CLAP's JSON) are described in :mod:`hf_atr.data.multilingual`, which joins the tables
read here to the clips of a corpus. A malformed file raises :class:`~hf_atr.data.corpus_utils.CorpusFormatError`
naming the file and the line or record.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    caption_columns,
    decode_metadata,
    location,
    read_csv_records,
    record_problem,
)
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.source_ids import youtube_id_from_file_name

CLIP_KEY_COLUMNS: tuple[str, ...] = ("file_name", "youtube_id", "filename", "audio_id")
"""Columns tried, in order, as the clip key of a translation file when ``key`` is not given."""

CAPTION_KEY_COLUMN = "audiocap_id"
"""The per-caption key: a translation file with this column is aligned through the base's ``caption_ids``."""

ML_CLAP_KEY_FIELDS: tuple[str, ...] = ("wav", "id", "audio")
"""Fields of ML-CLAP's JSON records that name the clip, tried in order when a JSON record has none of
:data:`CLIP_KEY_COLUMNS`: ``wav`` (``Clotho/waveforms/test/<Clotho file name>``,
``AudioCaps/waveforms/test/Y<youtube id>.wav``), ``id`` (``<md5>.wav`` for Clotho, which names no clip;
``Y<youtube id>.wav`` for AudioCaps), ``audio`` (a path on the authors' machine ending in the file name)."""

_ENGLISH = "eng"

_LANGUAGE_COLUMN = re.compile(r"([A-Za-z]{2,3}(?:_[A-Z][a-z]{3})?)_(\d+)")


def _column_language(name: str) -> tuple[str, int] | None:
    """``("fra", 2)`` for a translation column ``fra_2`` / ``fr_2`` / ``fra_Latn_2``, else ``None``."""
    match = _LANGUAGE_COLUMN.fullmatch(name)
    if match is None:
        return None
    try:
        return normalize_language_code(match.group(1)), int(match.group(2))
    except ValueError:
        return None


@dataclass
class ClipTranslation:
    """One record of a per-clip translation file: the translated captions in slot order, the English
    captions it repeats (``None`` when the file has none) and where it is (``"<file>, line <n>"``)."""

    texts: list[str | None]
    english: list[str] | None
    where: str


@dataclass
class TranslationTable:
    """One language's translations from one file: per caption id, or per clip key (one record per key,
    several when English captions tell apart clips of the same name in different splits)."""

    path: Path
    by_caption_id: dict[str, str | None] = field(default_factory=dict)
    by_clip: dict[str, list[ClipTranslation]] = field(default_factory=dict)

    @property
    def has_english(self) -> bool:
        return any(record.english is not None for records in self.by_clip.values() for record in records)


def normalized_caption(caption: str) -> str:
    """A caption up to letter case and white space (files re-typed or re-saved by translators)."""
    return " ".join(caption.split()).casefold()


def caption_multiset(captions: Sequence[str]) -> tuple[str, ...]:
    """A clip's captions as a sorted tuple of normalized captions: equal for the same captions in any order."""
    return tuple(sorted(normalized_caption(caption) for caption in captions))


def read_table(
    path: Path, language: str, key: str | None, encoding: str, clip_ids: set[str]
) -> TranslationTable:
    if not path.is_file():
        raise FileNotFoundError(f"Translation file for {language} not found: {path}")
    if path.suffix.lower() in (".json", ".jsonl"):
        return _read_json_table(path, language, key, encoding, clip_ids)
    return _read_csv_table(path, language, key, encoding)


def _read_csv_table(path: Path, language: str, key: str | None, encoding: str) -> TranslationTable:
    header, records = read_csv_records(path, () if key is None else (key,), encoding)
    table = TranslationTable(path)
    language_columns = sorted(
        (column[1], name) for name in header if (column := _column_language(name)) and column[0] == language
    )
    key = key or _detect_key(header, path, per_caption=not language_columns)
    english_columns: list[str] = []
    if language_columns:
        slot_columns = [name for _, name in language_columns]
        english_columns = [f"caption_{slot}" for slot, _ in language_columns]
        if not all(name in header for name in english_columns):
            english_columns = []
    else:
        slot_columns = caption_columns(header)
        if not slot_columns:
            raise CorpusFormatError(
                f"{location(path, 1)}: header {header} has no caption column for {language}: expected "
                f"'caption', 'caption_1..N' or '{language}_1..N'."
            )
    for record in records:
        problem = record_problem(path, record, header, non_empty=[key])
        if problem is not None:
            raise CorpusFormatError(problem)
        record_key = _key_value(key, record.values[key])
        texts = [_text_or_none(record.values[column]) for column in slot_columns]
        english = [record.values[column].strip() for column in english_columns] or None
        _add_record(
            table,
            key,
            record_key,
            ClipTranslation(texts, english, location(path, record.line)),
            grouped=slot_columns == ["caption"],
        )
    return table


def _read_json_table(
    path: Path, language: str, key: str | None, encoding: str, clip_ids: set[str]
) -> TranslationTable:
    """One language's records of a JSON translation file (ML-CLAP's layout: :mod:`hf_atr.data.multilingual`).

    Each record's captions are grouped by the language of their ``source_lang_k`` (a caption without one
    is in ``language``): the ``language`` group, in slot order, is the record's translation, the English
    group (``eng_Latn``) the English captions it repeats; a record without ``language`` captions is
    skipped. Its key is the first value of its key field(s), their file names or the YouTube ids these
    name (:func:`_clip_key`) that is one of the base's ``clip_ids``.
    """
    text = decode_metadata(path, path.read_bytes(), encoding)
    try:
        if path.suffix.lower() == ".jsonl":
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
    except json.JSONDecodeError as error:
        raise CorpusFormatError(f"{path} is not valid JSON: {error}") from error
    if isinstance(records, dict) and isinstance(records.get("data"), list):
        records = records["data"]
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        raise CorpusFormatError(f"{path}: expected a list of records (objects), or {{'data': [...]}}.")
    table = TranslationTable(path)
    codes: dict[str, str] = {}
    for index, record in enumerate(records, start=1):
        where = f"{path}, record {index}"
        key_fields = [key] if key else _json_key_fields(record, where)
        values = [str(record[name]) for name in key_fields if record.get(name) not in (None, "")]
        if not values:
            raise CorpusFormatError(f"{where}: no '{key_fields[0]}'.")
        slot_columns = caption_columns(list(record))
        if not slot_columns:
            raise CorpusFormatError(f"{where}: no 'caption' or 'caption_1..N' field.")
        groups = _captions_by_language(record, slot_columns, language, where, codes)
        if language not in groups:
            continue
        texts, english = groups[language], groups.get(_ENGLISH)
        if english is not None and len(english) != len(texts):
            raise CorpusFormatError(
                f"{where}: {len(texts)} caption(s) in {language} but {len(english)} in English (eng_Latn); "
                f"caption k in {language} must translate English caption k."
            )
        key_name, record_key = (
            (key_fields[0], _key_value(key_fields[0], values[0]))
            if key_fields[0] == CAPTION_KEY_COLUMN
            else _clip_key(key_fields, record, clip_ids)
        )
        _add_record(
            table,
            key_name,
            record_key,
            ClipTranslation(texts, [text or "" for text in english] if english else None, where),
            grouped=slot_columns == ["caption"],
        )
    if not table.by_caption_id and not table.by_clip and records:
        raise CorpusFormatError(
            f"{path}: none of its {len(records)} record(s) has a caption in {language} (its source_lang_k "
            f"fields name {sorted(codes)}); load it as one of those languages or give the {language} file."
        )
    return table


def _json_key_fields(record: dict, where: str) -> list[str]:
    """The key field of a JSON record when it has one of ``audiocap_id`` / :data:`CLIP_KEY_COLUMNS`, else
    those of :data:`ML_CLAP_KEY_FIELDS` it has."""
    for name in (CAPTION_KEY_COLUMN, *CLIP_KEY_COLUMNS):
        if name in record:
            return [name]
    fields = [name for name in ML_CLAP_KEY_FIELDS if name in record]
    if not fields:
        candidates = [CAPTION_KEY_COLUMN, *CLIP_KEY_COLUMNS, *ML_CLAP_KEY_FIELDS]
        raise CorpusFormatError(f"{where}: none of the key fields {candidates} in {list(record)}; pass key=.")
    return fields


def _clip_key(fields: Sequence[str], record: dict, clip_ids: set[str]) -> tuple[str, str]:
    """``(field, key)``: the first of the record's ``fields`` values, their file names (``wav``:
    ``Clotho/waveforms/test/Santa Motor.wav`` -> ``Santa Motor.wav``) and the YouTube ids these name
    (``Y7fmOlUlwoNg.wav`` -> ``7fmOlUlwoNg``) that is one of ``clip_ids``; else the first field's value,
    which names no clip."""
    values = [
        (name, _key_value(name, str(record[name]))) for name in fields if record.get(name) not in (None, "")
    ]
    for name, value in values:
        file_name = PurePath(value).name
        for candidate in (value, file_name, youtube_id_from_file_name(file_name)):
            if candidate in clip_ids:
                return name, candidate
    return values[0]


def _captions_by_language(
    record: dict, slot_columns: Sequence[str], language: str, where: str, codes: dict[str, str]
) -> dict[str, list[str | None]]:
    """A JSON record's captions grouped by the ISO 639-3 code of their ``source_lang_k`` (``language`` for
    a caption without one), each group in slot order; ``codes`` caches the codes resolved (raw -> ISO)."""
    groups: dict[str, list[str | None]] = defaultdict(list)
    for column in slot_columns:
        source_language = record.get(column.replace("caption", "source_lang", 1))
        if source_language is None:
            groups[language].append(_text_or_none(record[column]))
            continue
        if not isinstance(source_language, str) or source_language not in codes:
            try:
                codes[source_language] = normalize_language_code(source_language)
            except ValueError as error:
                raise CorpusFormatError(f"{where}: {error}") from error
        groups[codes[source_language]].append(_text_or_none(record[column]))
    return groups


def _detect_key(fields: list[str], where: str | Path, per_caption: bool) -> str:
    candidates = ((CAPTION_KEY_COLUMN,) if per_caption else ()) + CLIP_KEY_COLUMNS
    for name in candidates:
        if name in fields:
            return name
    raise CorpusFormatError(f"{where}: none of the key fields {list(candidates)} in {fields}; pass key=.")


def _add_record(
    table: TranslationTable, key: str, record_key: str, record: ClipTranslation, grouped: bool
) -> None:
    """Add one record: per caption id (``key == "audiocap_id"``, one caption), else per clip; ``grouped``
    records (one ``caption`` per row) of one clip are appended in file order. A clip key may repeat only
    with different English captions (the same file name in two splits)."""
    if key == CAPTION_KEY_COLUMN and len(record.texts) == 1:
        if record_key in table.by_caption_id:
            raise CorpusFormatError(f"{record.where}: {key} {record_key!r} occurs twice.")
        table.by_caption_id[record_key] = record.texts[0]
        return
    previous = table.by_clip.get(record_key)
    if previous is None:
        table.by_clip[record_key] = [record]
    elif grouped:
        previous[0].texts.extend(record.texts)
    elif record.english is None or any(
        other.english is not None and caption_multiset(other.english) == caption_multiset(record.english)
        for other in previous
    ):
        raise CorpusFormatError(
            f"{record.where}: {key} {record_key!r} occurs twice (first at {previous[0].where}); "
            "give one file per split as {split: path} when splits share clip names."
        )
    else:
        previous.append(record)


def _key_value(key: str, raw: str) -> str:
    # Loaders strip ids but keep file names as written (Clotho's contain any character).
    return raw if key in ("file_name", "filename") else raw.strip()


def _text_or_none(text: object) -> str | None:
    if text is None:
        return None
    text = str(text).strip()
    return text or None
