"""Shared base of the dB-scale log-mel families (CLAP, PANNs): centred STFT power -> mel -> dB.

``10 log10(max(mel, power_floor))`` of a centred (reflect-padded) STFT power spectrum, as transformers'
``spectrogram(..., log_mel="dB")`` and librosa / torchlibrosa's ``power_to_db(ref=1.0)`` compute it. In
float32, frames whose mel bands span more than :data:`PRECISE_RANGE_DB` are recomputed with a float64
FFT, which keeps every band within 1e-3 dB of a float64 reference.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import BatchedFeatureExtractor, without_autocast
from .spectrogram import (
    Lengths,
    audible_frame_counts,
    centered_frame_counts,
    centered_signal,
    mel_power_,
    power_to_db_,
)

PRECISE_RANGE_DB = 65.0
"""A float32 STFT's rounding is relative to the whole frame, so bands far below a frame's loudest one lose
precision: on 10-s clips of real recordings (CLAP settings), bands 65-95 dB down were off by up to
3.4e-3 dB, while in frames whose bands span at most 65 dB every band was within 3.1e-4 dB. Frames
spanning more (about 14-20 % of the frames of those recordings) are recomputed with a float64 FFT."""


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
        self.register_mel_filterbank(mel_filters, window)
        self.fft_length = len(self._arrays["window"])
        self.hop_length = hop_length
        self.power_floor = power_floor

    def frame_counts(self, lengths: Lengths) -> Lengths:
        """Frames of each clip's centred STFT: ``(batch,)`` (a tensor for a tensor, NumPy for NumPy)."""
        return centered_frame_counts(lengths, self.fft_length, self.hop_length)

    @without_autocast
    def log_mel(
        self,
        source: torch.Tensor,
        signal_lengths: torch.Tensor,
        *,
        content_lengths: torch.Tensor | None = None,
        content_periods: torch.Tensor | None = None,
        padding_value: float = 0.0,
    ) -> torch.Tensor:
        """Mel dB of centred STFT frames: ``(batch, frames, num_mel_bins)``, ``frames`` that of the longest
        signal; frames past a clip's own count are meaningless.

        Clip ``i``'s signal is ``source[i, :content_lengths[i]]`` (or ``source[i, :content_periods[i]]``
        repeated to that length) then ``padding_value`` up to ``signal_lengths[i]`` (see
        :func:`~hf_atr.features.spectrogram.centered_signal`). Frames that hold
        padding only (:func:`~hf_atr.features.spectrogram.audible_frame_counts`) all equal one padding
        frame, computed once. Below float64, deep frames get a float64 FFT (:data:`PRECISE_RANGE_DB`). The
        lengths decide shapes and loops only: NumPy arrays on the host spare the device any read but the choice
        of the deep frames.
        """
        total = int(self.frame_counts(signal_lengths).max())
        audible = total
        if content_lengths is not None:
            counts = audible_frame_counts(content_lengths, signal_lengths, self.fft_length, self.hop_length)
            audible = int(counts.max())
        signal = centered_signal(
            source,
            signal_lengths,
            self.fft_length,
            audible,
            self.hop_length,
            content_lengths=content_lengths,
            content_periods=content_periods,
            padding_value=padding_value,
        )
        frames = signal.unfold(1, self.fft_length, self.hop_length)
        mel_db = source.new_empty(len(source), total, self.num_mel_bins)
        computed = mel_db[:, :audible]
        computed[:] = self.frames_to_db(frames)
        if source.dtype != torch.float64:
            deep = torch.nonzero(computed.amax(-1) - computed.amin(-1) > PRECISE_RANGE_DB, as_tuple=True)
            if deep[0].numel() > 0:
                computed[deep] = self.frames_to_db(frames[deep], torch.float64)
        if audible < total:
            padding_frame = source.new_full((1, self.fft_length), padding_value, dtype=torch.float64)
            mel_db[:, audible:] = self.frames_to_db(padding_frame).to(source.dtype)
        return mel_db

    def frames_to_db(self, frames: torch.Tensor, fft_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``(..., fft_length)`` frames to ``(..., num_mel_bins)`` mel dB in the frames' dtype, the STFT
        computed in ``fft_dtype`` (default the frames' dtype). The mel projection sums non-negative powers,
        which loses no precision in float32; only the FFT needs more."""
        if fft_dtype is None or fft_dtype == frames.dtype:
            windowed = frames * self.constant("window", frames)
        else:
            # Cast, then window in place: twice as fast as a mixed-dtype product.
            windowed = frames.to(fft_dtype).mul_(self.constant("window", frames, fft_dtype))
        spectrum = torch.fft.rfft(windowed)
        mel = mel_power_(spectrum, self.constant("interleaved_mel_filters", frames), self.bands)
        return power_to_db_(mel, self.power_floor)
