"""A transformers feature extractor called without its random choices: clips within the window are its own output,
long CLAP clips follow one fixed rule (head; head, centre and tail views), is_longer marks long clips only."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ClapFeatureExtractor, WhisperFeatureExtractor

from hf_atr.features import ClapLogMelFeatures, WhisperLogMelFeatures
from hf_atr.long_clips import inference_features

RATE = 16000


def _clap(truncation: str) -> ClapFeatureExtractor:
    return ClapFeatureExtractor(
        truncation=truncation,
        feature_size=64,
        sampling_rate=RATE,
        hop_length=160,
        max_length_s=1,
        fft_window_size=400,
        frequency_max=8000,
    )


def _clips(extractor) -> list[np.ndarray]:
    window = extractor.nb_max_samples
    # Shorter, exactly the window, longer by less than a hop (fusion reads it whole, not longer), 3 windows.
    return synthetic_clips([window // 3, window, window + 50, 3 * window + 11], RATE)


def _extractor_with_picks(monkeypatch, picks):
    """Make ``np.random`` (what the extractor draws from) return ``picks(values, call)`` instead of a random
    element: ``choice(values)`` and ``randint(0, n)`` both pick by position."""
    calls = itertools.count()
    monkeypatch.setattr(
        np.random, "choice", lambda values: np.asarray(values)[picks(len(values), next(calls))]
    )
    monkeypatch.setattr(np.random, "randint", lambda low, high: low + picks(high - low, next(calls)))


def test_rand_trunc_keeps_the_head_as_the_extractor_computes_it(monkeypatch):
    extractor = _clap("rand_trunc")
    clips = _clips(extractor)
    first = inference_features(extractor, clips, sampling_rate=RATE, return_tensors="np")
    again = inference_features(extractor, clips, sampling_rate=RATE, return_tensors="np")
    np.testing.assert_array_equal(first["input_features"], again["input_features"])
    _extractor_with_picks(monkeypatch, lambda n, call: 0)  # the extractor drawing offset 0: the head
    reference = extractor(clips, sampling_rate=RATE, return_tensors="np")
    np.testing.assert_array_equal(first["input_features"], reference["input_features"])
    np.testing.assert_array_equal(first["is_longer"], [[False], [False], [True], [True]])
    assert first["input_features"].dtype == np.float32


def test_fusion_takes_head_centre_and_tail_views_and_marks_only_long_clips(monkeypatch):
    extractor = _clap("fusion")
    clips = _clips(extractor)
    short = inference_features(extractor, clips[:3], sampling_rate=RATE, return_tensors="np")
    # No clip is longer: none is marked (the extractor marks one at random, for training).
    np.testing.assert_array_equal(short["is_longer"], [[False], [False], [False]])
    outputs = inference_features(extractor, clips, sampling_rate=RATE, return_tensors="pt")
    np.testing.assert_array_equal(outputs["is_longer"].numpy(), [[False], [False], [False], [True]])
    assert outputs["input_features"].dtype == torch.float32
    # Within the window: the extractor's output bit for bit, whatever else is in the batch.
    alone = extractor(clips[:3], sampling_rate=RATE, return_tensors="np")["input_features"]
    np.testing.assert_array_equal(outputs["input_features"][:3].numpy(), alone)
    np.testing.assert_array_equal(short["input_features"], alone)
    # The long clip: the extractor's output had it drawn the first, middle and last start of its thirds.
    _extractor_with_picks(monkeypatch, lambda n, call: (0, (n - 1) // 2, n - 1)[call % 3])
    reference = extractor(clips[3:], sampling_rate=RATE, return_tensors="np")["input_features"]
    np.testing.assert_allclose(outputs["input_features"][3:].numpy(), reference, atol=1e-4, rtol=0)
    starts = ClapLogMelFeatures.from_extractor(extractor).fixed_choices(torch.tensor([len(clips[3])]))
    frames = len(clips[3]) // extractor.hop_length + 1
    last_start = frames - (extractor.nb_max_samples // extractor.hop_length + 1)
    assert starts["fusion_starts"].tolist() == [[0, last_start // 2, last_start]]


def test_call_options_override_the_extractors_settings():
    extractor = _clap("fusion")
    clips = _clips(extractor)
    outputs = inference_features(
        extractor, clips, sampling_rate=RATE, return_tensors="np", truncation="rand_trunc", padding="pad"
    )
    assert outputs["input_features"].shape[1] == 1  # rand_trunc's one view
    expected = inference_features(_clap("rand_trunc"), clips, sampling_rate=RATE, return_tensors="np")
    np.testing.assert_array_equal(outputs["input_features"][2:], expected["input_features"][2:])
    assert (
        extractor.truncation == "fusion" and extractor.padding == "repeatpad"
    )  # the extractor is left as it was


def test_whisper_is_not_dithered_at_inference():
    settings = dict(feature_size=32, sampling_rate=RATE, chunk_length=1, hop_length=160)
    dithering = WhisperFeatureExtractor(**settings, dither=0.01)
    clips = synthetic_clips([RATE // 2, 2 * RATE], RATE)
    outputs = inference_features(dithering, clips, sampling_rate=RATE, return_tensors="np")
    plain = WhisperFeatureExtractor(**settings)(clips, sampling_rate=RATE, return_tensors="np")
    np.testing.assert_array_equal(outputs["input_features"], plain["input_features"])
    assert dithering.dither == 0.01
    # The batched twin: no noise without a generator, noise from one.
    twin = WhisperLogMelFeatures.from_extractor(dithering)
    quiet = twin.featurize_arrays(clips)["input_features"]
    torch.testing.assert_close(
        quiet,
        WhisperLogMelFeatures.from_extractor(WhisperFeatureExtractor(**settings)).featurize_arrays(clips)[
            "input_features"
        ],
        rtol=0,
        atol=0,
    )
    noisy = twin.featurize_arrays(clips, random_source=torch.Generator().manual_seed(0))["input_features"]
    assert (noisy - quiet).abs().max() > 1e-3


@pytest.mark.parametrize("truncation", ["rand_trunc", "fusion"])
def test_the_batched_twin_without_random_source_is_a_function_of_each_clip(truncation):
    extractor = _clap(truncation)
    twin = ClapLogMelFeatures.from_extractor(extractor)
    clips = _clips(extractor)
    together = twin.featurize_arrays(clips)
    again = twin.featurize_arrays(clips)
    torch.testing.assert_close(together, again, rtol=0, atol=0)
    np.testing.assert_array_equal(
        together["is_longer"].numpy(), [[False], [False], [truncation == "rand_trunc"], [True]]
    )
    for index, clip in enumerate(clips):
        alone = twin.featurize_arrays([clip])
        torch.testing.assert_close(
            alone["input_features"][0], together["input_features"][index], atol=1e-5, rtol=0
        )
        assert bool(alone["is_longer"][0]) == bool(together["is_longer"][index])
    # The fixed rule agrees with the extractor (inference_features) on every clip.
    reference = inference_features(extractor, clips, sampling_rate=RATE, return_tensors="np")
    np.testing.assert_allclose(
        together["input_features"].numpy(), reference["input_features"], atol=1e-3, rtol=0
    )
    np.testing.assert_array_equal(together["is_longer"].numpy(), reference["is_longer"])
