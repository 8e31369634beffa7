"""Caption translations added to a corpus already loaded in the shared schema (the ``translations`` column).

Translated captions are aligned with the English ones caption by caption: caption ``k`` of a language
is the translation of English caption ``k`` of the same clip, which is what pairs translations for ATRI's
consistency metric (MRV, Eq. 16). Layouts read, detected from the file's extension and header:

- per-language CSV in AudioCaps layout (``audiocap_id,youtube_id,start_time,caption``): aligned through
  ``audiocap_id`` with the base's ``caption_ids`` column (:func:`hf_atr.data.audiocaps.load_audiocaps`);
- per-language CSV in Clotho layout (``file_name,caption_1,...,caption_5``): aligned by slot, rows
  matched to the base's ``audio_id``;
- one CSV with translation columns beside the English ones
  (``file_name,caption_1,fra_1,...,caption_5,fra_5``; ``fr_1`` and ``fra_Latn_1`` work too): aligned by
  slot, and the join is verified by the English captions (below);
- a key column with one ``caption`` per row (``file_name,caption``): rows of a clip in file order;
- JSON in ML-CLAP's layout (github.com/zyyan4/ml-clap, ``data/Clotho/test.json``): ``{"data": [record,
  ...], "num_captions_per_audio": N}`` (a bare list and JSON Lines ``.jsonl`` work too), each record with
  ``caption_1..caption_N`` and ``source_lang_1..source_lang_N``, the NLLB code of each caption's language
  (``eng_Latn``, ``jpn_Jpan``), and ``wav``, ``audio``, ``duration``, ``id``, ``duration_sample``. As
  ML-CLAP's own packer does, a record's captions are grouped by ``source_lang_k``: the loaded language's,
  in slot order, are its translation; its English ones (``eng_Latn``) the English captions it repeats.
  A record names its clip by ``wav`` (``Clotho/waveforms/test/<Clotho file name>``,
  ``AudioCaps/waveforms/test/Y<youtube id>.wav``), ``id`` (an md5 hash for Clotho; ``Y<youtube id>.wav``
  for AudioCaps) or ``audio``: the value, its file name or the YouTube id it names that is a base
  ``audio_id`` (:data:`ML_CLAP_KEY_FIELDS`).

A clip gets ``None`` for a language when its translation is absent or incomplete (a caption missing or
blank): never an empty string. Such clips are counted and named in a warning.

One file may serve several splits, joined to the clips by their key; Clotho has file names in two splits.
When the file carries the English captions beside the translated ones, a record is attached only to the
clip whose English captions it repeats, its translations put in the order of the clip's English captions
(a clip whose English differs gets ``None`` and is named in a warning); a record whose key names no clip
(Clotho's hash ids, a file renamed) is joined to the one clip with the same English captions, and
captions that several clips have are reported, never guessed. The count of clips joined, by key and by
English captions, is logged. Without English captions, a key found in more than one of the splits the
file is given for is ambiguous and an error naming both rows.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from datasets import DatasetDict, List, Value

from hf_atr.data.corpus_utils import (
    CAPTION_IDS_COLUMN,
    CorpusFormatError,
    caption_columns,
    decode_metadata,
    expand_path,
    location,
    read_csv_records,
    record_problem,
)
from hf_atr.data.source_ids import youtube_id_from_file_name
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

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
_LISTED_CLIPS_IN_WARNING = 20


def normalize_language_code(code: str) -> str:
    """The ISO 639-3 code of a language code: ISO 639-1 (``"ja"``), ISO 639-3 (``"jpn"``), NLLB/FLORES-200
    (``"jpn_Jpan"``) or a BCP 47 tag (``"ja-JP"``), in any letter case; resolved by ``langcodes``.

    Raises:
        ValueError: ``code`` is not a code of a known language (``"xx"``, ``"und"``, ``""``).
    """
    # langcodes costs ~40 ms to import; only code that reads language codes pays it.
    import langcodes

    language = None
    if isinstance(code, str) and code.strip():
        try:
            parsed = langcodes.Language.get(code.strip().replace("_", "-"))
            language = parsed.to_alpha3() if parsed.language and parsed.is_valid() else None
        except (LookupError, ValueError):
            language = None
    if language is None or language in _NOT_A_LANGUAGE:
        raise ValueError(
            f"Language code {code!r} is not an ISO 639-1 ('ja'), ISO 639-3 ('jpn') or NLLB ('jpn_Jpan') code "
            "of a known language."
        )
    return language


_NOT_A_LANGUAGE = frozenset({"und", "mul", "zxx", "mis"})
"""ISO 639 codes that name no language (undetermined, multiple, no linguistic content, uncoded)."""


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
class _ClipTranslation:
    """One record of a per-clip translation file: the translated captions in slot order, the English
    captions it repeats (``None`` when the file has none) and where it is (``"<file>, line <n>"``)."""

    texts: list[str | None]
    english: list[str] | None
    where: str


@dataclass
class _TranslationTable:
    """One language's translations from one file: per caption id, or per clip key (one record per key,
    several when English captions tell apart clips of the same name in different splits)."""

    path: Path
    by_caption_id: dict[str, str | None] = field(default_factory=dict)
    by_clip: dict[str, list[_ClipTranslation]] = field(default_factory=dict)

    @property
    def has_english(self) -> bool:
        return any(record.english is not None for records in self.by_clip.values() for record in records)


def load_translations(
    base: DatasetDict,
    translations: Mapping[str, str | os.PathLike | Mapping[str, str | os.PathLike]],
    key: str | None = None,
    encoding: str = "utf-8",
) -> DatasetDict:
    """Add the translations of ``base``'s English captions as the ``translations`` column.

    Args:
        base: a ``DatasetDict`` in the shared schema (from ``load_audiocaps``, ``load_clotho``, ...);
            translations it already has are kept.
        translations: ``{language code: file}`` where ``file`` is one path used for every split (keys
            absent from a split are ignored) or ``{split name: path}``. Codes are ISO 639-1 (``"fr"``),
            ISO 639-3 (``"fra"``) or NLLB (``"fra_Latn"``); the column uses ISO 639-3.
        key: the field of the translation files that identifies what a record translates. ``None``
            detects it: ``audiocap_id`` (per-caption alignment through the base's ``caption_ids``) when
            present, else the first of :data:`CLIP_KEY_COLUMNS` (matched to the base's ``audio_id``), else
            (JSON) the :data:`ML_CLAP_KEY_FIELDS` a record has. In JSON, a key value also matches by its
            file name or the YouTube id that names (``"AudioCaps/waveforms/test/Y7fmOlUlwoNg.wav"``).
        encoding: text encoding of the translation files.

    Returns:
        A new ``DatasetDict``: ``base`` with ``translations: {iso639_3: list[str] | None}``.

    Raises:
        CorpusFormatError: a malformed file (wrong field count, no key or caption columns, a duplicate
            key, a slot count different from the clip's English captions or, in a JSON record, from its
            own English captions, a JSON file with no caption in the language), a file none of whose
            records matches a clip of ``base``, or a key that names clips of two splits and no English
            captions tell which.
        ValueError: an unknown language code or split name, English or a language twice, a language
            ``base`` already has.
    """
    if not isinstance(base, DatasetDict):
        raise TypeError(f"base must be a datasets.DatasetDict, got {type(base).__name__}.")
    files_per_language: dict[str, dict[str, Path]] = {}
    for code, files in translations.items():
        language = normalize_language_code(code)
        if language == "eng":
            raise ValueError("English is the base corpus's `captions`; give only the other languages' files.")
        if language in files_per_language:
            raise ValueError(f"Language {language} is given twice in translations ({list(translations)}).")
        files_per_language[language] = _files_per_split(base, files, code)

    existing = {split: _existing_languages(dataset) for split, dataset in base.items()}
    for split, languages in existing.items():
        already = sorted(set(languages) & set(files_per_language))
        if already:
            raise ValueError(f"Split '{split}' already has translations for {already}.")

    clip_ids = {audio_id for dataset in base.values() for audio_id in dataset["audio_id"]}
    tables = {
        language: {path: _read_table(path, language, key, encoding, clip_ids) for path in set(files.values())}
        for language, files in files_per_language.items()
    }
    joins = {
        language: {
            path: _join_clip_records(
                table, base, [split for split in files if files[split] == path], language
            )
            for path, table in tables[language].items()
        }
        for language, files in files_per_language.items()
    }
    _check_files_matched(files_per_language, tables, joins, base)

    result = DatasetDict()
    for split, dataset in base.items():
        columns = {language: _existing_column(dataset, language) for language in existing[split]}
        for language, files in files_per_language.items():
            table = tables[language][files[split]] if split in files else None
            join = joins[language][files[split]] if split in files else {}
            columns[language] = _translations_for_split(dataset, split, language, table, join)
        if not columns:
            result[split] = dataset
            continue
        values = [{language: columns[language][row] for language in columns} for row in range(len(dataset))]
        feature = {language: List(Value("string")) for language in columns}
        if "translations" in dataset.column_names:
            dataset = dataset.remove_columns("translations")
        result[split] = dataset.add_column("translations", values, feature=feature)
    return result


def _files_per_split(
    base: DatasetDict, files: str | os.PathLike | Mapping[str, str | os.PathLike], code: str
) -> dict[str, Path]:
    if isinstance(files, Mapping):
        unknown = sorted(set(files) - set(base))
        if unknown:
            raise ValueError(
                f"translations[{code!r}] names split(s) {unknown} that base lacks ({list(base)})."
            )
        return {split: expand_path(path) for split, path in files.items()}
    return dict.fromkeys(base, expand_path(files))


def _existing_languages(dataset) -> list[str]:
    if "translations" not in dataset.column_names:
        return []
    return list(dataset.features["translations"])


def _existing_column(dataset, language: str) -> list[list[str] | None]:
    return [row[language] for row in dataset["translations"]]


def _join_clip_records(
    table: _TranslationTable, base: DatasetDict, splits: Sequence[str], language: str
) -> dict[tuple[str, int], _ClipTranslation]:
    """Which record of a per-clip ``table`` translates which row of ``base[split]`` (for the ``splits`` the
    file is given for), as ``{(split, row index): record}``, the record's translations in the order of the
    row's English captions.

    Records are matched by their key (file name, id); with English captions in the file, only to the row
    whose English captions they repeat (rows whose English differs are left out and named in a warning).
    Without them, a key that matches rows of two splits is ambiguous. A record whose key matches no row
    but which carries English captions is joined to the one row with the same English captions; captions
    that several rows have are reported, never guessed. The count of clips joined is logged.
    """
    if not table.by_clip:
        return {}
    rows_by_key: dict[str, list[tuple[str, int, list[str]]]] = defaultdict(list)
    for split in splits:
        for index, (audio_id, english) in enumerate(zip(base[split]["audio_id"], base[split]["captions"])):
            if audio_id in table.by_clip:
                rows_by_key[audio_id].append((split, index, english))
    join: dict[tuple[str, int], _ClipTranslation] = {}
    differing = []
    for audio_id, rows in rows_by_key.items():
        records = table.by_clip[audio_id]
        if not table.has_english:
            if len(rows) > 1:
                (split_a, index_a, _), (split_b, index_b, _) = rows[:2]
                raise CorpusFormatError(
                    f"{records[0].where}: {audio_id!r} is ambiguous: it names split '{split_a}' row {index_a} "
                    f"and split '{split_b}' row {index_b}, and {table.path.name} has no English captions to "
                    f"tell them apart; give one file per split ({{split: path}}) or a file with the English "
                    f"captions beside the {language} ones (caption_k and {language}_k columns)."
                )
            split, index, _ = rows[0]
            join[(split, index)] = records[0]
            continue
        for split, index, english in rows:
            aligned = next(filter(None, (_aligned_to(record, english) for record in records)), None)
            if aligned is not None:
                join[(split, index)] = aligned
            else:
                differing.append(f"{audio_id!r} (split '{split}' row {index}; {records[0].where})")
    _warn_listed(
        f"{language}: {len(differing)} clip(s) whose English captions differ from those in {table.path} "
        "(not joined, set to None)",
        differing,
    )
    joined_by_key = len(join)
    unkeyed = [
        record for key, records in table.by_clip.items() if key not in rows_by_key for record in records
    ]
    ambiguous = _join_by_english_captions(unkeyed, base, splits, join)
    _warn_listed(
        f"{language}: {len(ambiguous)} record(s) of {table.path} name no clip, and their English captions "
        "are those of several clips (not joined, never guessed)",
        ambiguous,
    )
    joined_records = {record.where for record in join.values()}
    unmatched = sum(
        record.where not in joined_records for records in table.by_clip.values() for record in records
    )
    logger.info(
        f"{language}: {table.path}: joined {len(join)} clip(s) of split(s) {list(splits)}: "
        f"{joined_by_key} by their key, {len(join) - joined_by_key} by their English captions; "
        f"{unmatched} record(s) matched no clip."
    )
    return join


def _join_by_english_captions(
    records: Sequence[_ClipTranslation],
    base: DatasetDict,
    splits: Sequence[str],
    join: dict[tuple[str, int], _ClipTranslation],
) -> list[str]:
    """Add to ``join`` each of ``records`` (whose key named no row) that carries English captions equal to
    those of exactly one row of ``splits`` not joined yet (up to letter case, white space and order).

    Returns:
        The records whose English captions are those of several rows, each with the rows it names.
    """
    records = [record for record in records if record.english is not None]
    if not records:
        return []
    rows_by_captions: dict[tuple[str, ...], list[tuple[str, int, str, list[str]]]] = defaultdict(list)
    for split in splits:
        for index, (audio_id, english) in enumerate(zip(base[split]["audio_id"], base[split]["captions"])):
            rows_by_captions[_caption_multiset(english)].append((split, index, audio_id, english))
    ambiguous = []
    for record in records:
        rows = rows_by_captions.get(_caption_multiset(record.english), [])
        if len(rows) > 1:
            named = " and ".join(
                f"{audio_id!r} (split '{split}' row {index})" for split, index, audio_id, _ in rows
            )
            ambiguous.append(f"{record.where} matches {named}")
        elif rows and (rows[0][0], rows[0][1]) not in join:
            split, index, _, english = rows[0]
            join[(split, index)] = _aligned_to(record, english)
    return ambiguous


def _warn_listed(headline: str, items: Sequence[str]) -> None:
    """One warning, ``headline: item, item, ... and N more``, when there are items."""
    if not items:
        return
    shown = ", ".join(items[:_LISTED_CLIPS_IN_WARNING])
    more = (
        f" and {len(items) - _LISTED_CLIPS_IN_WARNING} more" if len(items) > _LISTED_CLIPS_IN_WARNING else ""
    )
    logger.warning(f"{headline}: {shown}{more}")


def _normalized(caption: str) -> str:
    """A caption up to letter case and white space (files re-typed or re-saved by translators)."""
    return " ".join(caption.split()).casefold()


def _caption_multiset(captions: Sequence[str]) -> tuple[str, ...]:
    """A clip's captions as a sorted tuple of normalized captions: equal for the same captions in any order."""
    return tuple(sorted(_normalized(caption) for caption in captions))


def _aligned_to(record: _ClipTranslation, english: Sequence[str]) -> _ClipTranslation | None:
    """``record`` with its translations in the order of the clip's English captions ``english`` (caption k
    of the record translates its English caption k); ``None`` when one of ``english`` is not among the
    record's English captions. A record without English captions is returned as it is."""
    if record.english is None:
        return record
    free = defaultdict(list)
    for slot, caption in enumerate(record.english):
        free[_normalized(caption)].append(slot)
    slots = []
    for caption in english:
        candidates = free.get(_normalized(caption))
        if not candidates:
            return None
        slots.append(candidates.pop(0))
    return _ClipTranslation([record.texts[slot] for slot in slots], list(english), record.where)


def _translations_for_split(
    dataset,
    split: str,
    language: str,
    table: _TranslationTable | None,
    join: dict[tuple[str, int], _ClipTranslation],
) -> list[list[str] | None]:
    """One language's translations for every row of ``dataset`` (``None`` where absent), reported."""
    if table is None:
        return [None] * len(dataset)
    path = table.path
    audio_ids = dataset["audio_id"]
    captions = dataset["captions"]
    if table.by_caption_id:
        caption_ids = dataset[CAPTION_IDS_COLUMN]
        values = [[table.by_caption_id.get(caption_id) for caption_id in ids] for ids in caption_ids]
    else:
        values = []
        for index, (audio_id, english) in enumerate(zip(audio_ids, captions)):
            record = join.get((split, index))
            if record is not None and len(record.texts) != len(english):
                raise CorpusFormatError(
                    f"{record.where}: {len(record.texts)} {language} caption(s) for clip "
                    f"{audio_id!r}, which has {len(english)} English caption(s) in split '{split}'."
                )
            values.append(record.texts if record is not None else None)
    column = [None if row is None or any(text is None for text in row) else row for row in values]
    untranslated = [repr(audio_id) for audio_id, row in zip(audio_ids, column) if row is None]
    _warn_listed(
        f"{language}: {len(untranslated)} of {len(dataset)} clip(s) of split '{split}' have no complete "
        f"translation in {path} (set to None)",
        untranslated,
    )
    return column


def _read_table(
    path: Path, language: str, key: str | None, encoding: str, clip_ids: set[str]
) -> _TranslationTable:
    if not path.is_file():
        raise FileNotFoundError(f"Translation file for {language} not found: {path}")
    if path.suffix.lower() in (".json", ".jsonl"):
        return _read_json_table(path, language, key, encoding, clip_ids)
    return _read_csv_table(path, language, key, encoding)


def _read_csv_table(path: Path, language: str, key: str | None, encoding: str) -> _TranslationTable:
    header, records = read_csv_records(path, () if key is None else (key,), encoding)
    table = _TranslationTable(path)
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
            _ClipTranslation(texts, english, location(path, record.line)),
            grouped=slot_columns == ["caption"],
        )
    return table


def _read_json_table(
    path: Path, language: str, key: str | None, encoding: str, clip_ids: set[str]
) -> _TranslationTable:
    """One language's records of a JSON translation file (ML-CLAP's layout: module docstring).

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
    table = _TranslationTable(path)
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
            _ClipTranslation(texts, [text or "" for text in english] if english else None, where),
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
    table: _TranslationTable, key: str, record_key: str, record: _ClipTranslation, grouped: bool
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
        other.english is not None and _caption_multiset(other.english) == _caption_multiset(record.english)
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


def _check_files_matched(
    files_per_language: dict[str, dict[str, Path]],
    tables: dict[str, dict[Path, _TranslationTable]],
    joins: dict[str, dict[Path, dict[tuple[str, int], _ClipTranslation]]],
    base: DatasetDict,
) -> None:
    """Raise when a file cannot be aligned with the splits it was given for: per-caption records but
    no ``caption_ids`` column, or no record matching a clip (a wrong key or layout, not a few missing
    translations)."""
    for language, files in files_per_language.items():
        for path in set(files.values()):
            splits = [split for split, split_path in files.items() if split_path == path]
            table = tables[language][path]
            if table.by_caption_id:
                lacking = [split for split in splits if CAPTION_IDS_COLUMN not in base[split].column_names]
                if lacking:
                    raise CorpusFormatError(
                        f"{path} is aligned per caption through '{CAPTION_KEY_COLUMN}' but split(s) {lacking} "
                        f"have no '{CAPTION_IDS_COLUMN}' column (load AudioCaps from its official CSV layout), "
                        "or pass key= naming a clip column."
                    )
                known = {
                    caption_id
                    for split in splits
                    for ids in base[split][CAPTION_IDS_COLUMN]
                    for caption_id in ids
                }
                matched = bool(known & set(table.by_caption_id))
            else:
                matched = bool(joins[language][path])
            if not matched and (table.by_caption_id or table.by_clip):
                raise CorpusFormatError(
                    f"{path}: none of its records matches a clip of split(s) {splits} ({language}); check the "
                    "key field (key=) and that its values, or the file names they end in, equal the base's "
                    "audio_id / caption_ids; records with English captions (caption_k with source_lang_k "
                    "eng_Latn, or caption_k beside <lang>_k columns) are also matched by them."
                )
