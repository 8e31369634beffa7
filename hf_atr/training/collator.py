"""Batch assembly for training: precomputed audio features + one tokenised caption per clip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..audio_batches import audio_batch
from ..data.feature_storage import ClipRows
from ..data.schema import ENGLISH, captions_in_language, check_caption
from ..objectives.batch import AUDIO_IDS, CAPTION_INDICES, CAPTION_LANGUAGES
from ..processing_atr import AtrProcessor

SMALLEST_TEXT_BUCKET = 16
"""The shortest caption length of :func:`text_length_buckets`."""
UNSET_MODEL_MAX_LENGTH = 1_000_000
"""A tokenizer ``model_max_length`` at or above this is transformers' "no limit" placeholder (``int(1e30)``)."""
LARGEST_UNLIMITED_BUCKET = 512
"""The longest bucket when neither the collator nor the tokenizer sets a token limit."""

EPOCH = "epoch"
"""Item entry: the epoch an item was drawn in (:meth:`CaptionPairDataset.set_epoch`, the streaming epochs of
:class:`~hf_atr.training.streaming.StreamingPairs`), which seeds per-epoch random choices in DataLoader workers
(the waveform collator's crops) whatever copy of the dataset or collator a worker holds."""


@dataclass
class AtrDataCollator:
    """Turn rows of the shared schema into a model + objective batch.

    Each row needs the audio features that :meth:`AtrProcessor.extract_audio_features` added (e.g.
    ``input_values``; rows that still hold raw ``audio`` are featurised on the fly, which is slow),
    ``captions`` and ``audio_id``. The caption used is ``captions[caption_index]`` (or
    ``translations[caption_language][caption_index]``) when the row has a ``caption_index`` (rows of a
    :class:`CaptionPairDataset`, what :class:`AtrTrainer` trains on);
    otherwise the first one (``caption_selection="first"``) or one drawn from torch's global generator
    (``"random"``; not exactly reproducible on resume, because the Trainer's dataloader collates one
    batch ahead of the RNG state it checkpoints).

    ``text_length_buckets`` (``None``: captions padded to the batch's longest) pads the captions to the
    smallest of these lengths that holds the batch's longest (:func:`pad_to_length_bucket`): a compiled model then
    meets a few caption lengths instead of one per batch, each compiled once. :class:`~hf_atr.AtrTrainer` sets
    :func:`text_length_buckets` when ``TrainingArguments(torch_compile=True)``.

    Returns ``input_values``/``input_features`` ``(batch, ...)``, ``input_ids`` and ``attention_mask``
    ``(batch, seq)``, and metadata for the objective: ``audio_ids`` (list of ``batch`` str; equal ids are
    the same clip and are never negatives of each other), ``caption_indices`` ``(batch,)`` and
    ``languages`` (list of ``batch`` ISO 639-3 codes).
    """

    processor: AtrProcessor
    caption_selection: str = "random"
    max_length: int | None = None
    caption_column: str = "captions"
    text_length_buckets: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.caption_selection not in ("random", "first"):
            raise ValueError(
                f"caption_selection must be 'random' or 'first', got {self.caption_selection!r}."
            )

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            raise ValueError("AtrDataCollator got an empty batch.")
        audio_ids = [str(row.get("audio_id", index)) for index, row in enumerate(rows)]
        captions, caption_indices, languages = [], [], []
        for audio_id, row in zip(audio_ids, rows):
            language = row.get("caption_language", ENGLISH)
            clip_captions = captions_in_language(row, language, self.caption_column)
            if not clip_captions:
                source = self.caption_column if language == ENGLISH else f"translations[{language!r}]"
                raise ValueError(f"Clip {audio_id!r} has no captions in {source}.")
            if "caption_index" in row:
                index = int(row["caption_index"])
            elif self.caption_selection == "first":
                index = 0
            else:
                index = int(torch.randint(len(clip_captions), ()).item())
            captions.append(check_caption(clip_captions[index], index, audio_id, language))
            caption_indices.append(index)
            languages.append(language)
        return pair_batch(
            self.processor,
            self.audio_inputs(rows, audio_ids),
            audio_ids,
            captions,
            caption_indices,
            languages,
            self.max_length,
            self.text_length_buckets,
        )

    def audio_inputs(self, rows: Sequence[dict[str, Any]], audio_ids: Sequence[str]) -> dict[str, Any]:
        """The batch's audio part: precomputed features stacked (or raw audio featurised now)."""
        return audio_batch(self.processor, rows, audio_ids)


def pair_batch(
    processor: AtrProcessor,
    audio_inputs: dict[str, Any],
    audio_ids: list[str],
    captions: list[str],
    caption_indices: list[int],
    languages: list[Any],
    max_length: int | None,
    text_length_buckets: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The model inputs (``audio_inputs``, the batch's audio part, plus the tokenised ``captions``, padded to a
    length of ``text_length_buckets`` when given) and the objective's metadata (:mod:`hf_atr.objectives.batch`):
    ``audio_ids``, ``caption_indices`` ``(n_captions,)`` and ``languages``."""
    batch = dict(audio_inputs)
    # Tokenised into NumPy, then shared with torch: torch.tensor on the tokenizer's nested lists is several times
    # slower than NumPy's conversion (benchmarks/trainer_throughput.py); the values and dtypes are the same.
    text = processor(text=captions, max_length=max_length, return_tensors="np")
    if text_length_buckets:
        text = pad_to_length_bucket(text, text_length_buckets, processor.tokenizer)
    batch.update({name: torch.from_numpy(np.asarray(values)) for name, values in text.items()})
    batch[AUDIO_IDS] = audio_ids
    batch[CAPTION_INDICES] = torch.tensor(caption_indices)
    batch[CAPTION_LANGUAGES] = languages
    return batch


def text_length_buckets(max_length: int | None) -> tuple[int, ...]:
    """Caption lengths to pad to under compilation: 16, 32, 64, ... below ``max_length``, then ``max_length``
    (the collator's token limit, else the tokenizer's); up to 512 when there is none (``None`` or transformers'
    unset placeholder).

    >>> text_length_buckets(77)
    (16, 32, 64, 77)
    """
    if max_length is None or max_length >= UNSET_MODEL_MAX_LENGTH:
        max_length = LARGEST_UNLIMITED_BUCKET
    buckets, length = [], SMALLEST_TEXT_BUCKET
    while length < max_length:
        buckets.append(length)
        length *= 2
    return (*buckets, max_length)


def pad_to_length_bucket(encoded: Any, buckets: Sequence[int], tokenizer: Any) -> dict[str, np.ndarray]:
    """Tokenised captions ``{name: (captions, seq)}`` padded to the smallest length of ``buckets`` that is at least
    ``seq`` (unchanged when ``seq`` exceeds every bucket), on the tokenizer's ``padding_side``: ``input_ids`` with
    its ``pad_token_id``, every other entry (``attention_mask``, ``token_type_ids``) with 0."""
    encoded = {name: np.asarray(values) for name, values in encoded.items()}
    length = encoded["input_ids"].shape[1]
    target = min((bucket for bucket in buckets if bucket >= length), default=length)
    if target == length:
        return encoded
    side = (0, target - length) if tokenizer.padding_side == "right" else (target - length, 0)
    return {
        name: np.pad(
            values,
            ((0, 0), side),
            constant_values=tokenizer.pad_token_id if name == "input_ids" else 0,
        )
        for name, values in encoded.items()
    }


def caption_columns(clips: Any, languages: Sequence[str]) -> tuple[list, list]:
    """The ``captions`` and ``translations`` columns of a clip dataset, checked for ``languages``.

    Every clip needs English captions; languages other than English need a ``translations`` column
    (its entries are None when no translation is needed).
    """
    ids = clips["audio_id"] if "audio_id" in clips.column_names else list(range(len(clips)))
    english = clips["captions"]
    empty = [ids[index] for index, captions in enumerate(english) if not captions]
    if empty:
        raise ValueError(f"{len(empty)} clip(s) have no captions in column 'captions', e.g. {empty[:5]}.")
    foreign = [language for language in languages if language != ENGLISH]
    if foreign and "translations" not in clips.column_names:
        raise ValueError(f"Languages {foreign} were requested but the dataset has no 'translations' column.")
    translations = clips["translations"] if foreign else [None] * len(clips)
    return english, translations


class CaptionPairDataset(torch.utils.data.Dataset):
    """A view of a clip dataset with one item per (clip, language, caption): each is seen once per epoch.

    Items are the clip's row plus ``caption_language``, ``caption_index`` and ``epoch`` (set by :meth:`set_epoch`,
    which the Trainer's data loader calls every epoch); features are not copied. The DataLoader reads a batch of
    items in one gather (:meth:`__getitems__`, :class:`~hf_atr.data.feature_storage.ClipRows`): features stored as
    arrays come as NumPy arrays, without Python lists. Deterministic, so a resumed run
    draws exactly the batches an uninterrupted run would. Several captions of one clip can land in one batch,
    which the objectives handle through ``audio_ids``.

    Args:
        clips: a shared-schema ``datasets.Dataset``.
        languages: ISO 639-3 codes whose captions to enumerate (``"eng"`` = ``captions``, others from
            ``translations``); default English only. A clip without a translation in a language simply
            contributes no pair for it.
    """

    def __init__(self, clips: Any, languages: Sequence[str] | None = None) -> None:
        self.clips = clips
        self.languages = list(languages) if languages else [ENGLISH]
        english, translations = caption_columns(clips, self.languages)
        pairs = []
        for clip_index, (captions, clip_translations) in enumerate(zip(english, translations)):
            row = {"captions": captions, "translations": clip_translations}
            for language_index, language in enumerate(self.languages):
                slots = range(len(captions_in_language(row, language) or []))
                pairs.extend((clip_index, language_index, slot) for slot in slots)
        self.pairs = np.array(pairs, dtype=np.int64).reshape(-1, 3)
        self.epoch = 0
        self.rows = ClipRows(clips)

    def set_epoch(self, epoch: int) -> None:
        """Tag the items with ``epoch`` (read by collators that draw per-epoch random choices)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._items([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The items ``indices``, their clips' rows read in one gather (what torch's DataLoader calls per batch)."""
        return self._items(indices)

    def _items(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        pairs = self.pairs[np.asarray(indices, dtype=np.int64)]
        rows = self.rows.gather(pairs[:, 0])
        for row, (_, language_index, slot) in zip(rows, pairs.tolist()):
            row["caption_language"] = self.languages[language_index]
            row["caption_index"] = slot
            row[EPOCH] = self.epoch
        return rows
