from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from tiny_models import make_processor

from hf_atr.features.registry import batched_features_for
from hf_atr.features.spectrogram import pad_waveforms
from hf_atr.training.device_features import (
    CROPPED,
    RANDOM_CHOICES,
    WAVEFORM_LENGTHS,
    WAVEFORMS,
    featurize_waveforms,
    global_generator,
    waveforms_as_float,
)


def test_waveform_entries_become_the_model_inputs_and_the_rest_of_the_batch_stays():
    processor = make_processor("ast")
    features = batched_features_for(processor.feature_extractor)
    clips = synthetic_clips([4000, 16000], features.sampling_rate)
    waveforms, lengths = pad_waveforms(clips)
    batch = {
        WAVEFORMS: waveforms,
        WAVEFORM_LENGTHS: lengths,
        RANDOM_CHOICES: {},
        CROPPED: np.array([False, False]),
        "input_ids": torch.ones(2, 5, dtype=torch.long),
        "audio_ids": ["short", "long"],
    }
    inputs = featurize_waveforms(batch, features, device="cpu")
    assert set(inputs) == {"input_values", "input_ids", "audio_ids"}
    assert inputs["audio_ids"] == ["short", "long"] and inputs["input_ids"] is batch["input_ids"]
    assert WAVEFORMS in batch  # a new dict: the collator's batch is left as it was
    reference = processor(audio=clips)["input_values"]
    torch.testing.assert_close(inputs["input_values"], reference, atol=2e-4, rtol=0)


def test_a_batch_without_waveforms_is_named():
    features = batched_features_for(make_processor("ast").feature_extractor)
    with pytest.raises(ValueError, match="was not built by WaveformCollator"):
        featurize_waveforms({"input_values": torch.zeros(1)}, features)


def test_int16_pcm_is_scaled_exactly_and_other_integer_waveforms_are_refused():
    every_value = torch.arange(-32768, 32768, dtype=torch.int16).reshape(2, -1)
    expected = (every_value.double() / 2**15).float()  # n / 2**15 in float64, each exact in float32
    assert torch.equal(waveforms_as_float(every_value), expected)
    floats = torch.randn(2, 5, dtype=torch.float64)
    assert waveforms_as_float(floats) is floats
    with pytest.raises(TypeError, match="Waveforms must be floats, or int16 PCM .* got torch.int32"):
        waveforms_as_float(torch.zeros(2, 5, dtype=torch.int32))


def test_the_global_generator_is_the_one_set_seed_seeds():
    assert global_generator("cpu") is torch.default_generator
    assert global_generator(torch.device("meta")) is torch.default_generator  # other devices: the CPU's
    torch.manual_seed(4)
    first = torch.randn(3, generator=global_generator("cpu"))
    torch.manual_seed(4)
    torch.testing.assert_close(torch.randn(3), first, rtol=0, atol=0)
