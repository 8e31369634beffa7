from __future__ import annotations

import numpy as np
import pytest
import torch
from panns_reference import torchlibrosa_front_end
from synthetic_audio import synthetic_clips
from tiny_models import tiny_panns_feature_extractor

from hf_atr.features import PannsLogMelFeatures, batched_features_for
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor


def _reference(extractor, clips):
    return extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]


def _lengths(extractor):
    samples, hop = extractor.max_length_samples, extractor.hop_length
    # Shorter, short enough that whole frames are padding, exactly max_length, longer (cut).
    return [samples // 3, 3 * hop, samples, samples + 7 * hop + 5]


@pytest.mark.parametrize("padding_value", [0.0, 0.02])
def test_equals_the_extractor_in_float64(padding_value):
    extractor = PannsFeatureExtractor(
        feature_size=32,
        sampling_rate=16000,
        fft_window_size=512,
        hop_length=160,
        frequency_max=8000.0,
        max_length_s=1.0,
        padding_value=padding_value,
    )
    clips = synthetic_clips(_lengths(extractor), extractor.sampling_rate)
    output = PannsLogMelFeatures.from_extractor(extractor).featurize_arrays(clips, dtype=torch.float64)
    features = output["input_features"]
    assert features.dtype == torch.float64 and features.shape == (4, 101, 32)
    np.testing.assert_allclose(features.numpy(), _reference(extractor, clips), atol=1e-4, rtol=0)


def test_default_settings_in_float32_within_a_thousandth_of_a_db():
    # CNN14's 32-kHz front end on 5-, 10- and 12-s clips, and a loud tone over a faint floor whose deep
    # bands need the float64 refinement.
    extractor = PannsFeatureExtractor()
    rate = extractor.sampling_rate
    time = np.arange(4 * rate) / rate
    tone = 0.5 * np.sin(2 * np.pi * 440 * time) + 1e-5 * np.random.default_rng(0).standard_normal(time.size)
    clips = [*synthetic_clips([5 * rate, 10 * rate, 12 * rate], rate), tone.astype(np.float32)]
    output = PannsLogMelFeatures.from_extractor(extractor).featurize_arrays(clips)["input_features"]
    assert output.dtype == torch.float32 and output.shape == (4, 1001, 64)
    np.testing.assert_allclose(output.numpy(), _reference(extractor, clips), atol=1e-3, rtol=0)


def test_equals_the_torchlibrosa_front_end_of_the_panns_code_in_float64():
    extractor = tiny_panns_feature_extractor()
    spectrogram, logmel = torchlibrosa_front_end(16000, 512, 160, 32, 50.0, 8000.0)
    clip = synthetic_clips([extractor.max_length_samples], extractor.sampling_rate)[0]
    with torch.no_grad():
        reference = logmel.double()(spectrogram.double()(torch.from_numpy(clip).double()[None]))[0, 0]
    ours = PannsLogMelFeatures.from_extractor(extractor).featurize_arrays([clip], dtype=torch.float64)
    np.testing.assert_allclose(ours["input_features"][0].numpy(), reference.numpy(), atol=1e-4, rtol=0)


def test_the_registry_finds_the_panns_twin():
    extractor = tiny_panns_feature_extractor()
    features = batched_features_for(extractor)
    assert type(features) is PannsLogMelFeatures
    assert features.window_samples == extractor.max_length_samples == 16000
    assert features.sampling_rate == 16000 and features.num_mel_bins == 32
    clips = synthetic_clips([20000], 16000)
    cut = features.featurize_arrays([clips[0][:16000]], dtype=torch.float64)["input_features"]
    torch.testing.assert_close(features.featurize_arrays(clips, dtype=torch.float64)["input_features"], cut)
