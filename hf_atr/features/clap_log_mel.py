"""HTS-AT log-mel spectrogram of ``ClapFeatureExtractor`` (dB), batched in torch, with its crops and padding.

Per clip, transformers' extractor (``_get_input_mel``) does, with ``max_length = max_length_s *
sampling_rate`` samples and ``chunk_frames = max_length // hop_length + 1``:

- clip longer than ``max_length``, ``truncation="rand_trunc"``: a random ``max_length`` crop (offset
  uniform in ``[0, length - max_length]``), mel with the Slaney filterbank, ``is_longer`` true;
- clip longer, ``truncation="fusion"``: mel of the whole clip (HTK filterbank); if it has more than
  ``chunk_frames`` frames, a stack of the whole mel shrunk to ``chunk_frames`` frames (bilinear) and three
  ``chunk_frames`` crops, one drawn uniformly from each third of the possible starts
  (``np.array_split``), ``is_longer`` true; otherwise four copies of the mel;
- shorter clip: ``padding="repeatpad"`` repeats it ``max_length // length`` times then zero-pads,
  ``"repeat"`` repeats it and cuts at ``max_length``, ``"pad"`` zero-pads; mel (HTK for fusion, four
  copies; Slaney for rand_trunc, one).

The mel is ``10 log10(max(mel, 1e-10))`` of a centred (reflect-padded) periodic-Hann STFT power. With
``truncation="fusion"``, a batch where no clip is longer gets ``is_longer`` true for one clip drawn
uniformly. The extractor's ``top_db`` setting is not applied by transformers and is not applied here.
Departure: transformers' shrink hard-codes 64 mel bins (other sizes fail there); here the mel axis keeps
``feature_size`` bins, which is the same for 64.

Random choices are drawn by :meth:`ClapLogMelFeatures.draw_random_choices`, in the extractor's order
(clip by clip: one offset per cropped clip, or three fusion starts per fused clip; then the forced
``is_longer`` clip). With a ``np.random.RandomState`` seeded like ``np.random`` before the extractor's
call, they are the extractor's choices exactly; with a ``torch.Generator`` they have the same
distributions, drawn from torch's stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.audio_utils import window_function

from .base import RandomSource
from .decibel_mel import DecibelMelFeatures
from .spectrogram import linear_resize_time

WINDOW = "hann"
POWER_FLOOR = 1e-10
"""Floor of the mel power before decibels (-100 dB), as transformers' ``spectrogram(..., log_mel="dB")``."""
TRUNCATIONS = ("fusion", "rand_trunc")
PADDINGS = ("repeatpad", "repeat", "pad")
FUSION_CROPS = 3
"""Crops taken from a long clip in fusion mode (front, middle, back thirds), besides the shrunk whole."""


class ClapLogMelFeatures(DecibelMelFeatures):
    """Batched ``ClapFeatureExtractor``: ``input_features: (batch, 4 | 1, chunk_frames, feature_size)``
    (four for ``truncation="fusion"``, one for ``"rand_trunc"``) and ``is_longer: (batch, 1)`` bool."""

    model_input_names = ("input_features", "is_longer")

    def __init__(
        self,
        *,
        sampling_rate: int,
        mel_filters: Any,
        mel_filters_slaney: Any,
        fft_window_size: int,
        hop_length: int,
        max_length: int,
        truncation: str,
        padding: str,
    ) -> None:
        if truncation not in TRUNCATIONS:
            raise ValueError(
                f"ClapFeatureExtractor truncation must be one of {TRUNCATIONS}, got {truncation!r}."
            )
        if padding not in PADDINGS:
            raise ValueError(f"ClapFeatureExtractor padding must be one of {PADDINGS}, got {padding!r}.")
        # Fusion reads the HTK filterbank, rand_trunc the Slaney one (transformers' choice, after the
        # original implementation).
        super().__init__(
            sampling_rate,
            mel_filters=mel_filters if truncation == "fusion" else mel_filters_slaney,
            window=window_function(fft_window_size, WINDOW),
            hop_length=hop_length,
            power_floor=POWER_FLOOR,
        )
        self.max_length = max_length
        self.truncation = truncation
        self.padding = padding
        self.chunk_frames = max_length // hop_length + 1

    @classmethod
    def from_extractor(cls, extractor: Any) -> ClapLogMelFeatures:
        """Copy a ``ClapFeatureExtractor``'s settings and both filterbanks."""
        return cls(
            sampling_rate=extractor.sampling_rate,
            mel_filters=extractor.mel_filters,
            mel_filters_slaney=extractor.mel_filters_slaney,
            fft_window_size=extractor.fft_window_size,
            hop_length=extractor.hop_length,
            max_length=extractor.nb_max_samples,
            truncation=extractor.truncation,
            padding=extractor.padding,
        )

    @property
    def window_samples(self) -> int | None:
        """``max_length`` for rand_trunc (whose crop is a random window); fusion needs the whole clip."""
        return self.max_length if self.truncation == "rand_trunc" else None

    @property
    def random_window(self) -> bool:
        return self.truncation == "rand_trunc"

    def fused(self, lengths: torch.Tensor) -> torch.Tensor:
        """Which clips fusion turns into (shrunk whole, three crops): ``(batch,)`` bool."""
        return (lengths > self.max_length) & (self.frame_counts(lengths) > self.chunk_frames)

    def draw_random_choices(
        self,
        lengths: torch.Tensor,
        random_source: RandomSource = None,
        *,
        source_lengths: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """``is_longer: (batch,)`` bool, and ``crop_offsets: (batch,)`` (rand_trunc) or ``fusion_starts:
        (batch, 3)`` (fusion) in frames, zero where nothing is drawn.

        ``source_lengths`` (rand_trunc): lengths before a crop to ``max_length`` made elsewhere, so that such
        a clip is still ``is_longer``.
        """
        lengths = lengths.cpu()
        draw = _uniform_draw(random_source)
        batch = lengths.shape[0]
        if self.truncation == "rand_trunc":
            offsets = torch.zeros(batch, dtype=torch.long)
            for index, length in enumerate(lengths.tolist()):
                if length > self.max_length:
                    offsets[index] = draw(np.arange(length - self.max_length + 1))
            longer = (lengths if source_lengths is None else source_lengths.cpu()) > self.max_length
            return {"crop_offsets": offsets, "is_longer": longer}
        fused = self.fused(lengths)
        starts = torch.zeros(batch, FUSION_CROPS, dtype=torch.long)
        for index, frames in enumerate(self.frame_counts(lengths).tolist()):
            if fused[index]:
                thirds = np.array_split(np.arange(frames - self.chunk_frames + 1), FUSION_CROPS)
                # transformers replaces an empty middle or back third by [0] (the first chunk).
                starts[index] = torch.tensor(
                    [draw(third if third.size else np.zeros(1, int)) for third in thirds]
                )
        longer = fused.clone()
        if not bool(longer.any()):
            longer[draw(np.arange(batch))] = True
        return {"fusion_starts": starts, "is_longer": longer}

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        signal_lengths = self.signal_lengths(lengths)
        frames = self.frame_counts(signal_lengths)
        mel = waveforms.new_empty(len(lengths), int(frames.max()), self.num_mel_bins)
        crop_offsets = random_choices.get("crop_offsets", torch.zeros_like(lengths))
        for chunk in self.chunks(len(lengths), mel.shape[1], waveforms.device):
            signal = self.model_signal(waveforms[chunk], lengths[chunk], crop_offsets[chunk])
            uniform = bool((signal_lengths[chunk] == signal.shape[1]).all())
            chunk_mel = self.log_mel(signal, None if uniform else signal_lengths[chunk])
            mel[chunk, : chunk_mel.shape[1]] = chunk_mel
        is_longer = random_choices["is_longer"].to(torch.bool)[:, None]
        if self.truncation == "rand_trunc":
            return {"input_features": mel[:, None, : self.chunk_frames], "is_longer": is_longer}
        return {
            "input_features": self.fuse(mel, frames, random_choices["fusion_starts"]),
            "is_longer": is_longer,
        }

    def signal_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Length of the waveform each clip's mel is taken from (:meth:`model_signal`): ``(batch,)``."""
        if self.truncation == "fusion":
            return lengths.clamp(min=self.max_length)
        return torch.full_like(lengths, self.max_length)

    def model_signal(
        self, waveforms: torch.Tensor, lengths: torch.Tensor, crop_offsets: torch.Tensor
    ) -> torch.Tensor:
        """The waveforms the mels are taken from, zero-padded to ``(batch, max(signal_lengths))``: a crop
        (rand_trunc), the padded clip (short clips) or the whole clip (fusion's long clips)."""
        signal = waveforms.new_zeros(len(lengths), int(self.signal_lengths(lengths).max()))
        for row, (length, offset) in enumerate(zip(lengths.tolist(), crop_offsets.tolist())):
            clip = waveforms[row, :length]
            if length > self.max_length:
                end = length if self.truncation == "fusion" else offset + self.max_length
                signal[row, : end - offset] = clip[offset:end]
            elif self.padding == "repeat":
                signal[row, : self.max_length] = clip.repeat(self.max_length // length + 1)[: self.max_length]
            elif self.padding == "repeatpad":
                repeats = self.max_length // length
                signal[row, : repeats * length] = clip.repeat(repeats)
            else:
                signal[row, :length] = clip
        return signal

    def fuse(self, mel: torch.Tensor, frames: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Fusion stack ``(batch, 4, chunk_frames, feature_size)``: fused clips get (shrunk whole, front,
        middle, back crop), the others four copies of their mel."""
        chunk = self.chunk_frames
        stack = mel[:, None, :chunk].repeat(1, 1 + FUSION_CROPS, 1, 1)
        fused = torch.nonzero(frames > chunk).flatten()
        if fused.numel() > 0:
            clips, bins = mel[fused], mel.shape[-1]
            window = starts[fused, :, None] + torch.arange(chunk, device=mel.device)  # (fused, 3, chunk)
            crops = clips.gather(1, window.reshape(len(fused), -1, 1).expand(-1, -1, bins))
            stack[fused, 1:] = crops.reshape(len(fused), FUSION_CROPS, chunk, bins)
            stack[fused, 0] = linear_resize_time(clips, frames[fused], chunk)
        return stack


def _uniform_draw(random_source: RandomSource):
    """``draw(values)``: one element of the 1-D array ``values``, uniformly, from ``random_source``."""
    if isinstance(random_source, np.random.RandomState):
        # np.random.choice(values) and np.random.randint(0, n), the extractor's two calls, both draw
        # randint(0, len(values)) from the stream.
        return lambda values: int(values[random_source.randint(0, len(values))])
    return lambda values: int(values[int(torch.randint(len(values), (), generator=random_source))])
