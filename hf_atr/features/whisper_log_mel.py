"""Log-mel spectrogram of ``WhisperFeatureExtractor``, batched in torch.

transformers' extractor pads or cuts every clip to ``chunk_length`` seconds (``n_samples``, padding with
``padding_value``), adds ``dither`` Gaussian noise when non-zero, takes a centred (reflect-padded) STFT
with a periodic Hann window of ``n_fft`` and hop ``hop_length``, drops the last frame, projects the power
onto its Slaney mel filterbank, and returns ``(max(log10(max(mel, 1e-10)), peak - 8) + 4) / 4`` with the
peak taken per clip. Both of its paths (NumPy per clip, torch when installed) compute this; here it is one
batched computation on the waveforms' device. Without dither, frames that hold padding only (most of a
30-s window for a 5-s clip) are all equal: one is computed and copied (the extractor computes each).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.audio_utils import window_function

from .base import BatchedFeatureExtractor, ClipWindow, without_autocast
from .spectrogram import audible_frame_counts, centered_signal, mel_power_

WINDOW = "hann"
LOG_FLOOR = 1e-10
DYNAMIC_RANGE = 8.0
"""Log10 units kept below each clip's peak (80 dB)."""
OFFSET = 4.0
SCALE = 4.0


class WhisperLogMelFeatures(BatchedFeatureExtractor):
    """Batched ``WhisperFeatureExtractor``: ``input_features: (batch, num_mel_bins, n_samples // hop_length)``,
    plus ``attention_mask: (batch, frames)`` int32 (1 on frames that start inside the clip) when the extractor
    has ``return_attention_mask=True``.
    """

    model_input_names = ("input_features",)

    def __init__(
        self,
        *,
        sampling_rate: int,
        mel_filters: Any,
        n_fft: int,
        hop_length: int,
        n_samples: int,
        padding_value: float,
        dither: float,
        return_attention_mask: bool,
    ) -> None:
        super().__init__(sampling_rate)
        self.register_mel_filterbank(mel_filters, window_function(n_fft, WINDOW))
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.n_samples = n_samples
        self.padding_value = padding_value
        self.dither = dither
        self.return_attention_mask = return_attention_mask

    @classmethod
    def from_extractor(cls, extractor: Any) -> WhisperLogMelFeatures:
        """Copy a ``WhisperFeatureExtractor``'s settings and filterbank."""
        return cls(
            sampling_rate=extractor.sampling_rate,
            mel_filters=extractor.mel_filters,
            n_fft=extractor.n_fft,
            hop_length=extractor.hop_length,
            n_samples=extractor.n_samples,
            padding_value=extractor.padding_value,
            dither=extractor.dither,
            return_attention_mask=bool(extractor.return_attention_mask),
        )

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """``chunk_length`` seconds (``n_samples``) from the start."""
        return ClipWindow(int(extractor.n_samples), True)

    @property
    def window_samples(self) -> int:
        return self.n_samples

    @property
    def num_frames(self) -> int:
        return self.n_samples // self.hop_length

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        batch = waveforms.shape[0]
        clipped = np.minimum(host_lengths, self.n_samples)
        source, content_lengths = waveforms, clipped
        if self.dither != 0.0 and generator is not None:
            # Dither is noise: drawn in training only (from its generator). The noise covers the padding too,
            # so every frame is computed.
            signal = waveforms.new_full((batch, self.n_samples), self.padding_value)
            for row, length in enumerate(clipped.tolist()):
                signal[row, :length] = waveforms[row, :length]
            noise = torch.randn(
                signal.shape, generator=generator, dtype=signal.dtype, device=generator.device
            )
            source = signal + self.dither * noise.to(waveforms.device)
            content_lengths = np.full_like(clipped, self.n_samples)
        signal_lengths = np.full_like(clipped, self.n_samples)
        audible = audible_frame_counts(content_lengths, signal_lengths, self.n_fft, self.hop_length)
        audible = np.minimum(audible, self.num_frames)
        features = waveforms.new_empty(batch, self.num_mel_bins, self.num_frames)
        for chunk in self.chunks(batch, int(audible.max()), waveforms.device):
            self.log_mel(source[chunk], content_lengths[chunk], int(audible[chunk].max()), features[chunk])
        outputs = {"input_features": features}
        if self.return_attention_mask:
            frame_starts = torch.arange(self.num_frames, device=waveforms.device) * self.hop_length
            clipped_on_device = lengths.clamp(max=self.n_samples)
            outputs["attention_mask"] = (frame_starts[None, :] < clipped_on_device[:, None]).to(torch.int32)
        return outputs

    @without_autocast
    def log_mel(
        self, source: torch.Tensor, content_lengths: np.ndarray, frames: int, features: torch.Tensor
    ) -> None:
        """Writes into ``features: (batch, num_mel_bins, num_frames)`` the log-mel, scaled as Whisper expects,
        of the signals ``source[i, :content_lengths[i]]`` padded with ``padding_value`` to ``n_samples``.
        Only the first ``frames`` frames are computed; later ones hold padding only (``frames`` is at least
        each clip's ``audible_frame_counts``) and equal one padding frame, computed once. ``content_lengths:
        (batch,)`` is a NumPy array on the host (it decides the loops that build the signals)."""
        signal_lengths = np.full_like(content_lengths, self.n_samples)
        signal = centered_signal(
            source,
            signal_lengths,
            self.n_fft,
            frames,
            self.hop_length,
            content_lengths=content_lengths,
            padding_value=self.padding_value,
        )
        log_spec = self.frames_to_log10(signal.unfold(1, self.n_fft, self.hop_length))
        peak = log_spec.amax(dim=(1, 2))
        if frames < self.num_frames:
            padding_frame = self.frames_to_log10(source.new_full((self.n_fft,), self.padding_value))
            peak = torch.maximum(peak, padding_frame.max())
        floor = (peak - DYNAMIC_RANGE)[:, None, None]
        features[..., :frames] = torch.maximum(log_spec, floor).add_(OFFSET).div_(SCALE).transpose(1, 2)
        if frames < self.num_frames:
            features[..., frames:] = (
                torch.maximum(padding_frame[None, :, None], floor).add_(OFFSET).div_(SCALE)
            )

    def frames_to_log10(self, frames: torch.Tensor) -> torch.Tensor:
        """``(..., n_fft)`` frames to ``log10(max(mel power, 1e-10))``: ``(..., num_mel_bins)``."""
        spectrum = torch.fft.rfft(frames * self.constant("window", frames))
        mel = mel_power_(spectrum, self.constant("interleaved_mel_filters", frames), self.bands)
        return mel.clamp_(min=LOG_FLOOR).log10_()
