"""The layout of a training batch as objectives read it, and the bookkeeping objectives share.

A collated training batch holds the model's inputs and, beside them, the objective's metadata
(:data:`METADATA_KEYS`), which never reach the model's forward. The collators of :mod:`hf_atr.training` write
these entries and the objectives read them; both take the names from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

AUDIO_IDS = "audio_ids"
"""``batch`` strings: the clip of each row. Rows with equal ids are the same clip, never each other's negatives."""
CAPTION_INDICES = "caption_indices"
"""``(batch,)`` long: the caption slot of each row (``captions[k]``, and its translations)."""
CAPTION_LANGUAGES = "languages"
"""The ISO 639-3 language of each row's caption (``batch`` codes), or of each of its ``K`` captions (``batch``
lists of ``K`` codes) in multilingual batches."""
CAPTIONS_PER_AUDIO = "captions_per_audio"
"""``K``, multilingual batches only: caption rows per clip, ``input_ids`` row ``i * K + k`` = clip ``i``,
caption ``k`` (the trainer groups the text embeddings with :func:`group_caption_embeds`)."""
LANGUAGE_MASK = "language_mask"
"""``(batch, K)`` bool, multilingual batches only: the captions a clip has; absent ones take no part in the loss."""
NEGATIVE_AUDIO = "negative_audio"
"""``(n_audio,)`` bool, batches with unpaired audio only (moment training's in-recording negatives): True for the
audio rows that have no caption and are scored as negatives only; the caption rows pair with the other audio rows
in order. ``audio_ids`` names every audio row. Objectives that score them declare ``accepts_negative_audio``."""
METADATA_KEYS = (AUDIO_IDS, CAPTION_INDICES, CAPTION_LANGUAGES, CAPTIONS_PER_AUDIO, LANGUAGE_MASK)
"""Batch entries for the objective that the clip collators write, never passed to the model's forward."""
UNPAIRED_AUDIO_KEYS = (NEGATIVE_AUDIO,)
"""Batch entries for the objective of batches with unpaired audio rows (moment training), popped with the others."""


def pop_batch_metadata(batch: dict[str, Any]) -> dict[str, Any]:
    """Remove the objective's entries (:data:`METADATA_KEYS`, :data:`UNPAIRED_AUDIO_KEYS`) from a collated ``batch``
    and return them.

    What stays in ``batch`` are the model's inputs.
    """
    return {key: batch.pop(key) for key in (*METADATA_KEYS, *UNPAIRED_AUDIO_KEYS) if key in batch}


def group_caption_embeds(
    text_embeds: torch.Tensor, batch_size: int, metadata: Mapping[str, Any]
) -> torch.Tensor:
    """``(batch * K, dim)`` caption embeddings of a multilingual batch → ``(batch, K, dim)``.

    ``K`` is ``metadata["captions_per_audio"]``; batches without it (one caption per clip) are returned
    unchanged.
    """
    captions_per_audio = metadata.get(CAPTIONS_PER_AUDIO)
    if captions_per_audio is None:
        return text_embeds
    captions_per_audio = int(captions_per_audio)
    if text_embeds.dim() != 2 or text_embeds.shape[0] != batch_size * captions_per_audio:
        raise ValueError(
            f"The batch says captions_per_audio={captions_per_audio} for {batch_size} clips, but the model returned "
            f"text_embeds of shape {tuple(text_embeds.shape)} (expected ({batch_size * captions_per_audio}, dim))."
        )
    return text_embeds.view(batch_size, captions_per_audio, -1)


def same_clip_mask(
    audio_ids: Sequence[str] | None, batch_size: int, device: torch.device | None = None
) -> torch.Tensor:
    """``(batch, batch)`` boolean matrix, True where rows i and j hold the same clip (diagonal included).

    Without ``audio_ids`` every row is its own clip (the identity). Duplicate clips in a batch
    (a clip drawn with two of its captions) must never be each other's negatives.
    """
    if audio_ids is None:
        return torch.eye(batch_size, dtype=torch.bool, device=device)
    if len(audio_ids) != batch_size:
        raise ValueError(
            f"batch['audio_ids'] has {len(audio_ids)} entries but the batch has {batch_size} rows."
        )
    codes = {audio_id: code for code, audio_id in enumerate(dict.fromkeys(audio_ids))}
    clip_codes = torch.tensor([codes[audio_id] for audio_id in audio_ids], device=device)
    return clip_codes[:, None] == clip_codes[None, :]


def clip_id_matches(
    row_ids: Sequence[str], column_ids: Sequence[str], device: torch.device | None = None
) -> torch.Tensor:
    """``(len(row_ids), len(column_ids))`` boolean matrix, True where row ``i`` and column ``j`` name the same clip."""
    codes = {audio_id: code for code, audio_id in enumerate(dict.fromkeys([*row_ids, *column_ids]))}
    rows = torch.tensor([codes[audio_id] for audio_id in row_ids], dtype=torch.long, device=device)
    columns = torch.tensor([codes[audio_id] for audio_id in column_ids], dtype=torch.long, device=device)
    return rows[:, None] == columns[None, :]


class AudioRows(NamedTuple):
    """The audio rows of a batch split into those paired with a caption and the unpaired negatives."""

    paired: torch.Tensor
    """``(batch, dim)``: row ``i`` pairs with caption row ``i``."""
    negatives: torch.Tensor
    """``(n_negative, dim)``: scored as negatives of every caption only (``(0, dim)`` without any)."""
    paired_ids: Sequence[str] | None
    negative_ids: Sequence[str]


def split_negative_audio(audio_embeds: torch.Tensor, batch: Mapping[str, Any] | None) -> AudioRows:
    """Split ``audio_embeds: (n_audio, dim)`` by ``batch["negative_audio"]`` (:data:`NEGATIVE_AUDIO`).

    A batch without that entry has paired rows only. ``audio_ids`` (when given) name all ``n_audio`` rows.

    Raises:
        ValueError: a mask or ``audio_ids`` whose length is not ``n_audio``.
    """
    audio_ids = batch_audio_ids(batch)
    negative = None if batch is None else batch.get(NEGATIVE_AUDIO)
    if negative is None:
        return AudioRows(audio_embeds, audio_embeds[:0], audio_ids, [])
    negative = torch.as_tensor(negative, dtype=torch.bool, device=audio_embeds.device)
    if negative.shape != (audio_embeds.shape[0],):
        raise ValueError(
            f"batch['negative_audio'] has shape {tuple(negative.shape)} but there are {audio_embeds.shape[0]} "
            "audio rows; it needs one flag per audio row."
        )
    if audio_ids is not None and len(audio_ids) != audio_embeds.shape[0]:
        raise ValueError(
            f"batch['audio_ids'] has {len(audio_ids)} entries but there are {audio_embeds.shape[0]} audio rows "
            "(paired and negative)."
        )
    flags = negative.tolist()
    paired_ids = None if audio_ids is None else [i for i, flag in zip(audio_ids, flags) if not flag]
    negative_ids = (
        [f"negative {row}" for row, flag in enumerate(flags) if flag]
        if audio_ids is None
        else [i for i, flag in zip(audio_ids, flags) if flag]
    )
    return AudioRows(audio_embeds[~negative], audio_embeds[negative], paired_ids, negative_ids)


def other_copies_mask(
    audio_ids: Sequence[str] | None, batch_size: int, device: torch.device | None = None
) -> torch.Tensor:
    """``(batch, batch)`` boolean matrix, True where rows ``i != j`` hold the same clip: the in-batch candidates
    that are removed from a row's negatives (its own pair, the diagonal, stays)."""
    return same_clip_mask(audio_ids, batch_size, device) & ~torch.eye(
        batch_size, dtype=torch.bool, device=device
    )


def batch_audio_ids(batch: Mapping[str, Any] | None) -> Sequence[str] | None:
    """The ``audio_ids`` of a batch dict, or None when the batch carries none."""
    if batch is None:
        return None
    return batch.get(AUDIO_IDS)


def check_pair_embeddings(audio_embeds: torch.Tensor, text_embeds: torch.Tensor, objective_name: str) -> None:
    """Raise a clear error unless both are ``(batch, dim)`` with the same batch size."""
    if audio_embeds.dim() != 2 or text_embeds.dim() != 2:
        raise ValueError(
            f"Objective {objective_name!r} expects audio_embeds and text_embeds of shape (batch, dim), got "
            f"{tuple(audio_embeds.shape)} and {tuple(text_embeds.shape)}. For (batch, K, dim) multilingual "
            "batches use a multilingual objective such as 'kcl'."
        )
    if audio_embeds.shape[0] != text_embeds.shape[0]:
        raise ValueError(
            f"Objective {objective_name!r}: audio_embeds has {audio_embeds.shape[0]} rows but text_embeds has "
            f"{text_embeds.shape[0]}; each audio row must be paired with the caption in the same row."
        )
