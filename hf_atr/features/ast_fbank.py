"""Kaldi-compatible log-mel filterbank of ``ASTFeatureExtractor``, batched in torch.

The reference is transformers' NumPy path (``ASTFeatureExtractor._extract_fbank_features`` without
torchaudio, which this project never installs): per 25-ms frame (400 samples at 16 kHz, hop 160, no
centre padding, frames that do not fit are dropped), remove the frame's mean (DC offset), pre-emphasis
``y[n] = x[n] - 0.97 x[n-1]`` (``y[0] = 0.03 x[0]``), symmetric Hann window, 512-point real FFT, power,
Kaldi mel filterbank, ``log(max(mel, 1.1920929e-07))``; no dither. The frames are cut or zero-padded to
``max_length`` and normalised as ``(fbank - mean) / (2 std)``. The frame, hop and FFT sizes,
pre-emphasis and floor are fixed in transformers' code (not attributes of the extractor); they are
written once below. torchaudio's ``kaldi.fbank`` (transformers' other path) uses the same settings at
16 kHz.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.audio_utils import mel_filter_bank, window_function

from .base import BatchedFeatureExtractor, ClipWindow, without_autocast
from .spectrogram import mel_power_

HOP_LENGTH = 160
FFT_LENGTH = 512
FRAME_LENGTH = 400
PREEMPHASIS = 0.97
MEL_FLOOR = 1.192092955078125e-07
"""float32 machine epsilon, Kaldi's log floor."""
MIN_FREQUENCY = 20.0


class AstFbankFeatures(BatchedFeatureExtractor):
    """Batched ``ASTFeatureExtractor``: ``input_values: (batch, max_length, num_mel_bins)``.

    Args:
        mel_filters: ``(fft_length // 2 + 1, num_mel_bins)`` Kaldi mel filterbank.
        window: ``(frame_length,)`` analysis window.
        max_length: frames to cut or zero-pad to.
        mean, std: normalisation constants, applied when ``do_normalize``.
    """

    model_input_names = ("input_values",)

    def __init__(
        self,
        *,
        sampling_rate: int,
        mel_filters: Any,
        window: Any,
        max_length: int,
        do_normalize: bool,
        mean: float,
        std: float,
    ) -> None:
        super().__init__(sampling_rate)
        self.register_mel_filterbank(mel_filters, window)
        self.frame_length = len(window)
        self.fft_length = 2 * (self._arrays["mel_filters"].shape[0] - 1)
        self.max_length = max_length
        self.do_normalize = do_normalize
        self.mean = mean
        self.std = std

    @classmethod
    def from_extractor(cls, extractor: Any) -> AstFbankFeatures:
        """Copy an ``ASTFeatureExtractor``'s settings (its filterbank and window when it holds them)."""
        mel_filters = getattr(extractor, "mel_filters", None)
        if mel_filters is None:
            # With torchaudio importable transformers builds no NumPy filterbank; build the one it would.
            mel_filters = mel_filter_bank(
                num_frequency_bins=FFT_LENGTH // 2 + 1,
                num_mel_filters=extractor.num_mel_bins,
                min_frequency=MIN_FREQUENCY,
                max_frequency=extractor.sampling_rate // 2,
                sampling_rate=extractor.sampling_rate,
                norm=None,
                mel_scale="kaldi",
                triangularize_in_mel_space=True,
            )
        window = getattr(extractor, "window", None)
        if window is None:
            window = window_function(FRAME_LENGTH, "hann", periodic=False)
        return cls(
            sampling_rate=extractor.sampling_rate,
            mel_filters=mel_filters,
            window=window,
            max_length=extractor.max_length,
            do_normalize=extractor.do_normalize,
            mean=extractor.mean,
            std=extractor.std,
        )

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """``max_length`` frames of 25 ms every 10 ms, read from the start."""
        return ClipWindow(cls.from_extractor(extractor).window_samples, True)

    @property
    def window_samples(self) -> int:
        """Samples that make ``max_length`` frames; later samples never reach a feature."""
        return (self.max_length - 1) * HOP_LENGTH + self.frame_length

    def frame_counts(self, lengths: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """Whole frames in each clip (no padding): ``(batch,)``, clamped to ``[0, max_length]``; a tensor for a
        tensor, a NumPy array for a NumPy array."""
        return (1 + (lengths - self.frame_length) // HOP_LENGTH).clip(0, self.max_length)

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        batch = waveforms.shape[0]
        host_counts = self.frame_counts(host_lengths)
        frames_used = int(host_counts.max())
        fbank = waveforms.new_empty(batch, self.max_length, self.num_mel_bins)
        # Frames past a clip's end are zeros before normalisation, as transformers pads them.
        fbank[:, frames_used:] = 0.0
        self.normalize_(fbank[:, frames_used:])
        if frames_used > 0:
            counts = self.frame_counts(lengths)
            for chunk in self.chunks(batch, frames_used, waveforms.device):
                log_mel = fbank[chunk, :frames_used]
                self.log_mel(waveforms[chunk], frames_used, log_mel)
                if (host_counts[chunk] < frames_used).any():
                    frame_index = torch.arange(frames_used, device=waveforms.device)
                    log_mel.masked_fill_(frame_index[None, :, None] >= counts[chunk, None, None], 0.0)
                self.normalize_(log_mel)
        return {"input_values": fbank}

    def normalize_(self, fbank: torch.Tensor) -> torch.Tensor:
        """In place, ``(fbank - mean) / (2 std)`` when ``do_normalize`` (transformers' AST convention)."""
        return fbank.sub_(self.mean).div_(self.std * 2) if self.do_normalize else fbank

    @without_autocast
    def log_mel(self, waveforms: torch.Tensor, frames: int, out: torch.Tensor) -> None:
        """Writes the log-mel energies of the first ``frames`` frames of every clip into ``out: (batch,
        frames, num_mel_bins)``."""
        frame_length = self.frame_length
        samples = (frames - 1) * HOP_LENGTH + frame_length
        framed = waveforms[:, :samples].unfold(1, frame_length, HOP_LENGTH)
        # Pre-emphasis of the frame minus its mean m, per frame sample n:
        # (x[n] - m) - p (x[n-1] - m) = e[n] - (1 - p) m with e = x[n] - p x[n-1] for n >= 1, and
        # (1 - p)(x[0] - m) at n = 0. e is computed once on the signal; frames are views of it.
        emphasised = torch.empty_like(waveforms[:, :samples])
        torch.sub(
            waveforms[:, 1:samples], waveforms[:, : samples - 1], alpha=PREEMPHASIS, out=emphasised[:, 1:]
        )
        emphasised[:, :1] = waveforms[:, :1]
        emphasised_frames = emphasised.unfold(1, frame_length, HOP_LENGTH)
        window = self.constant("window", waveforms)
        buffer = waveforms.new_empty(waveforms.shape[0], frames, self.fft_length)
        buffer[..., frame_length:] = 0.0
        windowed = buffer[..., :frame_length]
        torch.mul(emphasised_frames, window, out=windowed)
        windowed[..., 0] = (1 - PREEMPHASIS) * framed[..., 0] * window[0]
        windowed.addcmul_(framed.mean(dim=-1, keepdim=True), window, value=PREEMPHASIS - 1)
        mel = mel_power_(
            torch.fft.rfft(buffer), self.constant("interleaved_mel_filters", waveforms), self.bands
        )
        torch.log(mel.clamp_(min=MEL_FLOOR), out=out)
