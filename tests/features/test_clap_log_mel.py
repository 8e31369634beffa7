from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ClapFeatureExtractor

from hf_atr.features import ClapLogMelFeatures, decibel_mel

RATE = 48000


def _lengths(extractor):
    samples, hop = extractor.nb_max_samples, extractor.hop_length
    # Shorter (twice: repeat counts differ), exactly max_length, longer by less than a hop (transformers
    # keeps the whole clip, not longer), longer, much longer (fused / cropped).
    return [samples // 3, 7000, samples, samples + hop // 2, samples + 3 * hop + 7, 3 * samples + 11]


def _reference(extractor, clips, seed):
    np.random.seed(seed)
    return extractor(clips, sampling_rate=RATE, return_tensors="np")


@pytest.mark.parametrize("padding", ["repeatpad", "repeat", "pad"])
@pytest.mark.parametrize("truncation", ["fusion", "rand_trunc"])
def test_equals_the_extractor_with_its_random_choices(truncation, padding):
    extractor = ClapFeatureExtractor(truncation=truncation, padding=padding, max_length_s=1)
    features = ClapLogMelFeatures.from_extractor(extractor)
    clips = synthetic_clips(_lengths(extractor), RATE)
    reference = _reference(extractor, clips, seed=3)
    # A RandomState seeded like np.random replays the extractor's draws.
    exact = features.featurize_arrays(clips, dtype=torch.float64, random_source=np.random.RandomState(3))
    fast = features.featurize_arrays(clips, random_source=np.random.RandomState(3))
    stack = 4 if truncation == "fusion" else 1
    assert exact["input_features"].shape == (len(clips), stack, features.chunk_frames, extractor.feature_size)
    np.testing.assert_allclose(
        exact["input_features"].numpy(), reference["input_features"], atol=1e-4, rtol=0
    )
    np.testing.assert_allclose(fast["input_features"].numpy(), reference["input_features"], atol=1e-3, rtol=0)
    np.testing.assert_array_equal(exact["is_longer"].numpy(), reference["is_longer"])


def test_default_settings_ten_seconds_in_float32_within_a_thousandth_of_a_db():
    extractor = ClapFeatureExtractor()
    clips = synthetic_clips([5 * RATE, 10 * RATE, 13 * RATE], RATE)
    reference = _reference(extractor, clips, seed=0)
    output = ClapLogMelFeatures.from_extractor(extractor).featurize_arrays(
        clips, random_source=np.random.RandomState(0)
    )
    np.testing.assert_allclose(
        output["input_features"].numpy(), reference["input_features"], atol=1e-3, rtol=0
    )
    np.testing.assert_array_equal(output["is_longer"].numpy(), [[False], [False], [True]])


def test_torch_draws_are_reproducible_and_cover_the_extractors_ranges():
    features = ClapLogMelFeatures.from_extractor(ClapFeatureExtractor(max_length_s=1))
    lengths = torch.tensor([3 * RATE, RATE // 2, 2 * RATE])
    first = features.draw_random_choices(lengths, torch.Generator().manual_seed(0))
    again = features.draw_random_choices(lengths, torch.Generator().manual_seed(0))
    torch.testing.assert_close(first, again)
    starts = torch.stack(
        [
            features.draw_random_choices(lengths, torch.Generator().manual_seed(seed))["fusion_starts"][0]
            for seed in range(300)
        ]
    )
    # Clip 0 has 3 s -> 301 frames, chunks of 101: starts 0..200 split in thirds [0, 66], [67, 133], [134, 200].
    assert starts[:, 0].min() == 0 and starts[:, 0].max() == 66
    assert starts[:, 1].min() == 67 and starts[:, 1].max() == 133
    assert starts[:, 2].min() == 134 and starts[:, 2].max() == 200
    assert first["fusion_starts"][1].tolist() == [0, 0, 0] and first["is_longer"].tolist() == [
        True,
        False,
        True,
    ]


def test_fusion_marks_one_random_clip_longer_when_none_is():
    features = ClapLogMelFeatures.from_extractor(ClapFeatureExtractor(max_length_s=1))
    lengths = torch.tensor([RATE // 2, RATE // 3, RATE])
    marked = [
        features.draw_random_choices(lengths, torch.Generator().manual_seed(seed))["is_longer"]
        .nonzero()
        .item()
        for seed in range(60)
    ]
    assert sorted(set(marked)) == [0, 1, 2]


def test_rand_trunc_crops_stay_in_the_clip_and_a_crop_made_earlier_stays_longer():
    features = ClapLogMelFeatures.from_extractor(
        ClapFeatureExtractor(truncation="rand_trunc", max_length_s=1)
    )
    lengths = torch.tensor([RATE + 100, RATE])
    offsets = torch.stack(
        [
            features.draw_random_choices(lengths, torch.Generator().manual_seed(seed))["crop_offsets"]
            for seed in range(200)
        ]
    )
    assert offsets[:, 0].min() == 0 and offsets[:, 0].max() == 100 and (offsets[:, 1] == 0).all()
    already_cropped = features.draw_random_choices(lengths.clamp(max=RATE), source_lengths=lengths)
    assert already_cropped["is_longer"].tolist() == [True, False]


@pytest.mark.parametrize(
    ("setting", "message"),
    [({"truncation": "head"}, "truncation must be one of"), ({"padding": "edge"}, "padding must be one of")],
)
def test_unknown_settings_are_rejected(setting, message):
    with pytest.raises(ValueError, match=message):
        ClapLogMelFeatures.from_extractor(ClapFeatureExtractor(**setting))


def test_float32_frames_with_deep_bands_are_recomputed_in_float64(monkeypatch):
    # A loud tone over a faint floor: bands ~100 dB below each frame's peak, where float32 STFT rounding
    # alone misses the extractor's float64 result by more than 1e-3 dB.
    time = np.arange(RATE) / RATE
    clip = (
        0.5 * np.sin(2 * np.pi * 440 * time) + 1e-5 * np.random.default_rng(0).standard_normal(RATE)
    ).astype(np.float32)
    extractor = ClapFeatureExtractor(max_length_s=1, truncation="rand_trunc")
    features = ClapLogMelFeatures.from_extractor(extractor)
    reference = extractor([clip], sampling_rate=RATE, return_tensors="np")["input_features"]
    refined = features.featurize_arrays([clip])["input_features"].numpy()
    np.testing.assert_allclose(refined, reference, atol=1e-3, rtol=0)
    monkeypatch.setattr(decibel_mel, "PRECISE_RANGE_DB", float("inf"))
    float32_only = features.featurize_arrays([clip])["input_features"].numpy()
    assert np.abs(float32_only - reference).max() > 1e-3
