"""The training collator decides where the audio features are computed: audio_features only picks the default
collator and must agree with a given one; DeviceAudioInputs featurises a waveform batch on the device."""

from __future__ import annotations

import pytest
import torch

from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.device_features import WAVEFORMS
from hf_atr.training.device_inputs import AUDIO_FEATURE_SOURCES, DeviceAudioInputs, training_collator
from hf_atr.training.waveform_collator import WaveformCollator
from tests.tiny_models import make_processor, raw_audio_dataset


def test_audio_features_picks_the_default_collator_and_must_agree_with_a_given_one():
    processor = make_processor()
    assert AUDIO_FEATURE_SOURCES == ("device", "collator")
    device = training_collator(None, processor, audio_features="device", seed=3)
    assert isinstance(device, WaveformCollator) and device.seed == 3
    assert isinstance(training_collator(None, processor, seed=0), AtrDataCollator)
    assert isinstance(training_collator(None, processor, audio_features="collator", seed=0), AtrDataCollator)
    waveforms = WaveformCollator(processor)
    assert training_collator(waveforms, processor, seed=0) is waveforms
    with pytest.raises(ValueError, match="audio_features='collator' with a WaveformCollator that prepares"):
        training_collator(waveforms, processor, audio_features="collator", seed=0)
    with pytest.raises(ValueError, match="audio_features='device' needs a collator that prepares waveforms"):
        training_collator(AtrDataCollator(processor), processor, audio_features="device", seed=0)
    with pytest.raises(ValueError, match="audio_features must be one of"):
        training_collator(None, processor, audio_features="gpu", seed=0)


def test_device_audio_inputs_featurise_waveform_batches_and_pass_other_batches_through():
    processor = make_processor()
    collator = WaveformCollator(processor)
    batch = collator([dict(row) for row in raw_audio_dataset([0.5, 0.7])])
    inputs = DeviceAudioInputs(collator)(batch, torch.device("cpu"), training=False)
    assert WAVEFORMS not in inputs and DeviceAudioInputs(collator).features is collator.features
    assert set(inputs) & set(processor.feature_extractor.model_input_names)
    plain = DeviceAudioInputs(AtrDataCollator(processor))
    assert plain.features is None and plain({"input_values": 1}, torch.device("cpu"), training=True) == {
        "input_values": 1
    }
