"""Where a training batch's audio features are computed, decided by one object: the training collator.

A collator that prepares waveforms (:class:`~hf_atr.training.waveform_collator.WaveformCollator`, or a
:class:`~hf_atr.training.multilingual.MultilingualCollator` with ``waveforms``) carries the batched feature
extractor in its ``features``: the log-mel features are then computed on the training device inside the step
(:class:`DeviceAudioInputs`). Any other collator hands the model its audio inputs itself (precomputed features
stacked, or transformers' extractor run in the DataLoader workers). ``AtrTrainer(audio_features=...)`` and
``hf-atr train --audio_features`` only choose the default collator (:func:`training_collator`); nothing else reads
the string.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.utils import logging

from .collator import AtrDataCollator
from .device_features import CROPPED, WAVEFORMS, featurize_waveforms, global_generator
from .waveform_collator import WaveformCollator

logger = logging.get_logger(__name__)

AUDIO_FEATURE_SOURCES = ("device", "collator")
"""Where the model's audio inputs are computed: on the training device from the waveforms the collator's workers
prepare (``"device"``: a :class:`~hf_atr.training.waveform_collator.WaveformCollator`), or by the collator itself
(``"collator"``: precomputed features stacked, or transformers' extractor run in the workers)."""


def training_collator(
    data_collator: Any, processor: Any, *, audio_features: str | None = None, seed: int
) -> Any:
    """The training collator, which decides where the audio features are computed (module docstring).

    Args:
        data_collator: the collator given, or ``None`` for the default one.
        audio_features: one of :data:`AUDIO_FEATURE_SOURCES`, or ``None``. Without a collator, ``"device"`` builds a
            ``WaveformCollator(processor, seed=seed)`` and ``"collator"`` or ``None`` an
            :class:`~hf_atr.training.collator.AtrDataCollator`; with one, it must say what the collator does.
        seed: the seed of a default ``WaveformCollator``'s crops (``TrainingArguments.seed``).

    Raises:
        ValueError: an unknown ``audio_features``, or one the given collator contradicts.
    """
    if audio_features is not None and audio_features not in AUDIO_FEATURE_SOURCES:
        raise ValueError(
            f"audio_features must be one of {AUDIO_FEATURE_SOURCES} or None, got {audio_features!r}."
        )
    if data_collator is None:
        if audio_features == "device":
            return WaveformCollator(processor, seed=seed)
        return AtrDataCollator(processor)
    prepares_waveforms = getattr(data_collator, "features", None) is not None
    if audio_features == "device" and not prepares_waveforms:
        raise ValueError(
            f"audio_features='device' needs a collator that prepares waveforms (WaveformCollator, or "
            f"MultilingualCollator(waveforms=WaveformCollator(...))), got {type(data_collator).__name__}."
        )
    if audio_features == "collator" and prepares_waveforms:
        raise ValueError(
            f"audio_features='collator' with a {type(data_collator).__name__} that prepares waveforms, whose "
            "features are computed on the training device: leave audio_features out (the collator decides)."
        )
    return data_collator


class DeviceAudioInputs:
    """A batch's model inputs, with the waveforms of a waveform-preparing collator featurised on the training device.

    Args:
        data_collator: the training collator (:func:`training_collator`); its ``features`` (``None`` for a collator
            that prepares the audio inputs itself) compute the features.
    """

    def __init__(self, data_collator: Any) -> None:
        self.features = getattr(data_collator, "features", None)
        self.waveform_collator = (
            data_collator
            if isinstance(data_collator, WaveformCollator)
            else getattr(data_collator, "waveforms", None)
        )
        self._crops_logged = False

    def __call__(self, inputs: dict[str, Any], device: torch.device, training: bool) -> dict[str, Any]:
        """``inputs`` with their waveforms (``(batch, samples)``) replaced by the model's audio inputs on
        ``device``; as they are for a collator that prepares those itself. The extractor's noise (Whisper's
        dither) comes from the device's global generator while ``training`` (seeded and restored by the Trainer),
        none otherwise. The first batch with clips cut to the window is logged once."""
        if self.features is None:
            return inputs
        cropped = inputs.get(CROPPED)  # a NumPy array on the host (device_features.CROPPED)
        if (
            not self._crops_logged
            and cropped is not None
            and np.any(cropped)
            and self.waveform_collator is not None
        ):
            logger.warning(
                f"{np.count_nonzero(cropped)} of {np.size(cropped)} clips in a training batch were longer than the "
                f"feature extractor's window and were {self.waveform_collator.crop_description()}. Logged once."
            )
            self._crops_logged = True
        if WAVEFORMS not in inputs:
            return inputs
        generator = global_generator(device) if training else None
        return featurize_waveforms(inputs, self.features, device=device, generator=generator)


__all__ = ["AUDIO_FEATURE_SOURCES", "DeviceAudioInputs", "training_collator"]
