"""Batched short-time Fourier building blocks shared by the extractor families (pure torch, any device).

Every function takes a batch of zero-padded waveforms ``(batch, samples)`` with the true length of each
clip, ``lengths: (batch,)``, so clips of different lengths share one kernel call. Arithmetic runs in the
waveforms' dtype (float64 to compare with transformers' NumPy path, float32 for training).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def pad_waveforms(
    waveforms: Sequence[np.ndarray | torch.Tensor],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D waveforms of different lengths into ``(batch, max_samples)`` zeros-padded + ``lengths: (batch,)``.

    Raises:
        ValueError: an empty batch, or a waveform that is not 1-D or has no samples (named by its index).
    """
    if len(waveforms) == 0:
        raise ValueError("pad_waveforms got an empty batch.")
    tensors = []
    for index, waveform in enumerate(waveforms):
        tensor = torch.as_tensor(waveform)
        if tensor.ndim != 1 or tensor.numel() == 0:
            raise ValueError(
                f"Waveform {index} must be a non-empty 1-D (samples,) array, got shape {tuple(tensor.shape)}."
            )
        tensors.append(tensor)
    lengths = torch.tensor([tensor.numel() for tensor in tensors], dtype=torch.long)
    padded = torch.zeros(len(tensors), int(lengths.max()), dtype=dtype)
    for row, tensor in enumerate(tensors):
        padded[row, : tensor.numel()] = tensor.to(dtype)
    return padded.to(device), lengths.to(device)


def centered_frame_counts(lengths: torch.Tensor, frame_length: int, hop_length: int) -> torch.Tensor:
    """Frames of a ``center=True`` STFT (``frame_length // 2`` samples of padding at each end): ``(batch,)``."""
    padding = frame_length // 2
    return 1 + torch.div(lengths + 2 * padding - frame_length, hop_length, rounding_mode="floor")


def reflect_pad_ends(waveforms: torch.Tensor, lengths: torch.Tensor | None, padding: int) -> torch.Tensor:
    """Reflect-pad every clip by ``padding`` samples at both of ITS OWN ends (``np.pad(mode="reflect")``).

    Args:
        waveforms: ``(batch, samples)``, zero-padded after each clip's end.
        lengths: ``(batch,)`` true lengths, each larger than ``padding``; ``None`` when all fill ``samples``.

    Returns:
        ``(batch, samples + 2 * padding)``: clip ``i`` occupies ``[0, lengths[i] + 2 * padding)``; what lies
        beyond feeds no frame of that clip.
    """
    batch, samples = waveforms.shape
    shortest = samples if lengths is None else int(lengths.min())
    if shortest <= padding:
        raise ValueError(
            f"Reflect padding by {padding} samples needs clips longer than {padding} samples, got {shortest}."
        )
    padded = waveforms.new_empty(batch, samples + 2 * padding)
    padded[:, padding : padding + samples] = waveforms
    # Left end: x[padding], ..., x[1] (the first sample is the mirror axis, not repeated).
    padded[:, :padding] = waveforms[:, 1 : padding + 1].flip(-1)
    if lengths is None:
        padded[:, padding + samples :] = waveforms[:, samples - padding - 1 : samples - 1].flip(-1)
        return padded
    padded[:, padding + samples :] = 0.0
    # Right end of clip i: x[len-2], x[len-3], ..., x[len-1-padding], written after its last sample.
    offsets = torch.arange(1, padding + 1, device=waveforms.device)
    source = lengths[:, None] - 1 - offsets[None, :]
    target = lengths[:, None] + padding - 1 + offsets[None, :]
    padded.scatter_(1, target, waveforms.gather(1, source))
    return padded


def centered_frames(
    waveforms: torch.Tensor, lengths: torch.Tensor | None, frame_length: int, hop_length: int
) -> torch.Tensor:
    """Frames of a ``center=True`` STFT (reflect padding, as librosa / transformers / ``torch.stft``).

    Args:
        waveforms: ``(batch, samples)``.
        lengths: ``(batch,)`` true lengths; ``None`` when every clip fills ``samples``. With lengths, each
            clip is reflected at its own end, so its frames equal those of the clip framed alone.

    Returns:
        A ``(batch, frames, frame_length)`` view, ``frames`` that of the longest clip; frames past a clip's
        own :func:`centered_frame_counts` are meaningless and must be ignored by the caller.
    """
    padding = frame_length // 2
    padded = reflect_pad_ends(waveforms, lengths, padding)
    if lengths is not None:
        padded = padded[:, : int(lengths.max()) + 2 * padding]
    return padded.unfold(1, frame_length, hop_length)


def frame_power(frames: torch.Tensor, window: torch.Tensor, bins: int | None = None) -> torch.Tensor:
    """``|rfft(frame * window)|^2`` of ``frames: (..., frame_length)`` for the first ``bins`` frequencies
    (default all ``frame_length // 2 + 1``): ``(..., bins)``."""
    spectrum = torch.fft.rfft(frames * window)[..., :bins]
    squares = torch.view_as_real(spectrum).square_()
    return squares[..., 0] + squares[..., 1]


def power_to_db(power: torch.Tensor, floor: float) -> torch.Tensor:
    """``10 log10(max(power, floor))``: decibels relative to 1 (``audio_utils.power_to_db``, reference 1)."""
    return 10.0 * torch.log10(power.clamp(min=floor))


def linear_resize_time(features: torch.Tensor, lengths: torch.Tensor, size: int) -> torch.Tensor:
    """Resample each clip's first ``lengths[i]`` frames to ``size`` frames by linear interpolation.

    Equal to ``F.interpolate(x[None, None], size=(size, bins), mode="bilinear", align_corners=False)`` on
    each float32 clip alone (the frequency axis keeps its size, so only time is interpolated), which CLAP's
    fusion uses to shrink a whole clip into one chunk. The source positions are computed in float32 as
    that kernel computes them for float32 input, whatever the dtype of ``features``: a position off by one
    float32 rounding moves a value by up to 1e-3 dB between frames 40 dB apart.

    Args:
        features: ``(batch, frames, bins)``.
        lengths: ``(batch,)`` valid frames per clip.

    Returns:
        ``(batch, size, bins)``.
    """
    scale = lengths.to(torch.float32)[:, None] / size
    positions = torch.arange(size, device=features.device, dtype=torch.float32)[None, :]
    source = ((positions + 0.5) * scale - 0.5).clamp(min=0)
    lower = torch.minimum(source.long(), lengths[:, None] - 1)
    fraction = (source - lower.to(torch.float32)).clamp(0, 1).to(features.dtype)[..., None]
    upper = torch.minimum(lower + 1, lengths[:, None] - 1)
    bins = features.shape[-1]
    lower_rows = features.gather(1, lower[..., None].expand(-1, -1, bins))
    upper_rows = features.gather(1, upper[..., None].expand(-1, -1, bins))
    return (1 - fraction) * lower_rows + fraction * upper_rows


FilterBand = tuple[int, int, int, int]
"""``(first_filter, end_filter, first_bin, end_bin)``: a group of filters and the bins they read."""

FILTERS_PER_BAND = 16


def filter_bands(filters: np.ndarray) -> tuple[FilterBand, ...]:
    """Split a ``(bins, filters)`` filterbank into groups of about :data:`FILTERS_PER_BAND` adjacent filters,
    each with the range of bins where any of them is non-zero.

    Mel filters are narrow triangles, so each group reads a small slice of the spectrum: projecting group
    by group skips the zeros of the dense matrix (a few times fewer multiplications) and never reads bins
    no filter covers (CLAP's above 14 kHz). The sums are those of the dense product minus exact zeros.
    """
    num_filters = filters.shape[1]
    groups = max(1, min(8, num_filters // FILTERS_PER_BAND))
    edges = np.linspace(0, num_filters, groups + 1).round().astype(int)
    bands = []
    for start, end in zip(edges[:-1], edges[1:]):
        used_bins = np.flatnonzero(np.abs(filters[:, start:end]).sum(axis=1))
        if used_bins.size == 0:
            used_bins = np.array([0])
        bands.append((int(start), int(end), int(used_bins[0]), int(used_bins[-1]) + 1))
    return tuple(bands)


def apply_filter_bands(
    spectrum: torch.Tensor, filters: torch.Tensor, bands: Sequence[FilterBand]
) -> torch.Tensor:
    """``spectrum @ filters`` computed band by band: ``(..., bins) -> (..., filters)``."""
    return torch.cat(
        [
            spectrum[..., first_bin:end_bin] @ filters[first_bin:end_bin, start:end]
            for start, end, first_bin, end_bin in bands
        ],
        dim=-1,
    )


def used_bins(bands: Sequence[FilterBand]) -> int:
    """Number of leading frequency bins any band reads (later bins need no power computed)."""
    return max(end_bin for _, _, _, end_bin in bands)
