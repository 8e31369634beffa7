"""Log-mel spectrogram of ``WhisperFeatureExtractor``, batched in torch.

transformers' extractor pads or cuts every clip to ``chunk_length`` seconds (``n_samples``, padding with
``padding_value``), adds ``dither`` Gaussian noise when non-zero, takes a centred (reflect-padded) STFT
with a periodic Hann window of ``n_fft`` and hop ``hop_length``, drops the last frame, projects the power
onto its Slaney mel filterbank, and returns ``(max(log10(max(mel, 1e-10)), peak - 8) + 4) / 4`` with the
peak taken per clip. Both of its paths (NumPy per clip, torch when installed) compute this; here it is one
batched computation on the waveforms' device.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.audio_utils import window_function

from .base import BatchedFeatureExtractor
from .spectrogram import apply_filter_bands, centered_frames, filter_bands, frame_power, used_bins

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
        self.register_array("mel_filters", mel_filters)
        self.register_array("window", window_function(n_fft, WINDOW))
        self.bands = filter_bands(self._arrays["mel_filters"])
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
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        batch = waveforms.shape[0]
        clipped = lengths.clamp(max=self.n_samples)
        signal = waveforms.new_full((batch, self.n_samples), self.padding_value)
        for row, length in enumerate(clipped.tolist()):
            signal[row, :length] = waveforms[row, :length]
        if self.dither != 0.0:
            device = generator.device if generator is not None else waveforms.device
            noise = torch.randn(signal.shape, generator=generator, dtype=signal.dtype, device=device)
            signal = signal + self.dither * noise.to(waveforms.device)
        features = waveforms.new_empty(batch, self._arrays["mel_filters"].shape[1], self.num_frames)
        for chunk in self.chunks(batch, self.num_frames, waveforms.device):
            features[chunk] = self.log_mel(signal[chunk])
        outputs = {"input_features": features}
        if self.return_attention_mask:
            frame_starts = torch.arange(self.num_frames, device=waveforms.device) * self.hop_length
            outputs["attention_mask"] = (frame_starts[None, :] < clipped[:, None]).to(torch.int32)
        return outputs

    def log_mel(self, signal: torch.Tensor) -> torch.Tensor:
        """``(batch, n_samples) -> (batch, num_mel_bins, frames)``, scaled as Whisper expects."""
        frames = centered_frames(signal, None, self.n_fft, self.hop_length)[:, :-1]
        power = frame_power(frames, self.constant("window", signal), used_bins(self.bands))
        mel = apply_filter_bands(power, self.constant("mel_filters", signal), self.bands)
        log_spec = mel.clamp_(min=LOG_FLOOR).log10_().transpose(1, 2)
        peak = log_spec.amax(dim=(1, 2), keepdim=True)
        return (torch.maximum(log_spec, peak - DYNAMIC_RANGE) + OFFSET) / SCALE
