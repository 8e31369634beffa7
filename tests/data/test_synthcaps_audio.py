"""hf_atr.data.synthcaps_audio: the SynthCaps events rendered (the corpus: tests/data/test_synthcaps.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.data.synthcaps_audio import SOUND_EVENTS, generate_clip, render_event

RATE = 16000


def test_generate_clip_checks_its_arguments():
    with pytest.raises(ValueError, match="Unknown SynthCaps split 'dev'"):
        generate_clip("dev", 0)
    with pytest.raises(ValueError, match="sampling_rate must be at least"):
        generate_clip("train", 0, sampling_rate=8000)


# ---------------------------------------------------------------- audio of the events


def _spectrum(waveform: np.ndarray):
    magnitude = np.abs(np.fft.rfft(waveform * np.hanning(len(waveform))))
    return np.fft.rfftfreq(len(waveform), 1 / RATE), magnitude


def _event(event: str, seed: int = 0, loudness: str | None = "loud", seconds: float = 1.0) -> np.ndarray:
    return render_event(event, int(seconds * RATE), RATE, np.random.default_rng(seed), loudness)


def _peak_hz(waveform: np.ndarray) -> float:
    frequencies, magnitude = _spectrum(waveform)
    return float(frequencies[np.argmax(magnitude)])


def _centroid_hz(waveform: np.ndarray) -> float:
    frequencies, magnitude = _spectrum(waveform)
    return float((frequencies * magnitude**2).sum() / (magnitude**2).sum())


def test_tones_are_ordered_in_frequency():
    for seed in range(3):
        low, mid, beeps, high = (
            _peak_hz(_event(name, seed)) for name in ("low_tone", "mid_tone", "beeps", "high_tone")
        )
        assert 220 <= low <= 280 < 900 <= mid <= 1100 < 1900 <= beeps <= 2100 < 3300 <= high <= 3900


def test_chirps_move_in_opposite_directions():
    up, down = _event("chirp_up"), _event("chirp_down")
    half = len(up) // 2
    assert _centroid_hz(up[:half]) < 1500 < _centroid_hz(up[half:])
    assert _centroid_hz(down[:half]) > 1500 > _centroid_hz(down[half:])


def test_noise_colours_have_decreasing_spectral_slope():
    def slope(waveform):
        frequencies, magnitude = _spectrum(waveform)
        band = (frequencies > 100) & (frequencies < 6000)
        return np.polyfit(np.log(frequencies[band]), np.log(magnitude[band] ** 2 + 1e-20), 1)[0]

    white, pink, brown = (slope(_event(name)) for name in ("white_noise", "pink_noise", "brown_noise"))
    assert abs(white) < 0.2 and abs(pink + 1) < 0.2 and abs(brown + 2) < 0.2


def test_loudness_levels_and_silence():
    for event in ("siren", "white_noise", "buzz"):
        loud, quiet = _event(event, loudness="loud"), _event(event, loudness="quiet")
        ratio_db = 20 * np.log10(np.sqrt(np.mean(loud**2)) / np.sqrt(np.mean(quiet**2)))
        assert abs(ratio_db - 20) < 0.5
    assert not _event("silence", loudness=None).any()
    with pytest.raises(ValueError, match="loudness must be one of"):
        _event("siren", loudness="medium")
    with pytest.raises(ValueError, match="Unknown SynthCaps sound event 'bird'"):
        _event("bird")


def _log_band_features(waveform: np.ndarray) -> np.ndarray:
    """Means over each quarter of the clip and std of 32 log-spaced log band energies (a crude log-mel)."""
    frame, hop = 512, 256
    frames = np.lib.stride_tricks.sliding_window_view(waveform, frame)[::hop] * np.hanning(frame)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    edges = np.geomspace(60, RATE / 2, 33)
    frequencies = np.fft.rfftfreq(frame, 1 / RATE)
    bands = np.stack(
        [
            power[:, (frequencies >= lo) & (frequencies < hi)].sum(axis=1)
            for lo, hi in zip(edges[:-1], edges[1:])
        ],
        axis=1,
    )
    # Level-normalised with an 60 dB floor (like a log-mel's top_db), so that loud and quiet versions of an
    # event look alike: the classes must differ in spectral shape and time pattern, not only in level.
    log_bands = np.log10(np.maximum(bands, 1e-6 * bands.max()) / bands.max())
    quarters = [quarter.mean(axis=0) for quarter in np.array_split(log_bands, 4)]
    return np.concatenate([*quarters, log_bands.std(axis=0)])


def test_events_are_separable_from_log_band_energies():
    """A nearest-centroid classifier on crude log-mel statistics tells every event apart."""
    audible = [event for event in SOUND_EVENTS if event != "silence"]
    features = {
        event: [
            _log_band_features(_event(event, seed, loudness=("loud", "quiet")[seed % 2])) for seed in range(8)
        ]
        for event in audible
    }
    centroids = np.stack([np.mean(features[event][:4], axis=0) for event in audible])
    correct = [
        audible[np.argmin(np.linalg.norm(centroids - feature, axis=1))] == event
        for event in audible
        for feature in features[event][4:]
    ]
    assert np.mean(correct) >= 0.95
