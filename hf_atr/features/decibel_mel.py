"""Shared base of the dB-scale log-mel families (CLAP now, PANNs next): centred STFT power -> mel -> dB.

``10 log10(max(mel, power_floor))`` of a centred (reflect-padded) STFT power spectrum, as transformers'
``spectrogram(..., log_mel="dB")`` and librosa / torchlibrosa's ``power_to_db(ref=1.0)`` compute it. In
float32, frames whose mel bands span more than :data:`PRECISE_RANGE_DB` are recomputed with a float64
FFT, which keeps every band within 1e-3 dB of a float64 reference.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import BatchedFeatureExtractor
from .spectrogram import (
    apply_filter_bands,
    centered_frame_counts,
    centered_frames,
    filter_bands,
    frame_power,
    power_to_db,
    used_bins,
)

PRECISE_RANGE_DB = 65.0
"""A float32 STFT's rounding is relative to the whole frame, so bands far below a frame's loudest one lose
precision: on 10-s clips of real recordings (CLAP settings), bands 65-95 dB down were off by up to
3.4e-3 dB, while in frames whose bands span at most 65 dB every band was within 3.1e-4 dB. Frames
spanning more (about 20 % of the frames of those recordings) are recomputed with a float64 FFT."""


class DecibelMelFeatures(BatchedFeatureExtractor):
    """A :class:`BatchedFeatureExtractor` whose features are mel power in dB.

    Args:
        mel_filters: ``(fft_length // 2 + 1, num_mel_bins)`` filterbank.
        window: ``(fft_length,)`` analysis window (the frame length equals the FFT length).
        hop_length: samples between frames.
        power_floor: mel power floor before decibels (``amin``; 1e-10 is -100 dB).
    """

    def __init__(
        self, sampling_rate: int, *, mel_filters: Any, window: Any, hop_length: int, power_floor: float
    ) -> None:
        super().__init__(sampling_rate)
        self.register_array("mel_filters", mel_filters)
        self.register_array("window", window)
        self.bands = filter_bands(self._arrays["mel_filters"])
        self.fft_length = len(self._arrays["window"])
        self.hop_length = hop_length
        self.power_floor = power_floor

    @property
    def num_mel_bins(self) -> int:
        return self._arrays["mel_filters"].shape[1]

    def frame_counts(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames of each clip's centred STFT: ``(batch,)``."""
        return centered_frame_counts(lengths, self.fft_length, self.hop_length)

    def log_mel(self, signal: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        """``(batch, samples) -> (batch, frames, num_mel_bins)`` in dB, ``frames`` that of the longest clip
        (``lengths: (batch,)``, ``None`` when all fill ``samples``); frames past a clip's own count are
        meaningless. Below float64, deep frames get a float64 FFT (:data:`PRECISE_RANGE_DB`)."""
        frames = centered_frames(signal, lengths, self.fft_length, self.hop_length)
        mel_db = self.frames_to_db(frames)
        if signal.dtype != torch.float64:
            deep = torch.nonzero(mel_db.amax(-1) - mel_db.amin(-1) > PRECISE_RANGE_DB, as_tuple=True)
            if deep[0].numel() > 0:
                mel_db[deep] = self.frames_to_db(frames[deep], torch.float64)
        return mel_db

    def frames_to_db(self, frames: torch.Tensor, fft_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``(..., fft_length)`` frames to ``(..., num_mel_bins)`` mel dB in the frames' dtype, the STFT
        computed in ``fft_dtype`` (default the frames' dtype). The mel projection sums non-negative powers,
        which loses no precision in float32; only the FFT needs more."""
        spectrum_frames = frames if fft_dtype is None else frames.to(fft_dtype)
        window = self.constant("window", spectrum_frames)
        power = frame_power(spectrum_frames, window, used_bins(self.bands)).to(frames.dtype)
        mel = apply_filter_bands(power, self.constant("mel_filters", frames), self.bands)
        return power_to_db(mel, self.power_floor)
