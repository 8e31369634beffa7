"""PE-Audio's raw-waveform twin against transformers' ``PeAudioFeatureExtractor``: bit for bit (it copies samples)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import PeAudioFeatureExtractor

from hf_atr.features import PeAudioWaveformFeatures, batched_features_for, pad_waveforms
from hf_atr.features.pe_audio_waveform import reflect_indices

RATE = 48_000
HOP = 1920


def _reference(extractor: PeAudioFeatureExtractor, clips: list[np.ndarray]) -> dict[str, torch.Tensor]:
    return dict(extractor(clips, sampling_rate=extractor.sampling_rate, return_tensors="pt"))


@pytest.mark.parametrize(
    "lengths",
    [
        [30_000],  # 30,000 samples pad to 30,720 (16 hops of 1,920), all valid
        [30_000, 12_000, 45_000, 3_840],  # different lengths, one already a multiple of the hop
        [1_200, 1_921, 1_919, 7_000],  # a 25-ms clip, one sample over a hop, one short of it
    ],
)
def test_batched_twin_equals_the_extractor_bit_for_bit(lengths):
    extractor = PeAudioFeatureExtractor()
    clips = synthetic_clips(lengths, RATE)
    expected = _reference(extractor, clips)
    features = batched_features_for(extractor)
    assert isinstance(features, PeAudioWaveformFeatures)
    ours = features.featurize_arrays(clips)
    assert set(ours) == set(expected) == {"input_values", "padding_mask"}
    for name in expected:
        assert ours[name].dtype == expected[name].dtype and ours[name].shape == expected[name].shape
        assert torch.equal(ours[name], expected[name]), name
    assert ours["padding_mask"].sum(dim=1).tolist() == [-(-length // HOP) * HOP for length in lengths]


def test_padding_follows_the_extractor_s_settings():
    extractor = PeAudioFeatureExtractor(hop_length=480, padding_value=0.25, sampling_rate=16_000)
    clips = synthetic_clips([1_000, 2_000], 16_000)
    ours = batched_features_for(extractor).featurize_arrays(clips)
    expected = _reference(extractor, clips)
    assert torch.equal(ours["input_values"], expected["input_values"])
    assert ours["input_values"][0, 0, 1_440:].eq(0.25).all()  # after the first clip's reflection: padding


def test_waveforms_wider_than_their_lengths_and_any_padding_give_the_same_features():
    """The collator's zero padding, or garbage after a clip, never reaches the features."""
    clips = synthetic_clips([5_000, 9_000], RATE)
    features = PeAudioWaveformFeatures(sampling_rate=RATE, hop_length=HOP, padding_value=0.0)
    waveforms, lengths = pad_waveforms(clips)
    wide = torch.cat([waveforms, torch.full((2, 4_000), 7.0)], dim=1)
    wide[0, 5_000:9_000] = -3.0
    torch.testing.assert_close(features(wide, lengths), features(waveforms, lengths), rtol=0, atol=0)


def test_reflection_repeats_like_numpy_where_the_padding_exceeds_the_clip():
    lengths = torch.tensor([1, 2, 3, 5])
    positions = torch.arange(12)[None, :].expand(4, 12)
    indices = reflect_indices(positions, lengths)
    for row, length in enumerate(lengths.tolist()):
        expected = np.pad(np.arange(length), (0, 12 - length), mode="reflect")[:12]
        assert indices[row].tolist() == expected.tolist()


def test_a_stereo_extractor_and_a_bad_hop_are_refused():
    with pytest.raises(
        ValueError, match="feature_size=2 has no batched twin: the extractor itself reads mono"
    ):
        PeAudioWaveformFeatures.from_extractor(PeAudioFeatureExtractor(feature_size=2))
    with pytest.raises(ValueError, match="hop_length must be a positive number of samples, got 0"):
        PeAudioWaveformFeatures(sampling_rate=RATE, hop_length=0, padding_value=0.0)
