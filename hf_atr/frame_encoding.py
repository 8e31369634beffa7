"""Frame-level entries of a recording: the model's frame embeddings pooled to a resolution, each with its span.

A model converted from a frame-level checkpoint (``PeAudioFrameLevelModel``: ``config.audio_frame_rate`` 25
frames/s) embeds every 40 ms of audio (:meth:`~hf_atr.AtrDualEncoderModel.get_audio_frame_features`). A recording
is read in consecutive windows that start on frame boundaries (the extractor's window for windowed search, 10 s for
PE-Audio), each with :data:`CONTEXT_SECONDS` of audio on either side whose frames are dropped, so that frame ``i``
of the recording covers ``[i / rate, (i + 1) / rate)`` whichever window computed it;
its frames are then pooled ``frames_per_entry`` at a time (:meth:`~hf_atr.windowing.Windowing.frames_per_entry`)
into entries whose ``start`` / ``end`` are at that resolution, not on the window grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .processing_atr import AtrProcessor
from .windowing import Windowing, pool_window_embeddings

CONTEXT_SECONDS = 1.0
"""Audio read on each side of a window (where the recording has it) and whose frames are dropped: a window's edge
frames would otherwise see the cut (the waveform encoder's convolutions read zero padding there) and score
unlike the same frames in the middle of a window."""


@dataclass
class FrameEntries:
    """One recording's entries: ``embeddings: (entries, dim)`` float32 CPU, ``starts`` / ``ends`` in seconds."""

    embeddings: torch.Tensor
    starts: list[float]
    ends: list[float]


def frame_rate_of(model: object) -> float:
    """The model's ``config.audio_frame_rate``.

    Raises:
        ValueError: the model has none (it embeds whole clips only).
    """
    rate = getattr(getattr(model, "config", None), "audio_frame_rate", None)
    if rate is None:
        raise ValueError(
            "frame_seconds needs a model with frame-level audio embeddings (config.audio_frame_rate), e.g. one "
            "converted from a PeAudioFrameLevelModel checkpoint; this model embeds whole windows only."
        )
    return float(rate)


def encode_frame_entries(
    model: torch.nn.Module,
    processor: AtrProcessor,
    waveform: np.ndarray,
    windowing: Windowing,
    *,
    name: str,
    batch_size: int,
    device: torch.device,
) -> FrameEntries:
    """Entries of ``waveform: (samples,)`` at the processor's rate, pooled from the model's frames (see module).

    Call under ``torch.no_grad()`` with the model in eval mode (as :func:`hf_atr.audio_encoding.encode_audio_windows`).

    Args:
        windowing: its ``frame_seconds`` (required) and ``pooling``; its window length bounds one forward pass.
        name: the recording's name in warnings (short last windows padded by the processor).
    """
    frame_rate = frame_rate_of(model)
    rate = processor.sampling_rate
    samples_per_frame = rate / frame_rate
    resolved = windowing.samples(processor.feature_extractor)
    window = len(waveform) if resolved is None else resolved[0]
    # Windows of whole frames, so that every window's first frame starts where the previous one's last ended.
    window = max(1, round(max(1, math.floor(window / samples_per_frame)) * samples_per_frame))
    context = round(round(CONTEXT_SECONDS * frame_rate) * samples_per_frame)
    window_starts = list(range(0, len(waveform), window))
    frames = []
    for first in range(0, len(window_starts), batch_size):
        starts = window_starts[first : first + batch_size]
        reads = [(max(0, start - context), min(len(waveform), start + window + context)) for start in starts]
        inputs = processor(
            audio=[waveform[begin:end] for begin, end in reads],
            audio_names=[f"{name} at {begin / rate:.2f} s" for begin, _ in reads],
            return_tensors="pt",
        )
        embeds, mask = model.get_audio_frame_features(
            **{key: value.to(device) for key, value in inputs.items()}
        )
        for row, row_mask, start, (begin, _) in zip(embeds, mask, starts, reads):
            kept = row[row_mask].float().cpu()
            skip = round((start - begin) / samples_per_frame)
            frames.append(
                kept[skip : skip + math.ceil(min(window, len(waveform) - start) / samples_per_frame)]
            )
    all_frames = torch.cat(frames)
    per_entry = windowing.frames_per_entry(frame_rate)
    normalize = model.scoring_head.normalizes_embeddings
    groups = torch.split(all_frames, per_entry)
    duration = len(waveform) / rate
    return FrameEntries(
        embeddings=torch.stack(
            [pool_window_embeddings(group, windowing.pooling, normalize=normalize) for group in groups]
        ),
        starts=[index * per_entry / frame_rate for index in range(len(groups))],
        ends=[min((index + 1) * per_entry / frame_rate, duration) for index in range(len(groups))],
    )


__all__ = ["CONTEXT_SECONDS", "FrameEntries", "encode_frame_entries", "frame_rate_of"]
