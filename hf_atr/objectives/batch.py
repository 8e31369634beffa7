"""Batch bookkeeping shared by objectives: which rows of a batch are the same clip."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


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


def batch_audio_ids(batch: Mapping[str, Any] | None) -> Sequence[str] | None:
    """The ``audio_ids`` of a batch dict, or None when the batch carries none."""
    if batch is None:
        return None
    return batch.get("audio_ids")


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
