"""PE-Audio's raw-waveform front end (``PeAudioFeatureExtractor``), batched in torch on any device.

The extractor computes no spectrogram: it reflect-pads each clip at its end to the next multiple of its hop
(1920 samples at 48 kHz, one encoder frame per 40 ms), counts that reflection as valid audio, then zero-pads
(``padding_value``) every clip to the batch's longest and marks those samples invalid in ``padding_mask``.
A 30,000-sample clip becomes 30,720 valid samples. The model reads ``input_values: (batch, 1, samples)`` and
``padding_mask: (batch, samples)``; the twin builds both on the waveforms' device from their lengths, so a
:class:`~hf_atr.training.waveform_collator.WaveformCollator` batch needs nothing but its waveforms and lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .base import BatchedFeatureExtractor, ClipWindow

RAW_WAVEFORM_WINDOW_SECONDS = 10.0
"""Window of windowed search for an extractor that passes whole waveforms to the model (PE-Audio's): about the
windows of AST (10.24 s) and CLAP (10 s), so that a long recording is never one forward pass of attention over
all its frames (an hour is 90,000 PE-Audio frames). hf-atr's choice, not the checkpoint's; rounded down to a
multiple of the extractor's hop."""


def reflect_indices(positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The sample each of ``positions: (batch, k)`` reads when clip ``i`` of ``lengths: (batch,)`` is reflected at
    its end without repeating the edge sample, as ``numpy.pad(mode="reflect")`` does: repeatedly where the
    padding exceeds the clip (period ``2 (length - 1)``; a one-sample clip repeats its sample). Positions inside
    a clip read themselves."""
    last = (lengths - 1)[:, None]
    period = (2 * last).clamp(min=1)
    folded = positions % period
    return torch.where(folded > last, period - folded, folded)


class PeAudioWaveformFeatures(BatchedFeatureExtractor):
    """Batched ``PeAudioFeatureExtractor``: ``input_values: (batch, 1, samples)`` and ``padding_mask: (batch,
    samples)`` int32, ``samples`` the longest clip rounded up to a multiple of ``hop_length``.

    Args:
        sampling_rate: the extractor's rate (48 kHz for ``facebook/pe-av-*``).
        hop_length: samples per encoder frame (1920); each clip is reflect-padded to a multiple of it.
        padding_value: the value of the samples after a clip's reflection (marked invalid).
    """

    model_input_names = ("input_values", "padding_mask")

    def __init__(self, *, sampling_rate: int, hop_length: int, padding_value: float) -> None:
        super().__init__(sampling_rate)
        if hop_length < 1:
            raise ValueError(f"hop_length must be a positive number of samples, got {hop_length!r}.")
        self.hop_length = hop_length
        self.padding_value = padding_value

    @classmethod
    def from_extractor(cls, extractor: Any) -> PeAudioWaveformFeatures:
        """Copy a ``PeAudioFeatureExtractor``'s rate, hop and padding value (mono only, as the extractor)."""
        if int(extractor.feature_size) != 1:
            raise ValueError(
                f"PeAudioFeatureExtractor with feature_size={extractor.feature_size} has no batched twin: "
                "the extractor itself reads mono audio only."
            )
        return cls(
            sampling_rate=int(extractor.sampling_rate),
            hop_length=int(extractor.hop_length),
            padding_value=float(extractor.padding_value),
        )

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """The whole waveform reaches the model (reflect-padded to a multiple of its hop); the window is
        :data:`RAW_WAVEFORM_WINDOW_SECONDS`, used only by windowed search."""
        hop = int(extractor.hop_length)
        return ClipWindow(int(RAW_WAVEFORM_WINDOW_SECONDS * int(extractor.sampling_rate)) // hop * hop, False)

    def valid_lengths(self, lengths: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """``(batch,)`` samples each clip fills once reflect-padded: ``lengths`` rounded up to the hop (a tensor
        for a tensor, a NumPy array for a NumPy array)."""
        return -(-lengths // self.hop_length) * self.hop_length

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        valid = self.valid_lengths(lengths)
        width = int(self.valid_lengths(host_lengths).max())
        padding_mask = torch.arange(width, device=waveforms.device)[None, :] < valid[:, None]
        # Room after the batch's longest clip for every clip's tail (below), so that no index is cut.
        values = waveforms.new_full((waveforms.shape[0], width + self.hop_length - 1), self.padding_value)
        kept = min(width, waveforms.shape[1])
        values[:, :kept] = waveforms[:, :kept]
        values[:, :width].masked_fill_(~padding_mask, self.padding_value)
        # Only the last hop of a clip is reflected: the (batch, hop - 1) positions after its end are written, each
        # its reflection where it is valid and padding past that; no mask selects them (a read of the device).
        tail = lengths[:, None] + torch.arange(self.hop_length - 1, device=waveforms.device)[None, :]
        reflection = waveforms.gather(1, reflect_indices(tail, lengths))
        values.scatter_(1, tail, torch.where(tail < valid[:, None], reflection, self.padding_value))
        return {"input_values": values[:, None, :width], "padding_mask": padding_mask.to(torch.int32)}


__all__ = ["PeAudioWaveformFeatures", "reflect_indices"]
