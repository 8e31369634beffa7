"""The device side of on-device features: a waveform batch's entries and the model inputs made of them.

:class:`~hf_atr.training.waveform_collator.WaveformCollator` writes these entries in the DataLoader workers;
:func:`featurize_waveforms` turns them into the model's audio inputs on the training device with the
extractor's batched torch twin (:mod:`hf_atr.features`), inside :class:`~hf_atr.AtrTrainer`'s step or a loop of
one's own.
"""

from __future__ import annotations

from typing import Any

import torch

from ..audio_batches import model_audio_inputs
from ..data.pcm import PCM16_FULL_SCALE
from ..features.base import BatchedFeatureExtractor

WAVEFORMS = "waveforms"
"""Batch entry: ``(batch, samples)`` waveforms, zero-padded: float32, or ``int16`` PCM as the files store it."""
WAVEFORM_LENGTHS = "waveform_lengths"
"""Batch entry: ``(batch,)`` int64 NumPy array, the samples of each waveform before padding. NumPy, so that the
batch's move to the training device leaves it on the host, where the features read the batch's shapes from it
without waiting for the device."""
RANDOM_CHOICES = "feature_random_choices"
"""Batch entry: the extractor's random choices drawn in the worker (a dict of ``(batch, ...)`` tensors)."""
CROPPED = "waveform_cropped"
"""Batch entry: ``(batch,)`` bool NumPy array, True for the clips that were longer than the window and were cut to
it. NumPy, so that the batch's move to the training device leaves it on the host, where the trainer's crop notice
reads it without waiting for the device."""


def featurize_waveforms(
    batch: dict[str, Any],
    features: BatchedFeatureExtractor,
    *,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """Replace a :class:`~hf_atr.training.waveform_collator.WaveformCollator` batch's waveforms by the model's
    audio inputs.

    ``int16`` waveforms (16-bit PCM as stored, :func:`~hf_atr.data.pcm.decode_pcm16`) are moved as they are and
    scaled to float32 on ``device`` (:func:`waveforms_as_float`), so the result equals that of the float32 batch
    the collator would otherwise have sent, bit for bit.

    Args:
        batch: the collator's output (possibly already moved to the device by the Trainer).
        features: the collator's :attr:`~hf_atr.training.waveform_collator.WaveformCollator.features`.
        device: where to compute (default: where the waveforms are).
        generator: for noise the extractor adds (Whisper's ``dither``); ``None``: no noise, as at inference.
            Random choices missing from the batch are then fixed too (:data:`~hf_atr.features.base.RandomSource`).

    Returns:
        A new dict: the batch without ``waveforms``, ``waveform_lengths``, ``feature_random_choices`` and
        ``waveform_cropped``, with the extractor's outputs named as the model takes them (e.g. ``input_values``, ``is_longer``,
        ``audio_attention_mask``).
    """
    missing = [name for name in (WAVEFORMS, WAVEFORM_LENGTHS) if name not in batch]
    if missing:
        raise ValueError(
            f"The batch has no {missing}; it was not built by WaveformCollator (keys: {sorted(batch)})."
        )
    batch = dict(batch)
    waveforms = batch.pop(WAVEFORMS)
    lengths = batch.pop(WAVEFORM_LENGTHS)
    random_choices = batch.pop(RANDOM_CHOICES, {})
    batch.pop(CROPPED, None)
    if device is not None:
        waveforms = waveforms.to(device)
    outputs = features(
        waveforms_as_float(waveforms), lengths, random_source=generator, random_choices=random_choices
    )
    batch.update(model_audio_inputs(outputs))
    return batch


def global_generator(device: torch.device | str) -> torch.Generator:
    """torch's global generator for ``device`` (what ``transformers.set_seed`` seeds and a Trainer checkpoint saves):
    the CUDA device's own, else the CPU one (noise for another accelerator is then drawn on the CPU and moved)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.default_generators[
            device.index if device.index is not None else torch.cuda.current_device()
        ]
    return torch.default_generator


def waveforms_as_float(waveforms: torch.Tensor) -> torch.Tensor:
    """``waveforms: (batch, samples)`` as floats on their device: floating waveforms as they are, ``int16`` PCM
    divided by 32768 into float32 (exact: every ``int16`` is a float32 and ``2**-15`` a power of two, so this
    equals soundfile's own float32 decoding of the file).

    Raises:
        TypeError: another integer dtype (the collator sends float32 or int16).
    """
    if waveforms.is_floating_point():
        return waveforms
    if waveforms.dtype == torch.int16:
        return waveforms.to(torch.float32).div_(PCM16_FULL_SCALE)  # in place: one float32 buffer, not two
    raise TypeError(
        f"Waveforms must be floats, or int16 PCM as WaveformCollator reads 16-bit files; got {waveforms.dtype}."
    )
