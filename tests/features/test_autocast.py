"""Every batched feature family under ``torch.autocast`` (a mixed-precision training step): float32, finite, and
equal to its float32 result outside autocast.

Autocast would run the mel projection's matmuls in bfloat16 or float16: the dB families (CLAP, PANNs) then crashed
on frames spanning more than ``PRECISE_RANGE_DB`` (a pure tone, a sound next to silence), were off by up to a
quarter of a dB elsewhere, and PANNs' 1e-10 power floor underflowed float16 into ``-inf``. With autocast off inside,
the features run the very kernels they run outside it, on the same inputs: equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    ASTFeatureExtractor,
    ClapFeatureExtractor,
    PeAudioFeatureExtractor,
    WhisperFeatureExtractor,
)

from hf_atr.features import DecibelMelFeatures, batched_features_for, pad_waveforms
from hf_atr.features.decibel_mel import PRECISE_RANGE_DB
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor

EXTRACTORS = {
    "ast": ASTFeatureExtractor(max_length=120),
    "whisper": WhisperFeatureExtractor(feature_size=40, chunk_length=1),
    "clap": ClapFeatureExtractor(max_length_s=1),
    "panns": PannsFeatureExtractor(max_length_s=1.0),
    "pe_audio": PeAudioFeatureExtractor(),
}
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def sound(kind: str, sampling_rate: int) -> np.ndarray:
    """One second of ``kind``: a pure 1-kHz tone, plain noise, or half a second of noise then silence."""
    samples = sampling_rate
    noise = 0.1 * np.random.default_rng(0).standard_normal(samples)
    if kind == "tone":
        return (0.5 * np.sin(2 * np.pi * 1000 * np.arange(samples) / sampling_rate)).astype(np.float32)
    if kind == "noise":
        return noise.astype(np.float32)
    noise[samples // 2 :] = 0.0
    return noise.astype(np.float32)


def featurize(name: str, kind: str) -> dict[str, torch.Tensor]:
    extractor = EXTRACTORS[name]
    waveforms, lengths = pad_waveforms([sound(kind, extractor.sampling_rate)])
    # Whisper's dither and CLAP's crops come from this generator: the same draws inside autocast and outside.
    return batched_features_for(extractor)(waveforms, lengths, random_source=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", ["tone", "noise", "next to silence"])
@pytest.mark.parametrize("name", EXTRACTORS)
def test_every_family_gives_its_float32_result_under_autocast(name, kind):
    reference = featurize(name, kind)
    for dtype in AUTOCAST_DTYPES:
        with torch.autocast("cpu", dtype=dtype):
            under_autocast = featurize(name, kind)
        assert under_autocast.keys() == reference.keys()
        for key, expected in reference.items():
            got = under_autocast[key]
            assert got.dtype == expected.dtype, (dtype, key)
            if expected.is_floating_point():
                assert expected.dtype == torch.float32 and bool(torch.isfinite(got).all()), (dtype, key)
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"{name}, {kind}, {dtype}, {key}")


@pytest.mark.parametrize("name", ["clap", "panns"])
def test_the_tone_reaches_the_deep_frames_that_crashed_under_autocast(name):
    # Frames spanning more than PRECISE_RANGE_DB take the float64 path whose rows autocast made half precision.
    mel_db = featurize(name, "tone")["input_features"]
    assert float((mel_db.amax(-1) - mel_db.amin(-1)).max()) > PRECISE_RANGE_DB


def test_log_mel_called_directly_is_float32_and_finite_under_float16_autocast():
    features = batched_features_for(EXTRACTORS["panns"])
    assert isinstance(features, DecibelMelFeatures)
    waveforms, lengths = pad_waveforms([sound("next to silence", features.sampling_rate)])
    reference = features.log_mel(waveforms, lengths)
    with torch.autocast("cpu", dtype=torch.float16):
        under_autocast = features.log_mel(waveforms, lengths)
        by_keyword = features.log_mel(source=waveforms, signal_lengths=lengths)
    for result in (under_autocast, by_keyword):
        assert result.dtype == torch.float32 and bool(torch.isfinite(result).all())
        torch.testing.assert_close(result, reference, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_half_precision_waveforms_are_featurised_in_float32(dtype):
    # Passed by keyword, under autocast of their own dtype, as a mixed-precision loop might hold them.
    features = batched_features_for(EXTRACTORS["clap"])
    clip = sound("next to silence", features.sampling_rate)
    half, lengths = pad_waveforms([clip], dtype=dtype)
    expected = features(half.to(torch.float32), lengths)["input_features"]
    with torch.autocast("cpu", dtype=dtype):
        got = features(waveforms=half, lengths=lengths)["input_features"]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
