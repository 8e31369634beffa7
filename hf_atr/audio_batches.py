"""Audio model inputs of a batch: an extractor's outputs renamed for the model, stored features stacked.

What the collators, the encoders and the processor share to turn rows into tensors: stored features (lists,
arrays, or a :class:`~hf_atr.data.feature_storage.GatheredRows` read in one gather) stacked as the model takes
them, raw audio featurised by the :class:`~hf_atr.processing_atr.AtrProcessor` it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .data.feature_storage import GatheredRows, stack_rows

AUDIO_INPUT_NAMES = ("input_values", "input_features")
"""Names feature extractors give their main output (AST/wav2vec2 vs Whisper/CLAP)."""
AUDIO_MASK_NAMES = ("attention_mask", "padding_mask")
"""Names feature extractors give the mask of their padding (PE-Audio's is ``padding_mask``)."""


def model_audio_inputs(features: Any) -> dict[str, Any]:
    """An extractor's outputs as model inputs: its ``attention_mask`` (or PE-Audio's ``padding_mask``) renamed
    ``audio_attention_mask`` (the text's ``attention_mask`` keeps the plain name), everything else as is."""
    return {
        "audio_attention_mask" if name in AUDIO_MASK_NAMES else name: value
        for name, value in features.items()
    }


def audio_batch(processor: Any, rows: Sequence[dict[str, Any]], audio_ids: Sequence[str]) -> dict[str, Any]:
    """Audio model inputs for ``rows``: their precomputed features stacked (where the extractor's frames vary with
    the clip, :meth:`AtrProcessor.varying_frame_inputs`, padded at the end with its ``padding_value``, the mask with
    0), or raw ``audio`` featurised now by ``processor`` (an :class:`~hf_atr.processing_atr.AtrProcessor`)."""
    feature_name = next((name for name in AUDIO_INPUT_NAMES if name in rows[0]), None)
    if feature_name is None:
        if "audio" not in rows[0]:
            raise ValueError(
                f"Rows have neither precomputed audio features {AUDIO_INPUT_NAMES} nor an 'audio' column "
                f"(columns: {sorted(rows[0])})."
            )
        arrays = processor.decode([row["audio"] for row in rows], audio_ids)
        return dict(processor(audio=arrays, return_tensors="pt", audio_names=audio_ids))
    padding = {name: 0 for name in processor.varying_frame_inputs()}  # the mask's padding
    if feature_name in padding:
        padding[feature_name] = float(getattr(processor.feature_extractor, "padding_value", 0.0))
    inputs = {}
    for name in (feature_name, "audio_attention_mask", "is_longer"):
        stacked = rows.stacked(name) if isinstance(rows, GatheredRows) else None
        if stacked is not None:  # read in one gather: already one array
            inputs[name] = model_tensor(stacked)
        elif name in rows[0]:
            inputs[name] = stack_feature([row[name] for row in rows], name, audio_ids, padding.get(name))
    return inputs


def stack_feature(
    values: Sequence[Any], name: str, audio_ids: Sequence[str], padding_value: float | None = None
) -> torch.Tensor:
    """Stack per-clip features (lists, arrays or tensors) into one tensor: floats as float32, integers as int64.

    With a ``padding_value`` (features whose frames vary with the clip), clips whose features differ in their first
    dimension only are padded at the end (:func:`~hf_atr.data.feature_storage.stack_rows`); a clip that does not
    fit is named.
    """
    stacked = stack_rows([np.asarray(value) for value in values], audio_ids, name, padding_value)
    return model_tensor(stacked)


def model_tensor(array: np.ndarray) -> torch.Tensor:
    """A stacked feature as the model takes it: floats as float32, integers as int64, bools as they are."""
    array = np.require(array, requirements="W")  # torch warns on read-only memory (an Arrow buffer)
    if np.issubdtype(array.dtype, np.floating):  # float64 from features stored as nested lists
        return torch.from_numpy(array.astype(np.float32, copy=False))
    if np.issubdtype(array.dtype, np.integer):
        return torch.from_numpy(array.astype(np.int64, copy=False))
    return torch.from_numpy(array)


__all__ = [
    "AUDIO_INPUT_NAMES",
    "AUDIO_MASK_NAMES",
    "audio_batch",
    "model_audio_inputs",
    "model_tensor",
    "stack_feature",
]
