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
  ``audio_id`` (:data:`~hf_atr.data.translation_files.ML_CLAP_KEY_FIELDS`).

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

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from datasets import DatasetDict, List, Value

from hf_atr.data import language_codes, translation_files
from hf_atr.data.corpus_utils import CAPTION_IDS_COLUMN, CorpusFormatError, expand_path
from hf_atr.data.translation_files import (
    ClipTranslation,
    TranslationTable,
    caption_multiset,
    normalized_caption,
    read_table,
)
from hf_atr.deprecation import moved_names
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

_LISTED_CLIPS_IN_WARNING = 20


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
            present, else the first of :data:`~hf_atr.data.translation_files.CLIP_KEY_COLUMNS` (matched to the base's ``audio_id``), else
            (JSON) the :data:`~hf_atr.data.translation_files.ML_CLAP_KEY_FIELDS` a record has. In JSON, a key value also matches by its
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
        language = language_codes.normalize_language_code(code)
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
        language: {path: read_table(path, language, key, encoding, clip_ids) for path in set(files.values())}
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
    table: TranslationTable, base: DatasetDict, splits: Sequence[str], language: str
) -> dict[tuple[str, int], ClipTranslation]:
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
    join: dict[tuple[str, int], ClipTranslation] = {}
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
    records: Sequence[ClipTranslation],
    base: DatasetDict,
    splits: Sequence[str],
    join: dict[tuple[str, int], ClipTranslation],
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
            rows_by_captions[caption_multiset(english)].append((split, index, audio_id, english))
    ambiguous = []
    for record in records:
        rows = rows_by_captions.get(caption_multiset(record.english), [])
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


def _aligned_to(record: ClipTranslation, english: Sequence[str]) -> ClipTranslation | None:
    """``record`` with its translations in the order of the clip's English captions ``english`` (caption k
    of the record translates its English caption k); ``None`` when one of ``english`` is not among the
    record's English captions. A record without English captions is returned as it is."""
    if record.english is None:
        return record
    free = defaultdict(list)
    for slot, caption in enumerate(record.english):
        free[normalized_caption(caption)].append(slot)
    slots = []
    for caption in english:
        candidates = free.get(normalized_caption(caption))
        if not candidates:
            return None
        slots.append(candidates.pop(0))
    return ClipTranslation([record.texts[slot] for slot in slots], list(english), record.where)


def _translations_for_split(
    dataset,
    split: str,
    language: str,
    table: TranslationTable | None,
    join: dict[tuple[str, int], ClipTranslation],
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


def _check_files_matched(
    files_per_language: dict[str, dict[str, Path]],
    tables: dict[str, dict[Path, TranslationTable]],
    joins: dict[str, dict[Path, dict[tuple[str, int], ClipTranslation]]],
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
                        f"{path} is aligned per caption through '{translation_files.CAPTION_KEY_COLUMN}' "
                        f"but split(s) {lacking} "
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


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "CAPTION_KEY_COLUMN": "hf_atr.data.translation_files",
    "CLIP_KEY_COLUMNS": "hf_atr.data.translation_files",
    "ML_CLAP_KEY_FIELDS": "hf_atr.data.translation_files",
    "normalize_language_code": "hf_atr.data.language_codes",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "load_translations",
]
