"""Batch assembly for training: precomputed audio features + one tokenised caption per clip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..processing_atr import AUDIO_INPUT_NAMES, AtrProcessor

METADATA_KEYS = ("audio_ids", "caption_indices")
"""Batch entries for the objective, never passed to the model's forward."""


@dataclass
class AtrDataCollator:
    """Turn rows of the shared schema into a model + objective batch.

    Each row needs the audio features that :meth:`AtrProcessor.extract_audio_features` added (e.g.
    ``input_values``; rows that still hold raw ``audio`` are featurised on the fly, which is slow),
    ``captions`` and ``audio_id``. The caption used is ``captions[caption_index]`` when the row has a
    ``caption_index`` (rows of a :class:`CaptionPairDataset`, what :class:`AtrTrainer` trains on);
    otherwise the first one (``caption_selection="first"``) or one drawn from torch's global generator
    (``"random"``; not exactly reproducible on resume, because the Trainer's dataloader collates one
    batch ahead of the RNG state it checkpoints).

    Returns ``input_values``/``input_features`` ``(batch, ...)``, ``input_ids`` and ``attention_mask``
    ``(batch, seq)``, and metadata for the objective: ``audio_ids`` (list of ``batch`` str; equal ids are
    the same clip and are never negatives of each other) and ``caption_indices`` ``(batch,)``.
    """

    processor: AtrProcessor
    caption_selection: str = "random"
    max_length: int | None = None
    caption_column: str = "captions"

    def __post_init__(self) -> None:
        if self.caption_selection not in ("random", "first"):
            raise ValueError(f"caption_selection must be 'random' or 'first', got {self.caption_selection!r}.")

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            raise ValueError("AtrDataCollator got an empty batch.")
        audio_ids = [str(row.get("audio_id", index)) for index, row in enumerate(rows)]
        captions, caption_indices = [], []
        for audio_id, row in zip(audio_ids, rows):
            clip_captions = row.get(self.caption_column)
            if not clip_captions:
                raise ValueError(f"Clip {audio_id!r} has no captions in column {self.caption_column!r}.")
            if "caption_index" in row:
                index = int(row["caption_index"])
            elif self.caption_selection == "first":
                index = 0
            else:
                index = int(torch.randint(len(clip_captions), ()).item())
            caption = clip_captions[index]
            if not isinstance(caption, str) or not caption.strip():
                raise ValueError(f"Clip {audio_id!r}: caption {index} is empty ({caption!r}).")
            captions.append(caption)
            caption_indices.append(index)
        batch = audio_batch(self.processor, rows, audio_ids)
        batch.update(self.processor(text=captions, max_length=self.max_length, return_tensors="pt"))
        batch["audio_ids"] = audio_ids
        batch["caption_indices"] = torch.tensor(caption_indices)
        return batch


class CaptionPairDataset(torch.utils.data.Dataset):
    """A view of a clip dataset with one item per (clip, caption): every caption is seen once per epoch.

    Items are the clip's row plus ``caption_index``; features are not copied. Deterministic, so a
    resumed run draws exactly the batches an uninterrupted run would. Several captions of one clip
    can land in one batch, which the objectives handle through ``audio_ids``.
    """

    def __init__(self, clips: Any, caption_column: str = "captions") -> None:
        caption_counts = np.array([len(captions or []) for captions in clips[caption_column]])
        empty = np.flatnonzero(caption_counts == 0)
        if empty.size:
            ids = clips["audio_id"] if "audio_id" in clips.column_names else list(range(len(clips)))
            raise ValueError(
                f"{empty.size} clip(s) have no captions in column {caption_column!r}, e.g. "
                f"{[ids[int(index)] for index in empty[:5]]}."
            )
        self.clips = clips
        self.pair_clip = np.repeat(np.arange(len(caption_counts)), caption_counts)
        self.pair_slot = np.concatenate([np.arange(count) for count in caption_counts]) if len(clips) else self.pair_clip

    def __len__(self) -> int:
        return len(self.pair_clip)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = dict(self.clips[int(self.pair_clip[index])])
        row["caption_index"] = int(self.pair_slot[index])
        return row


def audio_batch(processor: AtrProcessor, rows: Sequence[dict[str, Any]], audio_ids: Sequence[str]) -> dict[str, Any]:
    """Audio model inputs for ``rows``: their precomputed features stacked, or raw ``audio`` featurised now."""
    feature_name = next((name for name in AUDIO_INPUT_NAMES if name in rows[0]), None)
    if feature_name is None:
        if "audio" not in rows[0]:
            raise ValueError(
                f"Rows have neither precomputed audio features {AUDIO_INPUT_NAMES} nor an 'audio' column "
                f"(columns: {sorted(rows[0])})."
            )
        arrays = processor.decode([row["audio"] for row in rows], audio_ids)
        return dict(processor(audio=arrays, return_tensors="pt"))
    inputs = {feature_name: stack_feature([row[feature_name] for row in rows], feature_name, audio_ids)}
    for name in ("audio_attention_mask", "is_longer"):
        if name in rows[0]:
            inputs[name] = stack_feature([row[name] for row in rows], name, audio_ids)
    return inputs


def stack_feature(values: Sequence[Any], name: str, audio_ids: Sequence[str]) -> torch.Tensor:
    """Stack per-clip features (lists, arrays or tensors) into one tensor, naming the clip that does not fit."""
    arrays = [np.asarray(value) for value in values]
    clips_by_shape: dict[tuple[int, ...], list[str]] = {}
    for audio_id, array in zip(audio_ids, arrays):
        clips_by_shape.setdefault(array.shape, []).append(audio_id)
    if len(clips_by_shape) > 1:
        shapes = "; ".join(f"{shape} for {ids[:5]}" for shape, ids in clips_by_shape.items())
        raise ValueError(
            f"Feature {name!r} has different shapes across clips: {shapes}. Extract features with "
            "padding/truncation to a fixed length."
        )
    stacked = np.stack(arrays)
    # datasets hands back float64 for float32 features stored as nested lists; models expect float32.
    return torch.from_numpy(stacked.astype(np.float32) if np.issubdtype(stacked.dtype, np.floating) else stacked)
