from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ASTFeatureExtractor

from hf_atr.features import AstFbankFeatures


def _reference(extractor, clips):
    return extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_values"]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"num_mel_bins": 64, "max_length": 150, "mean": -3.0, "std": 2.5},
        {"sampling_rate": 22050, "num_mel_bins": 40, "max_length": 80, "do_normalize": False},
    ],
    ids=["audioset-defaults", "custom-normalisation", "22k-unnormalised"],
)
def test_equals_the_numpy_extractor_in_float64(settings):
    extractor = ASTFeatureExtractor(**settings)
    features = AstFbankFeatures.from_extractor(extractor)
    window = features.window_samples
    # Shorter than max_length frames, exactly max_length frames, longer, and one single frame.
    lengths = [window // 3, window, window + 5000, 400]
    clips = synthetic_clips(lengths, extractor.sampling_rate)
    output = features.featurize_arrays(clips, dtype=torch.float64)["input_values"]
    assert output.dtype == torch.float64 and output.shape == (4, extractor.max_length, extractor.num_mel_bins)
    np.testing.assert_allclose(output.numpy(), _reference(extractor, clips), atol=1e-4, rtol=0)


def test_float32_stays_close():
    extractor = ASTFeatureExtractor(max_length=300)
    clips = synthetic_clips([16000, 48000], 16000)
    output = AstFbankFeatures.from_extractor(extractor).featurize_arrays(clips)["input_values"]
    assert output.dtype == torch.float32
    np.testing.assert_allclose(output.numpy(), _reference(extractor, clips), atol=2e-4, rtol=0)


def test_samples_past_the_window_do_not_change_the_features():
    features = AstFbankFeatures.from_extractor(ASTFeatureExtractor(max_length=50))
    clip = synthetic_clips([20000], 16000)[0]
    whole = features.featurize_arrays([clip], dtype=torch.float64)["input_values"]
    cut = features.featurize_arrays([clip[: features.window_samples]], dtype=torch.float64)["input_values"]
    torch.testing.assert_close(whole, cut, rtol=0, atol=0)


def test_builds_the_filterbank_when_the_extractor_holds_none():
    # With torchaudio importable, transformers' extractor keeps no NumPy filterbank or window.
    extractor = ASTFeatureExtractor(num_mel_bins=64)
    bare = copy.deepcopy(extractor)
    del bare.mel_filters, bare.window
    clips = synthetic_clips([8000], 16000)
    torch.testing.assert_close(
        AstFbankFeatures.from_extractor(bare).featurize_arrays(clips, dtype=torch.float64)["input_values"],
        AstFbankFeatures.from_extractor(extractor).featurize_arrays(clips, dtype=torch.float64)[
            "input_values"
        ],
    )


def test_rejects_waveforms_and_lengths_that_do_not_fit():
    features = AstFbankFeatures.from_extractor(ASTFeatureExtractor(max_length=20))
    with pytest.raises(ValueError, match=r"float waveforms of shape \(batch, samples\)"):
        features(torch.zeros(4000))
    with pytest.raises(ValueError, match=r"one length in \[1, 4000\] per clip, got \[4001\]"):
        features(torch.zeros(1, 4000), torch.tensor([4001]))
