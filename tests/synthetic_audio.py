"""Synthetic waveforms for feature tests: broadband noise, tones, a chirp and a silent gap, like real audio."""

from __future__ import annotations

import numpy as np


def synthetic_clip(samples: int, sampling_rate: int, seed: int = 0) -> np.ndarray:
    """A float32 ``(samples,)`` clip: two tones, a chirp, a 50-Hz hum and noise 20 dB below, a 50-ms gap.

    Like recordings, every mel band stays within ~80 dB of a frame's peak: a float32 STFT is accurate to
    1e-3 dB only on such bands (its rounding is relative to the whole frame, not to each band).
    """
    rng = np.random.default_rng(seed)
    time = np.arange(samples) / sampling_rate
    tones = 0.3 * np.sin(2 * np.pi * (220 + 40 * seed) * time) + 0.2 * np.sin(2 * np.pi * 1500 * time)
    chirp = 0.2 * np.sin(2 * np.pi * (100 + 2000 * time) * time)
    hum = 0.05 * np.sin(2 * np.pi * 50 * time)
    clip = tones + chirp + hum + 0.03 * rng.standard_normal(samples)
    gap_start = samples // 3
    clip[gap_start : gap_start + sampling_rate // 20] = 0.0
    return clip.astype(np.float32)


def synthetic_clips(lengths: list[int], sampling_rate: int) -> list[np.ndarray]:
    return [synthetic_clip(length, sampling_rate, seed) for seed, length in enumerate(lengths)]


def recording_with_event(
    seconds: float, event_at: float | None, sampling_rate: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A long field recording (quiet noise) with one loud 1-kHz tone of 0.5 s at ``event_at`` seconds (none
    for ``None``), and a 1-s query: the same tone in the same kind of noise. Returns ``(recording, query)``,
    float32."""
    rng = np.random.default_rng(seed)
    tone = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(sampling_rate // 2) / sampling_rate)
    recording = 0.01 * rng.standard_normal(int(seconds * sampling_rate))
    if event_at is not None:
        start = int(event_at * sampling_rate)
        recording[start : start + len(tone)] += tone
    query = 0.01 * rng.standard_normal(sampling_rate)
    query[sampling_rate // 4 : sampling_rate // 4 + len(tone)] += tone
    return recording.astype(np.float32), query.astype(np.float32)
