"""A transformers feature extractor at inference: the same features for the same clip on every call.

Two extractors make random choices. ``ClapFeatureExtractor`` follows LAION-CLAP's training: ``rand_trunc`` crops a
clip longer than its window at a random offset; ``fusion`` takes the three local views of a long clip at random
offsets and, in a batch without a long clip, marks a random clip ``is_longer``. A ``WhisperFeatureExtractor`` with
``dither`` adds random noise. Those are training augmentation; at inference hf-atr makes none of them, so that an
embedding is a function of its clip (caching, deduplication, regression tests and indexes rely on it). The rule:

- ``rand_trunc``: a longer clip keeps its head, its first ``max_length_s`` seconds (what AST, Whisper and PANNs
  read of a long clip);
- ``fusion``: the whole clip shrunk (as the extractor), and the front, middle and back views at the head, the
  centre and the tail (:meth:`~hf_atr.features.ClapLogMelFeatures.fixed_choices`);
- ``is_longer``: true exactly for the clips longer than the window, whatever else is in the batch;
- Whisper: no dither.

Clips within the window are the extractor's own output, bit for bit. A longer ``rand_trunc`` clip is cut to its
head before the extractor, which then computes the same crop as if it had drawn offset 0. A long fused clip is
featurised by the extractor's batched torch twin (:class:`~hf_atr.features.ClapLogMelFeatures`) with the fixed
views, in float64: the extractor's output had it drawn those views, within 1e-4 dB. Windowed encoding
(:mod:`hf_atr.windowing`) reads all of a long clip instead. Training keeps the random crops, drawn from seeded
generators (:class:`~hf_atr.training.WaveformCollator`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import BatchFeature, ClapFeatureExtractor, WhisperFeatureExtractor

from .features.clap_log_mel import ClapLogMelFeatures

CLAP_CALL_SETTINGS = ("truncation", "padding", "max_length")
"""``ClapFeatureExtractor.__call__`` options that override its settings for one call."""


def inference_features(
    feature_extractor: Any, arrays: Sequence[np.ndarray], *, return_tensors: str | None = None, **kwargs: Any
) -> BatchFeature:
    """``feature_extractor``'s outputs for ``arrays`` (1-D, at its rate) without a random choice (see the module).

    Args:
        feature_extractor: any transformers audio feature extractor; only CLAP's and a dithering Whisper's differ
            from a plain call.
        return_tensors: as the extractor takes it (``"pt"``, ``"np"``, ``None``).
        kwargs: the extractor's call options (``sampling_rate``; CLAP's ``truncation``, ``padding``,
            ``max_length`` override its settings as in the extractor).
    """
    if isinstance(feature_extractor, WhisperFeatureExtractor) and feature_extractor.dither != 0.0:
        feature_extractor = copy.copy(feature_extractor)
        feature_extractor.dither = 0.0
    if not isinstance(feature_extractor, ClapFeatureExtractor):
        return feature_extractor(arrays, return_tensors=return_tensors, **kwargs)
    overrides = {name: kwargs.pop(name) for name in CLAP_CALL_SETTINGS if kwargs.get(name) is not None}
    if overrides:
        feature_extractor = copy.copy(feature_extractor)
        feature_extractor.truncation = overrides.get("truncation", feature_extractor.truncation)
        feature_extractor.padding = overrides.get("padding", feature_extractor.padding)
        feature_extractor.nb_max_samples = overrides.get("max_length", feature_extractor.nb_max_samples)
    return BatchFeature(_clap_features(feature_extractor, arrays, kwargs), tensor_type=return_tensors)


def _clap_features(
    feature_extractor: ClapFeatureExtractor, arrays: Sequence[np.ndarray], kwargs: dict[str, Any]
) -> dict[str, np.ndarray]:
    """``input_features`` and ``is_longer`` as NumPy arrays, by the rule of the module."""
    twin = ClapLogMelFeatures.from_extractor(feature_extractor)
    lengths = torch.tensor([len(array) for array in arrays])
    if feature_extractor.truncation == "rand_trunc":
        head = [array[: twin.max_length] for array in arrays]
        outputs = dict(feature_extractor(head, return_tensors="np", **kwargs))
        return {**outputs, "is_longer": (lengths > twin.max_length).numpy()[:, None]}
    fused = twin.fused(lengths).tolist()
    within = [index for index, is_fused in enumerate(fused) if not is_fused]
    long = [index for index, is_fused in enumerate(fused) if is_fused]
    parts = []
    if within:
        part = feature_extractor([arrays[index] for index in within], return_tensors="np", **kwargs)
        parts.append((within, part["input_features"]))
    if long:
        part = twin.featurize_arrays([arrays[index] for index in long], dtype=torch.float64)
        parts.append((long, part["input_features"].numpy()))
    input_features = np.empty(
        (len(arrays), *parts[0][1].shape[1:]), dtype=np.float32
    )  # the extractor's dtype
    for rows, features in parts:
        input_features[rows] = features
    return {"input_features": input_features, "is_longer": np.array(fused)[:, None]}


__all__ = ["inference_features"]
