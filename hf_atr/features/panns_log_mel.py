"""PANNs log-mel front end (``PannsFeatureExtractor``, torchlibrosa's ``Spectrogram`` + ``LogmelFilterBank``),
batched in torch.

The extractor pads every clip with ``padding_value`` (or cuts it) to ``max_length_samples`` samples, takes a
centred (reflect-padded) STFT with its periodic Hann window and hop, projects the power onto its Slaney mel
filterbank and returns ``10 log10(max(mel, power_floor))`` (reference 1, no ``top_db``) as
``input_features: (batch, 1 + max_length_samples // hop_length, feature_size)``. This is its default
``padding="max_length"``; its ``padding="longest"`` option (pad to the batch's longest clip) has no twin.
The extractor class lives a floor above (``hf_atr.models.panns``), which registers this twin for it; the
settings are read from the instance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .base import ClipWindow
from .decibel_mel import DecibelMelFeatures


class PannsLogMelFeatures(DecibelMelFeatures):
    """Batched ``PannsFeatureExtractor``: ``input_features: (batch, frames, feature_size)`` in dB.

    Args:
        max_length: samples every clip is padded (with ``padding_value``) or cut to.
        padding_value: the padding sample value (0: silence).
        mel_filters, window, hop_length, power_floor: see :class:`DecibelMelFeatures`.
    """

    model_input_names = ("input_features",)

    def __init__(
        self,
        *,
        sampling_rate: int,
        mel_filters: Any,
        window: Any,
        hop_length: int,
        power_floor: float,
        max_length: int,
        padding_value: float,
    ) -> None:
        super().__init__(
            sampling_rate,
            mel_filters=mel_filters,
            window=window,
            hop_length=hop_length,
            power_floor=power_floor,
        )
        self.max_length = max_length
        self.padding_value = padding_value

    @classmethod
    def from_extractor(cls, extractor: Any) -> PannsLogMelFeatures:
        """Copy a ``PannsFeatureExtractor``'s window, filterbank, hop, padding and power floor."""
        return cls(
            sampling_rate=extractor.sampling_rate,
            mel_filters=extractor.mel_filters,
            window=extractor.window,
            hop_length=extractor.hop_length,
            power_floor=extractor.power_floor,
            max_length=extractor.max_length_samples,
            padding_value=extractor.padding_value,
        )

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """``max_length_s`` seconds from the start."""
        return ClipWindow(int(extractor.max_length_samples), True)

    @property
    def window_samples(self) -> int:
        """``max_length``: the extractor cuts clips there."""
        return self.max_length

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        batch = waveforms.shape[0]
        signal_lengths = np.full_like(host_lengths, self.max_length)
        content_lengths = np.minimum(host_lengths, self.max_length)
        frames = self.frame_counts(self.max_length)
        features = waveforms.new_empty(batch, frames, self.num_mel_bins)
        for chunk in self.chunks(batch, frames, waveforms.device):
            features[chunk] = self.log_mel(
                waveforms[chunk],
                signal_lengths[chunk],
                content_lengths=content_lengths[chunk],
                padding_value=self.padding_value,
            )
        return {"input_features": features}
