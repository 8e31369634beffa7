"""Batches for multilingual training (ATRI): K captions per clip (KCL), English + one other language (CACL),
and one random language per caption per epoch (the ML-CLAP baseline).

Translations follow the shared schema: ``translations[lang][k]`` is the translation of ``captions[k]``, so
one caption slot ``k`` names the same description in every language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..audio_batches import audio_batch
from ..data.feature_storage import ClipRows
from ..data.schema import ENGLISH, LANGUAGES, captions_in_language, check_caption
from ..features.base import BatchedFeatureExtractor
from ..objectives.batch import CAPTIONS_PER_AUDIO, LANGUAGE_MASK
from ..processing_atr import AtrProcessor
from .collator import EPOCH, caption_columns, pair_batch
from .waveform_collator import WaveformCollator

COLLATOR_MODES = ("kcl", "cacl")


def caption_in_language(row: Mapping[str, Any], language: str, slot: int, audio_id: str) -> str | None:
    """Caption ``slot`` of ``row`` in ``language``, or None when the clip has no such translation.

    Raises if the row has no ``translations`` column at all, or if the caption is an empty string
    (a data error, never silently trained on).
    """
    if language != ENGLISH and "translations" not in row:
        raise ValueError(
            f"Clip {audio_id!r}: language {language!r} was requested but the row has no 'translations' column; "
            "load them with hf_atr.data.load_translations."
        )
    captions = captions_in_language(row, language)
    if captions is None or slot >= len(captions):
        return None
    return check_caption(captions[slot], slot, audio_id, language)


def _check_languages(languages: Sequence[str], owner: str) -> list[str]:
    languages = list(languages)
    if not languages or not all(isinstance(language, str) and language for language in languages):
        raise ValueError(
            f"{owner}: `languages` must be a non-empty list of ISO 639-3 codes, got {languages!r}."
        )
    duplicated = sorted({language for language in languages if languages.count(language) > 1})
    if duplicated:
        raise ValueError(f"{owner}: `languages` lists {duplicated} more than once.")
    return languages


@dataclass
class MultilingualCollator:
    """Batches of clips with several captions each, for the ``kcl`` and ``cacl`` objectives (ATRI §4).

    ``mode="kcl"`` (Eq. 9–11): each clip with its caption slot in all ``K = len(languages)`` languages.
    ``mode="cacl"`` (Eq. 12–13): each clip with its English caption and the same slot in one other language:
    the row's ``caption_language`` when it is a non-English language (rows of a
    :class:`RandomLanguageDataset` with ``include_english=False``, deterministic), otherwise one drawn from
    torch's global generator among the other languages the clip has.

    The caption slot is the row's ``caption_index`` (rows of a :class:`~hf_atr.training.CaptionPairDataset`,
    what :class:`~hf_atr.AtrTrainer` trains on; train on English pairs only, the default, so that an epoch
    sees each slot once) or, for bare clip rows, one drawn from torch's global generator.

    A caption a clip does not have is marked False in ``language_mask`` and its place in ``input_ids`` holds
    a present caption of the same clip (English when it has one), which the objectives ignore: the
    captions of all clips stay one ``(batch * K, seq)`` tensor that the model embeds in one call.

    Returns ``input_values``/``input_features`` ``(batch, ...)``; ``input_ids`` and ``attention_mask``
    ``(batch * K, seq)``, row ``i * K + k`` = clip ``i``, language ``k``; and for the objective
    ``audio_ids`` (list of ``batch`` str), ``caption_indices`` ``(batch,)``, ``languages`` (``batch`` lists of
    ``K`` codes), ``captions_per_audio`` (``K``) and ``language_mask`` ``(batch, K)`` bool. The trainer turns
    the text embeddings into ``(batch, K, dim)`` with :func:`~hf_atr.objectives.batch.group_caption_embeds`.

    Args:
        processor: the :class:`~hf_atr.AtrProcessor` (feature extractor + tokenizer).
        languages: ISO 639-3 codes; default :data:`~hf_atr.data.schema.LANGUAGES`. ``cacl`` needs
            ``"eng"`` and at least one other.
        mode: ``"kcl"`` or ``"cacl"``.
        max_length: token limit for captions (the tokenizer's by default).
        text_length_buckets: caption lengths to pad to (:func:`~hf_atr.training.collator.text_length_buckets`;
            ``None``: the batch's longest), set by :class:`~hf_atr.AtrTrainer` when it compiles the model.
        waveforms: a :class:`~hf_atr.training.waveform_collator.WaveformCollator` that builds the audio part from
            raw ``audio`` (decoded, resampled and cropped in the DataLoader workers; features computed on the
            training device by :class:`~hf_atr.AtrTrainer`); ``None`` stacks precomputed features.
    """

    processor: AtrProcessor
    languages: Sequence[str] = field(default_factory=lambda: list(LANGUAGES))
    mode: str = "kcl"
    max_length: int | None = None
    waveforms: WaveformCollator | None = None
    text_length_buckets: tuple[int, ...] | None = None

    @property
    def features(self) -> BatchedFeatureExtractor | None:
        """The batched features that turn this collator's waveforms into model inputs on the device, if any."""
        return None if self.waveforms is None else self.waveforms.features

    def __post_init__(self) -> None:
        if self.mode not in COLLATOR_MODES:
            raise ValueError(
                f"MultilingualCollator: mode must be one of {COLLATOR_MODES}, got {self.mode!r}."
            )
        self.languages = _check_languages(self.languages, "MultilingualCollator")
        self.other_languages = [language for language in self.languages if language != ENGLISH]
        if self.mode == "cacl" and (ENGLISH not in self.languages or not self.other_languages):
            raise ValueError(
                f"MultilingualCollator(mode='cacl') needs 'eng' and at least one other language, got {self.languages}."
            )

    @property
    def captions_per_audio(self) -> int:
        """``K``: captions per clip in every batch."""
        return len(self.languages) if self.mode == "kcl" else 2

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            raise ValueError("MultilingualCollator got an empty batch.")
        audio_ids = [str(row.get("audio_id", index)) for index, row in enumerate(rows)]
        captions, caption_indices, row_languages, language_mask = [], [], [], []
        for audio_id, row in zip(audio_ids, rows):
            slot = self._slot(row, audio_id)
            languages = (
                self.languages if self.mode == "kcl" else [ENGLISH, self._other_language(row, slot, audio_id)]
            )
            clip_captions = [caption_in_language(row, language, slot, audio_id) for language in languages]
            present = [caption is not None for caption in clip_captions]
            if not any(present):
                raise ValueError(
                    f"Clip {audio_id!r} has no caption {slot} in any of the languages {languages}."
                )
            placeholder = clip_captions[languages.index(ENGLISH)] if ENGLISH in languages else None
            placeholder = placeholder or next(caption for caption in clip_captions if caption is not None)
            captions.extend(caption if caption is not None else placeholder for caption in clip_captions)
            caption_indices.append(slot)
            row_languages.append(list(languages))
            language_mask.append(present)
        audio_inputs = (
            audio_batch(self.processor, rows, audio_ids)
            if self.waveforms is None
            else self.waveforms.audio_inputs(rows, audio_ids)
        )
        batch = pair_batch(
            self.processor,
            audio_inputs,
            audio_ids,
            captions,
            caption_indices,
            row_languages,
            self.max_length,
            self.text_length_buckets,
        )
        batch[CAPTIONS_PER_AUDIO] = self.captions_per_audio
        batch[LANGUAGE_MASK] = torch.tensor(language_mask, dtype=torch.bool)
        return batch

    def _slot(self, row: Mapping[str, Any], audio_id: str) -> int:
        if "caption_index" in row:
            return int(row["caption_index"])
        english = row.get("captions")
        if english is None or len(english) == 0:
            raise ValueError(f"Clip {audio_id!r} has no captions in column 'captions'.")
        return int(torch.randint(len(english), ()).item())

    def _other_language(self, row: Mapping[str, Any], slot: int, audio_id: str) -> str:
        """CACL's second language: the row's own when it names one, else a random one the clip has."""
        language = row.get("caption_language", ENGLISH)
        if language != ENGLISH:
            if language not in self.other_languages:
                raise ValueError(
                    f"Clip {audio_id!r} asks for caption_language {language!r}, not among the collator's "
                    f"languages {self.languages}."
                )
            return language
        available = [
            other for other in self.other_languages if caption_in_language(row, other, slot, audio_id)
        ]
        # A clip with no translation still gets a slot: it is masked out of the loss.
        candidates = available or self.other_languages
        return candidates[int(torch.randint(len(candidates), ()).item())]


class RandomLanguageDataset(torch.utils.data.Dataset):
    """A view of a clip dataset with one item per (clip, caption slot), in one random language per epoch.

    The ML-CLAP baseline (ATRI Eq. 4–5): every epoch, each (clip, slot) is seen once, in a language drawn
    uniformly from those the clip has for that slot. The draw is seeded by ``(seed, epoch, clip, slot)``,
    so it does not depend on batch order, worker count or resumption; the trainer calls
    :meth:`set_epoch` before each epoch. Items are the clip's row plus ``caption_language`` and
    ``caption_index``, the format :class:`~hf_atr.training.AtrDataCollator` reads (``random_language``)
    and :class:`MultilingualCollator` in ``cacl`` mode reads (``include_english=False``).

    Args:
        clips: a shared-schema ``datasets.Dataset`` (precomputed audio features).
        languages: ISO 639-3 codes to draw from; default :data:`~hf_atr.data.schema.LANGUAGES`.
        seed: base seed of the draws.
        include_english: draw English too (``random_language``); ``False`` draws among the other
            languages only (CACL's second caption). A slot with no caption in any drawable language
            falls back to English.
    """

    def __init__(
        self,
        clips: Any,
        languages: Sequence[str] | None = None,
        *,
        seed: int = 0,
        include_english: bool = True,
    ) -> None:
        self.clips = clips
        self.languages = _check_languages(
            languages if languages is not None else LANGUAGES, "RandomLanguageDataset"
        )
        self.seed = int(seed)
        self.epoch = 0
        drawable = [language for language in self.languages if include_english or language != ENGLISH]
        if not drawable:
            raise ValueError(
                f"RandomLanguageDataset: no language to draw from in {self.languages} without English."
            )
        english, translations = caption_columns(clips, drawable)
        items, choices = [], []
        for clip_index, (captions, clip_translations) in enumerate(zip(english, translations)):
            row = {"captions": captions, "translations": clip_translations}
            for slot in range(len(captions)):
                present = [
                    language_index
                    for language_index, language in enumerate(self.languages)
                    if language in drawable and len(captions_in_language(row, language) or []) > slot
                ]
                items.append((clip_index, slot))
                choices.append(present)
        self.items = np.array(items, dtype=np.int64).reshape(-1, 2)
        self.choices = choices
        self.rows = ClipRows(clips)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose language draws :meth:`__getitem__` returns."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.items)

    def language_of(self, index: int) -> str:
        """The language item ``index`` has in the current epoch."""
        clip_index, slot = (int(value) for value in self.items[index])
        present = self.choices[index]
        if not present:
            return ENGLISH
        generator = np.random.default_rng([self.seed, self.epoch, clip_index, slot])
        return self.languages[present[int(generator.integers(len(present)))]]

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._items([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The items ``indices``, their clips' rows read in one gather (what torch's DataLoader calls per batch)."""
        return self._items(indices)

    def _items(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        items = self.items[np.asarray(indices, dtype=np.int64)]
        rows = self.rows.gather(items[:, 0])
        for row, index, slot in zip(rows, indices, items[:, 1].tolist()):
            row["caption_language"] = self.language_of(int(index))
            row["caption_index"] = slot
            row[EPOCH] = self.epoch
        return rows
