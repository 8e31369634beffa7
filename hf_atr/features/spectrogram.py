"""Batched short-time Fourier building blocks shared by the extractor families (pure torch, any device).

Every function takes a batch of zero-padded waveforms ``(batch, samples)`` with the true length of each
clip, ``lengths: (batch,)``, so clips of different lengths share one kernel call. Arithmetic runs in the
waveforms' dtype (float64 to compare with transformers' NumPy path, float32 for training). Lengths that decide
shapes or loops may be NumPy arrays on the host (:data:`Lengths`): read there, they make the host wait for no
device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

Lengths = torch.Tensor | np.ndarray
"""``(batch,)`` integer lengths or counts: a tensor, or a NumPy array on the host; the functions that take one
return the same kind."""


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
    padded = torch.empty(len(tensors), int(lengths.max()), dtype=dtype)
    for row, tensor in enumerate(tensors):
        padded[row, : tensor.numel()] = tensor
        padded[row, tensor.numel() :] = 0.0
    return padded.to(device), lengths.to(device)


def centered_frame_counts(lengths: Lengths, frame_length: int, hop_length: int) -> Lengths:
    """Frames of a ``center=True`` STFT (``frame_length // 2`` samples of padding at each end): ``(batch,)``."""
    padding = frame_length // 2
    return 1 + (lengths + 2 * padding - frame_length) // hop_length


def audible_frame_counts(
    content_lengths: Lengths, signal_lengths: Lengths, frame_length: int, hop_length: int
) -> Lengths:
    """Frames of a ``center=True`` STFT before the first one whose window holds padding only: ``(batch,)``.

    Clip ``i``'s signal is ``content_lengths[i]`` samples followed by a constant up to ``signal_lengths[i]``.
    Frame ``t`` reads (reflected) positions ``[t hop - frame_length // 2, t hop + frame_length // 2)``: it
    holds only the constant once ``t hop - frame_length // 2 >= content`` and the reflection of the signal's
    end reaches no content (``content + frame_length // 2 < signal``); every such frame is the same. When the
    reflection reaches content, the count is :func:`centered_frame_counts` of the signal (no frame is skipped).
    """
    arrays = np if isinstance(content_lengths, np.ndarray) else torch
    padding = frame_length // 2
    first_silent = (content_lengths + padding + hop_length - 1) // hop_length
    all_frames = centered_frame_counts(signal_lengths, frame_length, hop_length)
    return arrays.where(
        content_lengths + padding < signal_lengths, arrays.minimum(first_silent, all_frames), all_frames
    )


def centered_signal(
    source: torch.Tensor,
    signal_lengths: Lengths,
    frame_length: int,
    frames: int,
    hop_length: int,
    *,
    content_lengths: Lengths | None = None,
    content_periods: Lengths | None = None,
    padding_value: float = 0.0,
) -> torch.Tensor:
    """The reflect-padded signals a ``center=True`` STFT frames, as far as its first ``frames`` frames read.

    Clip ``i``'s signal is ``source[i, :content_lengths[i]]`` followed by ``padding_value`` up to
    ``signal_lengths[i]`` samples (``content_lengths`` default: the signal lengths, i.e. ``source`` holds the
    whole signals); with ``content_periods``, its content is ``source[i, :content_periods[i]]`` repeated
    (the last repeat cut) up to ``content_lengths[i]``. It is reflected by ``frame_length // 2`` samples at
    both of ITS OWN ends
    (``np.pad(mode="reflect")``). Only the samples the first ``frames`` frames read are written: the
    signals are built once, in the buffer that is framed, and padding that feeds no computed frame is
    never materialised.

    Returns:
        ``(batch, (frames - 1) * hop_length + frame_length)``; ``unfold(1, frame_length, hop_length)`` gives
        the frames. Samples past a clip's own reflected end are zeros (they feed none of its frames).

    Raises:
        ValueError: a signal not longer than ``frame_length // 2`` (it cannot be reflected).
    """
    padding = frame_length // 2
    shortest = int(signal_lengths.min())
    if shortest <= padding:
        raise ValueError(
            f"Reflect padding by {padding} samples needs clips longer than {padding} samples, got {shortest}."
        )
    if content_lengths is None:
        content_lengths = signal_lengths
    samples = (frames - 1) * hop_length + frame_length
    # Room for the left reflection's source (signal positions 1..padding) even when one frame is asked for.
    buffer = source.new_empty(source.shape[0], max(samples, 2 * padding + 1))
    room = buffer.shape[1] - padding
    periods = content_lengths if content_periods is None else content_periods
    rows = zip(content_lengths.tolist(), signal_lengths.tolist(), periods.tolist())
    for row, (content, signal, period) in enumerate(rows):
        written = min(content, signal, room)
        tiles = written // period if period < written else 0
        if tiles > 0:
            tiled = buffer[row, padding : padding + tiles * period].view(tiles, period)
            tiled.copy_(source[row, :period].expand(tiles, period))
        buffer[row, padding + tiles * period : padding + written] = source[row, : written - tiles * period]
        buffer[row, padding + written : padding + min(signal, room)] = padding_value
        # Right end: x[S-2], x[S-3], ..., x[S-1-padding] after the last sample x[S-1]; then zeros.
        reflected = min(padding, room - signal)
        if reflected > 0:
            end = padding + signal
            buffer[row, end : end + reflected] = buffer[row, end - 1 - reflected : end - 1].flip(-1)
            buffer[row, end + reflected :] = 0.0
    # Left end: x[padding], ..., x[1] (the first sample is the mirror axis, not repeated).
    buffer[:, :padding] = buffer[:, padding + 1 : 2 * padding + 1].flip(-1)
    return buffer[:, :samples]


def power_to_db_(power: torch.Tensor, floor: float) -> torch.Tensor:
    """In place, ``10 log10(max(power, floor))``: decibels relative to 1 (``audio_utils.power_to_db``,
    reference 1)."""
    return power.clamp_(min=floor).log10_().mul_(10.0)


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


def mel_power_(
    spectrum: torch.Tensor, interleaved_filters: torch.Tensor, bands: Sequence[FilterBand]
) -> torch.Tensor:
    """``|spectrum|^2 @ filters``: ``(..., fft_bins)`` complex -> ``(..., num_filters)`` in the filters' dtype.

    ``interleaved_filters`` is :func:`interleave_bins` of the ``(bins, filters)`` filterbank: the squares of
    the real and imaginary parts, side by side as ``view_as_real`` lays them out, are projected directly
    (no separate sum of the two). Overwrites ``spectrum`` with those squares when their dtypes agree;
    otherwise (a float64 FFT feeding float32 filters) the parts are cast first.
    """
    parts = torch.view_as_real(spectrum[..., : used_bins(bands)])
    parts = parts.to(interleaved_filters.dtype) if parts.dtype != interleaved_filters.dtype else parts
    squares = parts.square_().flatten(-2)
    return apply_filter_bands(squares, interleaved_filters, [(a, b, 2 * c, 2 * d) for a, b, c, d in bands])


def interleave_bins(filters: np.ndarray) -> np.ndarray:
    """``(bins, filters) -> (2 bins, filters)``: each bin's row twice, for the (real, imaginary) squares."""
    return np.repeat(filters, 2, axis=0)
