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
distributions, drawn from torch's stream. Those draws are training augmentation (LAION-CLAP's). Without a
random source the choices are fixed (:meth:`ClapLogMelFeatures.fixed_choices`), hf-atr's rule at inference:
a rand_trunc clip keeps its head; a fused clip's crops start at the first start of the front third, the
middle one of the middle third and the last one of the back third (head, centre, tail: starts the extractor
could draw); ``is_longer`` marks exactly the clips longer than the window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from transformers.audio_utils import window_function

from .base import ClipWindow, RandomSource
from .decibel_mel import DecibelMelFeatures
from .spectrogram import Lengths, linear_resize_time

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

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """``max_length_s`` seconds; ``rand_trunc`` cuts a longer clip to its head at inference (its random crop is
        training's, :mod:`hf_atr.long_clips`), ``fusion`` reads it whole (the window is then only the length of the
        chunks windowed search uses)."""
        return ClipWindow(int(extractor.nb_max_samples), extractor.truncation != "fusion")

    @property
    def window_samples(self) -> int | None:
        """``max_length`` for rand_trunc (whose crop is a random window); fusion needs the whole clip."""
        return self.max_length if self.truncation == "rand_trunc" else None

    @property
    def random_window(self) -> bool:
        """rand_trunc crops a longer clip at a random offset in training (its head at inference)."""
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
        (batch, 3)`` (fusion) in frames, zero where nothing is drawn. Without ``random_source``, the
        :meth:`fixed_choices`.

        ``source_lengths`` (rand_trunc): lengths before a crop to ``max_length`` made elsewhere, so that such
        a clip is still ``is_longer``.
        """
        if random_source is None:
            return self.fixed_choices(lengths, source_lengths=source_lengths)
        draw = _uniform_draw(random_source)
        choices = self._choices(lengths, source_lengths, lambda third, _: draw(third))
        if self.truncation == "fusion" and not bool(choices["is_longer"].any()):
            # LAION-CLAP marks one clip of a batch without long clips, so that its fusion layers always train.
            choices["is_longer"][draw(np.arange(len(lengths)))] = True
        return choices

    def fixed_choices(
        self, lengths: torch.Tensor, *, source_lengths: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The choices at inference, the same on every call and whatever the rest of the batch: rand_trunc keeps
        the head of a longer clip (offset 0); a fused clip's three crops start at the first start of the front
        third, the middle start of the middle third and the last start of the back third (head, centre, tail);
        ``is_longer`` is true exactly for the clips longer than the window (fused, or cut by rand_trunc).
        Same layout as :meth:`draw_random_choices`."""

        def pick(third: np.ndarray, crop: int) -> int:
            return int(third[(0, (len(third) - 1) // 2, len(third) - 1)[crop]])

        return self._choices(lengths, source_lengths, pick)

    def _choices(
        self,
        lengths: torch.Tensor,
        source_lengths: torch.Tensor | None,
        pick: Callable[[np.ndarray, int], int],
    ) -> dict[str, torch.Tensor]:
        """The choices with ``pick(starts, crop)`` choosing one element of the 1-D array ``starts`` for crop
        ``crop`` (0 for rand_trunc's only crop; 0, 1, 2 for fusion's front, middle, back), clip by clip in the
        extractor's order; ``is_longer`` as the clips' lengths say."""
        lengths = lengths.cpu()
        batch = lengths.shape[0]
        if self.truncation == "rand_trunc":
            offsets = torch.zeros(batch, dtype=torch.long)
            for index, length in enumerate(lengths.tolist()):
                if length > self.max_length:
                    offsets[index] = pick(np.arange(length - self.max_length + 1), 0)
            longer = (lengths if source_lengths is None else source_lengths.cpu()) > self.max_length
            return {"crop_offsets": offsets, "is_longer": longer}
        fused = self.fused(lengths)
        starts = torch.zeros(batch, FUSION_CROPS, dtype=torch.long)
        for index, frames in enumerate(self.frame_counts(lengths).tolist()):
            if fused[index]:
                thirds = np.array_split(np.arange(frames - self.chunk_frames + 1), FUSION_CROPS)
                # transformers replaces an empty middle or back third by [0] (the first chunk).
                starts[index] = torch.tensor(
                    [
                        pick(third if third.size else np.zeros(1, int), crop)
                        for crop, third in enumerate(thirds)
                    ]
                )
        return {"fusion_starts": starts, "is_longer": fused.clone()}

    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        signal_lengths = self.signal_lengths(host_lengths)
        frames = self.frame_counts(signal_lengths)
        mel = waveforms.new_empty(len(host_lengths), int(frames.max()), self.num_mel_bins)
        if "crop_offsets" in random_choices:
            waveforms = self.cropped(waveforms, lengths, random_choices["crop_offsets"])
        content_lengths = self.content_lengths(host_lengths)
        for chunk in self.chunks(len(host_lengths), mel.shape[1], waveforms.device):
            # Short clips are repeated (content_periods) straight into the framed buffer.
            chunk_mel = self.log_mel(
                waveforms[chunk],
                signal_lengths[chunk],
                content_lengths=content_lengths[chunk],
                content_periods=host_lengths[chunk],
            )
            mel[chunk, : chunk_mel.shape[1]] = chunk_mel
        is_longer = random_choices["is_longer"].to(torch.bool)[:, None]
        if self.truncation == "rand_trunc":
            return {"input_features": mel[:, None, : self.chunk_frames], "is_longer": is_longer}
        return {
            "input_features": self.fuse(mel, frames, random_choices["fusion_starts"]),
            "is_longer": is_longer,
        }

    def signal_lengths(self, lengths: Lengths) -> Lengths:
        """Length of the waveform each clip's mel is taken from: ``(batch,)`` (a tensor for a tensor, NumPy for
        NumPy)."""
        arrays = np if isinstance(lengths, np.ndarray) else torch
        if self.truncation == "fusion":
            return arrays.maximum(lengths, arrays.full_like(lengths, self.max_length))
        return arrays.full_like(lengths, self.max_length)

    def content_lengths(self, lengths: Lengths) -> Lengths:
        """Samples of each clip's signal that come from the clip (whole, cropped or repeated); zeros follow
        up to :meth:`signal_lengths`: ``(batch,)`` (a tensor for a tensor, NumPy for NumPy)."""
        arrays = np if isinstance(lengths, np.ndarray) else torch
        longer = lengths > self.max_length
        if self.padding == "repeat":
            shorter_content = arrays.full_like(lengths, self.max_length)
        elif self.padding == "repeatpad":
            shorter_content = self.max_length // lengths * lengths
        else:
            shorter_content = lengths
        longer_content = (
            lengths if self.truncation == "fusion" else arrays.full_like(lengths, self.max_length)
        )
        return arrays.where(longer, longer_content, shorter_content)

    def cropped(
        self, waveforms: torch.Tensor, lengths: torch.Tensor, crop_offsets: torch.Tensor
    ) -> torch.Tensor:
        """The first ``max_length`` samples of each row's signal: a longer clip's rand_trunc crop (from
        ``crop_offsets``), a shorter clip's start; ``(batch, min(max_length, samples))``. Gathered on the device,
        with no read of which clips are cropped; rand_trunc's signals never read past ``max_length``."""
        window = min(self.max_length, waveforms.shape[1])
        offsets = torch.where(lengths > self.max_length, crop_offsets.to(lengths.dtype), 0)
        positions = offsets[:, None] + torch.arange(window, device=waveforms.device)[None, :]
        return waveforms.gather(1, positions)

    def fuse(self, mel: torch.Tensor, frames: np.ndarray, starts: torch.Tensor) -> torch.Tensor:
        """Fusion stack ``(batch, 4, chunk_frames, feature_size)``: fused clips get (shrunk whole, front,
        middle, back crop), the others four copies of their mel. ``frames: (batch,)`` NumPy on the host, each
        clip's mel frames (which clips are fused is read there, not on the device)."""
        chunk = self.chunk_frames
        stack = mel[:, None, :chunk].repeat(1, 1 + FUSION_CROPS, 1, 1)
        fused_rows = np.flatnonzero(frames > chunk)
        if fused_rows.size > 0:
            fused = torch.from_numpy(fused_rows).to(mel.device, non_blocking=True)
            fused_frames = torch.from_numpy(frames[fused_rows]).to(mel.device, non_blocking=True)
            clips, bins = mel[fused], mel.shape[-1]
            window = starts[fused, :, None] + torch.arange(chunk, device=mel.device)  # (fused, 3, chunk)
            crops = clips.gather(1, window.reshape(len(fused), -1, 1).expand(-1, -1, bins))
            stack[fused, 1:] = crops.reshape(len(fused), FUSION_CROPS, chunk, bins)
            stack[fused, 0] = linear_resize_time(clips, fused_frames, chunk)
        return stack


def _uniform_draw(random_source: RandomSource):
    """``draw(values)``: one element of the 1-D array ``values``, uniformly, from ``random_source``."""
    if isinstance(random_source, np.random.RandomState):
        # np.random.choice(values) and np.random.randint(0, n), the extractor's two calls, both draw
        # randint(0, len(values)) from the stream.
        return lambda values: int(values[random_source.randint(0, len(values))])
    return lambda values: int(values[int(torch.randint(len(values), (), generator=random_source))])
