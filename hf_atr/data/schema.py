"""The one row schema every hf-atr corpus loader returns.

One row per audio clip:

- ``audio``: datasets ``Audio(decode=False)``, i.e. ``{"bytes": bytes | None, "path": str | None}``.
  We keep audio undecoded so that no code path needs torchcodec/FFmpeg (datasets' ``Audio`` decoding); it is
  decoded with soundfile by :func:`hf_atr.data.audio.decode_audio`.
- ``audio_id``: a stable string key of the clip.
- ``captions``: English captions (``list[str]``, at least one).
- ``translations`` (optional): ``{iso639_3_code: list[str] | None}``, caption ``k`` of a language
  is the translation of English caption ``k``; ``None`` when the clip has no translation.
- ``label`` (optional): the class name (ESC-50).
- ``source_id`` (optional): where the recording comes from, ``"<platform>:<id>"`` (``freesound:180913``,
  ``youtube:b0RFKhbpFJA``; :mod:`hf_atr.data.source_ids`), ``None`` when unknown. The overlap filter
  (:mod:`hf_atr.data.overlap`) matches clips of different corpora through it.

Every loader also records the dataset's *provenance* (corpus, layout, split, official clip count, clips
found, filters applied) in ``Dataset.info``; :func:`corpus_provenance` reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from datasets import Audio, Dataset, Features, List, Value

ENGLISH = "eng"
"""The language of the ``captions`` column."""

LANGUAGES: tuple[str, ...] = ("eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho")
"""ISO 639-3 codes of the languages hf-atr ships grammars and metrics for; ``eng`` first."""

_STORAGE_AUDIO = {"bytes": Value("binary"), "path": Value("string")}

SOURCE_ID_COLUMN = "source_id"
"""Optional column: ``"<platform>:<id>"`` of the recording (see :mod:`hf_atr.data.source_ids`) or ``None``."""

PROVENANCE_KEY = "hf_atr_provenance"
"""Key of the JSON object that :func:`set_corpus_provenance` writes into ``Dataset.info.description``."""


def atr_features(
    translation_languages: Iterable[str] = (), with_label: bool = False, with_source_id: bool = False
) -> Features:
    """The ``datasets.Features`` of the shared schema, with ``audio`` as an Arrow struct.

    Build rows with ``audio={"bytes": ..., "path": ...}`` and then call :func:`finalize_audio_column`.
    """
    features = {
        "audio": dict(_STORAGE_AUDIO),
        "audio_id": Value("string"),
        "captions": List(Value("string")),
    }
    translation_languages = list(translation_languages)
    if translation_languages:
        features["translations"] = {language: List(Value("string")) for language in translation_languages}
    if with_label:
        features["label"] = Value("string")
    if with_source_id:
        features[SOURCE_ID_COLUMN] = Value("string")
    return Features(features)


def finalize_audio_column(dataset: Dataset) -> Dataset:
    """Turn the ``{"bytes", "path"}`` struct column into ``Audio(decode=False)`` (an Arrow-level cast)."""
    return dataset.cast_column("audio", Audio(decode=False))


def captions_in_language(
    row: Mapping[str, Any], language: str, english_column: str = "captions"
) -> list[str] | None:
    """A row's captions in ``language``: ``captions`` for English, else ``translations[language]``.

    None (or an empty list) when the clip has no captions in that language.
    """
    if language == ENGLISH:
        return row.get(english_column)
    return (row.get("translations") or {}).get(language)


def check_caption(caption: Any, slot: int, clip: Any = None, language: str = ENGLISH) -> str:
    """``caption`` if it is a string with text in it; else a :class:`ValueError` naming where it is.

    The one check of a caption before it is tokenised (processor, evaluation tables, training batches,
    knowledge-base pairs). ``clip`` (an ``audio_id`` or row index) and ``language`` name the clip in the
    message; without a clip it names the caption's position ``slot`` only.
    """
    if isinstance(caption, str) and caption.strip():
        return caption
    where = f"Caption {slot}" if clip is None else f"Clip {clip!r}: {language} caption {slot}"
    raise ValueError(f"{where} is empty or not a string ({caption!r}).")


def all_captions(dataset: Dataset) -> list[str]:
    """Every caption of a shared-schema dataset: English ``captions`` and all ``translations``, in row order."""
    columns = [column for column in ("captions", "translations") if column in dataset.column_names]
    captions: list[str] = []
    for row in dataset.select_columns(columns):
        captions.extend(row["captions"] or [])
        for translated in (row.get("translations") or {}).values():
            captions.extend(translated or [])
    return captions


def set_corpus_provenance(dataset: Dataset, provenance: Mapping[str, Any]) -> Dataset:
    """Record where ``dataset`` comes from in its ``info`` (replacing what was recorded); returns ``dataset``.

    The loaders call it with (:mod:`hf_atr.data.corpus_utils`, ``split_provenance``): ``corpus``,
    ``layout``, ``split`` (the hf-atr name) and ``corpus_split`` (the corpus's own), ``metadata`` (file
    names read), ``official_release`` and ``official_clips`` (the size of that split in the official
    release, ``None`` when unknown), ``clips_found``, ``skipped`` (clips or rows dropped under
    ``missing="skip"``) and ``filters`` (one record per filter applied afterwards, see :func:`record_filter`);
    a labelled corpus with a class list of its own (ESC-50, SynthCaps) adds ``classes``: all its classes in the corpus's
    order, in every split, however few of them the split holds (:func:`class_list`).

    Stored as JSON in ``dataset.info.description``: ``DatasetInfo`` survives ``save_to_disk`` /
    ``load_from_disk`` and is carried over by ``select``, ``filter``, ``map``, ``add_column``,
    ``remove_columns`` and ``cast_column``; ``push_to_hub`` does not upload it (keep it in the card).
    The value must be JSON-serialisable.
    """
    dataset.info.description = json.dumps({PROVENANCE_KEY: dict(provenance)}, ensure_ascii=False)
    return dataset


def corpus_provenance(dataset: Dataset) -> dict[str, Any] | None:
    """The provenance recorded by :func:`set_corpus_provenance`, or ``None`` when there is none.

    ``datasets.concatenate_datasets`` joins the descriptions of its inputs, so the provenance of a
    concatenation of several loaded datasets is ``{"concatenated": [provenance, ...]}`` (plus ``filters``
    applied to the concatenation).
    """
    parts = []
    for chunk in (dataset.info.description or "").split("\n\n"):
        try:
            value = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get(PROVENANCE_KEY), dict):
            parts.append(value[PROVENANCE_KEY])
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"concatenated": parts}


def record_filter(dataset: Dataset, record: Mapping[str, Any]) -> Dataset:
    """Append ``record`` (a JSON-serialisable description of a filter that produced ``dataset``: its
    ``name``, what it removed, ``clips_after``) to the provenance's ``filters``; returns ``dataset``."""
    provenance = corpus_provenance(dataset) or {}
    provenance.setdefault("filters", []).append(dict(record))
    return set_corpus_provenance(dataset, provenance)


def describe_dataset(dataset: Dataset, fallback: str) -> str:
    """A short name for a card or a log line: ``"Clotho test"`` from the provenance, else ``fallback``.

    Clips held out at random as a test split (``hf_atr.data.corpora.hold_out_test_split``) are named as what they
    are, not as the corpus's test split: ``"AudioCaps: random hold-out of validation, seed 0"`` (``fallback`` for
    the corpus when the source recorded none).
    """
    provenance = corpus_provenance(dataset) or {}
    if "held_out_from" in provenance:
        sources = (provenance.get("held_out_from") or {}).get("concatenated") or [
            provenance.get("held_out_from") or {}
        ]
        splits = ", ".join(dict.fromkeys(part["split"] for part in sources if part.get("split")))
        seeds = [record["seed"] for record in provenance.get("filters") or [] if "seed" in record]
        return (
            f"{provenance.get('corpus') or fallback}: random hold-out of {splits or 'the training clips'}"
            + (f", seed {seeds[0]}" if seeds else "")
        )
    parts = provenance.get("concatenated") or [provenance]
    named = [f"{part['corpus']} {part.get('split') or ''}".strip() for part in parts if part.get("corpus")]
    return " + ".join(dict.fromkeys(named)) or fallback


def class_list(provenance: Mapping[str, Any] | None) -> list[str] | None:
    """The classes a provenance records (``classes``: the corpus's own class list, in its order); for a
    concatenation, the list its parts share. ``None`` when a part records none or the parts' lists differ:
    the dataset then has no class list of its own."""
    if not provenance:
        return None
    parts = provenance.get("concatenated") or [provenance]
    lists = [part.get("classes") for part in parts]
    if any(not isinstance(classes, list) or not classes for classes in lists):
        return None
    return list(lists[0]) if all(classes == lists[0] for classes in lists) else None


def official_clip_count(provenance: Mapping[str, Any] | None) -> int | None:
    """The official size of the split(s) a provenance describes (summed over a concatenation); ``None``
    when unknown for any part."""
    if not provenance:
        return None
    parts = provenance.get("concatenated") or [provenance]
    counts = [part.get("official_clips") for part in parts]
    if any(not isinstance(count, int) for count in counts):
        return None
    return sum(counts)
