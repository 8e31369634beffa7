from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import WhisperFeatureExtractor

from hf_atr.features import WhisperLogMelFeatures

SETTINGS = [
    {},
    {"feature_size": 32, "chunk_length": 1, "n_fft": 512, "hop_length": 128, "padding_value": 0.01},
]


def _clips(extractor):
    samples = extractor.n_samples
    # Shorter than chunk_length, exactly chunk_length, longer (cut), and short.
    return synthetic_clips([samples // 3, samples, samples + 7000, 3000], extractor.sampling_rate)


def _numpy_reference(extractor, clips):
    """transformers' NumPy path (used without torch), after its own padding to n_samples."""
    padded = extractor.pad(
        {"input_features": [clip[:, None] for clip in clips]},
        padding="max_length",
        max_length=extractor.n_samples,
        truncation=True,
        return_tensors="np",
    )["input_features"][..., 0]
    return extractor._np_extract_fbank_features(padded, "cpu")


@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "small-padded"])
def test_equals_both_transformers_paths_in_float64(settings):
    extractor = WhisperFeatureExtractor(**settings)
    clips = _clips(extractor)
    output = WhisperLogMelFeatures.from_extractor(extractor).featurize_arrays(clips, dtype=torch.float64)
    features = output["input_features"].numpy()
    assert features.shape == (4, extractor.feature_size, extractor.nb_max_frames)
    np.testing.assert_allclose(features, _numpy_reference(extractor, clips), atol=1e-4, rtol=0)
    # The extractor's own call (its float32 torch path when torch is installed).
    reference = extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
    np.testing.assert_allclose(features, reference, atol=1e-4, rtol=0)


def test_float32_stays_close():
    extractor = WhisperFeatureExtractor(**SETTINGS[1])
    clips = _clips(extractor)
    output = WhisperLogMelFeatures.from_extractor(extractor).featurize_arrays(clips)["input_features"]
    reference = extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
    assert output.dtype == torch.float32
    np.testing.assert_allclose(output.numpy(), reference, atol=2e-4, rtol=0)


def test_attention_mask_equals_the_extractors():
    extractor = WhisperFeatureExtractor(**SETTINGS[1], return_attention_mask=True)
    clips = _clips(extractor)
    output = WhisperLogMelFeatures.from_extractor(extractor).featurize_arrays(clips)
    reference = extractor(
        clips, sampling_rate=extractor.sampling_rate, return_attention_mask=True, return_tensors="pt"
    )
    assert output["attention_mask"].dtype == torch.int32
    torch.testing.assert_close(output["attention_mask"], reference["attention_mask"])


def test_dither_draws_the_noise_transformers_draws_from_an_equally_seeded_generator():
    extractor = WhisperFeatureExtractor(**SETTINGS[1], dither=0.01)
    features = WhisperLogMelFeatures.from_extractor(extractor)
    clips = _clips(extractor)
    torch.manual_seed(7)
    reference = extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="np")["input_features"]
    seeded = features.featurize_arrays(clips, random_source=torch.Generator().manual_seed(7))[
        "input_features"
    ]
    np.testing.assert_allclose(seeded.numpy(), reference, atol=2e-4, rtol=0)
    other = features.featurize_arrays(clips, random_source=torch.Generator().manual_seed(8))["input_features"]
    assert (other - seeded).abs().max() > 1e-3
