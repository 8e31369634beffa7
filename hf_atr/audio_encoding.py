"""How a model encodes audio: clip by clip or window by window, undecodable clips skipped and named.

:func:`encode_audio_windows` embeds every window of a clip (:mod:`hf_atr.windowing`) with its time span, and
:func:`encode_audio` / :func:`encode_audio_clips` with a :class:`~hf_atr.windowing.Windowing` pool them into one
clip embedding; without one, each clip is one forward pass of what the processor prepares (the model's own
protocol), and the clips the extractor cuts are named in one warning per call. Both evaluators encode their clips
by one protocol, :func:`encode_evaluation_clips` (undecodable clips left out and named in one warning). With
:mod:`hf_atr.encoding` (captions, labels, pairs), the one way a model encodes; :func:`inference` is the
eval-mode, no-gradient block every encoding runs in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .audio_batches import AUDIO_INPUT_NAMES, audio_batch
from .data.audio import decode_audio
from .data.audio_arrays import AudioDecodeError
from .frame_encoding import encode_frame_entries
from .lazy import get_logger
from .processing_atr import AtrProcessor
from .windowing import (
    ExtractorWindow,
    Windowing,
    collect_cut_clips,
    extractor_window,
    pool_window_embeddings,
    window_bounds,
)

logger = get_logger(__name__)

MAX_SKIPPED_NAMED = 5
"""How many undecodable clips an evaluation's warning names (the rest are counted)."""


@contextlib.contextmanager
def inference(model: Any) -> Iterator[torch.device]:
    """Eval mode without gradients inside the block, the model's own train/eval mode restored after it;
    yields the model's device."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield next(model.parameters()).device
    finally:
        model.train(was_training)


def float32_embeddings(embeds: torch.Tensor, model: Any) -> torch.Tensor:
    """``embeds: (..., dim)`` as every encoding returns them: float32 on the CPU, whatever dtype ``model`` computes
    in. Embeddings of a half-precision model that its head scores normalised are normalised again in float32 (unit
    vectors rounded to bfloat16 are off by up to ~0.4 % in norm, which would show as cosines above 1).

    Raises:
        ValueError: non-finite embeddings of a half-precision model (float16's range, up to 65504, is
            exceeded more often than bfloat16's): the message names the dtype and suggests bfloat16 or float32.
    """
    computed_in = embeds.dtype
    embeds = embeds.float().cpu()
    if computed_in == torch.float32:
        return embeds
    if not torch.isfinite(embeds).all():
        raise ValueError(
            f"The model computed non-finite embeddings in {str(computed_in).removeprefix('torch.')} (a value beyond "
            "the dtype's range): load it in bfloat16 (float32's range) or float32 instead."
        )
    if model.scoring_head.normalizes_embeddings:
        embeds = torch.nn.functional.normalize(embeds, dim=-1)
    return embeds


@dataclass
class SkippedAudio:
    """A clip left out of an encoding because it cannot be decoded."""

    index: int
    """Its row in the dataset (or position in the list)."""
    name: str
    """Its ``audio_id``, else its file path, else its position."""
    reason: str
    """Why, as :class:`~hf_atr.data.audio_arrays.AudioDecodeError` words it (``"the audio file is empty (0 bytes)."``)."""


@dataclass
class AudioEmbeddings:
    """Audio embeddings, one row per window (or per clip), with where each row comes from.

    ``embeddings: (entries, dim)`` float32; ``clip_indices: (entries,)`` the dataset row of each entry, in
    increasing order; ``starts`` / ``ends: (entries,)`` float64, the span of the clip each entry read, in
    seconds (``None`` for rows given as precomputed features, whose duration is unknown); ``skipped``: the
    clips that could not be decoded; ``durations``: each encoded clip's length in seconds, by row;
    ``cut_clips``: how many clips the extractor cut to its window (encoded without windows).
    """

    embeddings: torch.Tensor
    clip_indices: torch.Tensor
    starts: torch.Tensor | None
    ends: torch.Tensor | None
    skipped: list[SkippedAudio] = field(default_factory=list)
    durations: dict[int, float] = field(default_factory=dict)
    cut_clips: int = 0

    @property
    def kept_clips(self) -> list[int]:
        """Rows of the encoded clips, in order (every row but the skipped ones)."""
        return torch.unique_consecutive(self.clip_indices).tolist()

    def pooled(self, pooling: str, *, normalize: bool = True) -> torch.Tensor:
        """``(len(kept_clips), dim)``: each clip's entries pooled (:func:`~hf_atr.windowing.pool_window_embeddings`;
        ``normalize=False`` for a model whose head scores unnormalised embeddings)."""
        if len(self.clip_indices) == 0:
            return self.embeddings
        _, counts = torch.unique_consecutive(self.clip_indices, return_counts=True)
        groups = torch.split(self.embeddings, counts.tolist())
        return torch.stack([pool_window_embeddings(group, pooling, normalize=normalize) for group in groups])


@dataclass
class _PendingWindow:
    clip_index: int
    name: str
    audio: np.ndarray | dict[str, Any]
    start: float
    end: float


def encode_audio_windows(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    *,
    windowing: Windowing | None = None,
    batch_size: int = 64,
    show_progress: bool = False,
    strict: bool = True,
    description: str = "Encoding audio",
) -> AudioEmbeddings:
    """Embed every clip of ``dataset``, window by window when ``windowing`` is given.

    Args:
        dataset: a ``datasets.Dataset`` or a list of row dicts with ``audio`` (anything
            :func:`~hf_atr.data.audio.decode_audio` takes) or precomputed features, and optionally
            ``audio_id`` (names the clip in warnings and reports).
        windowing: ``None``: one entry per clip, one forward pass of what the processor prepares (the
            extractor cuts a longer clip to its window, named in one warning for the call). Otherwise a clip
            longer than the window becomes one entry per window (:func:`~hf_atr.windowing.window_bounds`),
            each embedded on its own; a shorter clip is one entry. With ``windowing.frame_seconds`` (a model
            with frame-level embeddings), entries are its frames pooled to that resolution
            (:func:`~hf_atr.frame_encoding.encode_frame_entries`).
        batch_size: windows (or clips) per forward pass.
        strict: ``True``: a clip that cannot be decoded raises
            :class:`~hf_atr.data.audio_arrays.AudioDecodeError` naming it; ``False``: it is left out and listed in
            :attr:`AudioEmbeddings.skipped` with the reason.
        description: names the job in the progress bar and in the warning about cut clips.

    Raises:
        ValueError: ``windowing`` for rows that hold only precomputed features (windows need the waveform:
            keep it with ``extract_audio_features(..., keep_audio=True)``).
    """
    feature_extractor = processor.feature_extractor
    window = extractor_window(feature_extractor)
    window_and_hop = windowing.samples(feature_extractor) if windowing is not None else None
    rate = processor.sampling_rate
    embeddings, clip_indices, starts, ends = [], [], [], []
    skipped: list[SkippedAudio] = []
    durations: dict[int, float] = {}
    pending: list[_PendingWindow] = []
    spans_known = True

    def flush(device: torch.device) -> None:
        if not pending:
            return
        names = [item.name for item in pending]
        if isinstance(pending[0].audio, dict):
            inputs = audio_batch(processor, [item.audio for item in pending], names)
        else:
            inputs = processor(audio=[item.audio for item in pending], audio_names=names, return_tensors="pt")
        embeds = model.get_audio_features(**{key: value.to(device) for key, value in inputs.items()})
        embeddings.append(float32_embeddings(embeds, model))
        clip_indices.extend(item.clip_index for item in pending)
        starts.extend(item.start for item in pending)
        ends.extend(item.end for item in pending)
        pending.clear()

    with inference(model) as device, collect_cut_clips(description, window) as cut:
        for index in tqdm(range(len(dataset)), desc=description, disable=not show_progress):
            row = dataset[index]
            name = _row_name(row, index)
            if any(feature in row for feature in AUDIO_INPUT_NAMES) and (
                windowing is None or "audio" not in row
            ):
                if windowing is not None:
                    raise ValueError(
                        f"{name}: windowed encoding needs the waveform, but the rows hold only precomputed "
                        "features; keep the audio with `extract_audio_features(..., keep_audio=True)` or pass "
                        "the raw dataset."
                    )
                spans_known = False
                pending.append(_PendingWindow(index, name, row, float("nan"), float("nan")))
            else:
                if "audio" not in row:
                    raise ValueError(
                        f"{name}: the row has neither precomputed audio features {AUDIO_INPUT_NAMES} nor an "
                        f"'audio' column (columns: {sorted(row)})."
                    )
                try:
                    waveform = decode_audio(row["audio"], rate, source=name)
                except AudioDecodeError as error:
                    if strict:
                        raise
                    skipped.append(SkippedAudio(index, name, error.reason))
                    continue
                durations[index] = len(waveform) / rate
                if windowing is not None and windowing.frame_seconds is not None:
                    flush(device)
                    entries = encode_frame_entries(
                        model, processor, waveform, windowing, name=name, batch_size=batch_size, device=device
                    )
                    embeddings.append(entries.embeddings)
                    clip_indices.extend([index] * len(entries.starts))
                    starts.extend(entries.starts)
                    ends.extend(entries.ends)
                elif windowing is None:
                    read = _read_seconds(len(waveform), window)
                    pending.append(_PendingWindow(index, name, waveform, 0.0, read))
                else:
                    for start, stop in window_bounds(len(waveform), *(window_and_hop or (None, None))):
                        pending.append(
                            _PendingWindow(index, name, waveform[start:stop], start / rate, stop / rate)
                        )
                        if len(pending) >= batch_size:
                            flush(device)
            if len(pending) >= batch_size:
                flush(device)
        flush(device)
    dim = model.config.projection_dim
    return AudioEmbeddings(
        embeddings=torch.cat(embeddings) if embeddings else torch.zeros(0, dim),
        clip_indices=torch.tensor(clip_indices, dtype=torch.long),
        starts=torch.tensor(starts, dtype=torch.float64) if spans_known else None,
        ends=torch.tensor(ends, dtype=torch.float64) if spans_known else None,
        skipped=skipped,
        durations=durations,
        cut_clips=len(cut.names),
    )


def _read_seconds(num_samples: int, window: ExtractorWindow) -> float:
    """Seconds of a clip one forward pass reads: up to the window when the extractor keeps the head of a
    longer clip, else all of it."""
    if window.cuts_long_clips and window.samples is not None:
        num_samples = min(num_samples, window.samples)
    return num_samples / window.sampling_rate


def _row_name(row: Mapping[str, Any], index: int) -> str:
    """A row's name in warnings and reports: its ``audio_id``, else its audio's path, else its position."""
    if row.get("audio_id") is not None:
        return str(row["audio_id"])
    audio = row.get("audio")
    if isinstance(audio, str):
        return audio
    if isinstance(audio, Mapping) and audio.get("path"):
        return str(audio["path"])
    return str(index)


def encode_audio_clips(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    *,
    windowing: Windowing | None = None,
    batch_size: int = 64,
    show_progress: bool = False,
    strict: bool = True,
    description: str = "Encoding audio",
) -> AudioEmbeddings:
    """One entry per clip of ``dataset``: :func:`encode_audio_windows` with its windows pooled.

    Without ``windowing``, or when the extractor handles long audio itself and no window length is given
    (CLAP fusion, :meth:`~hf_atr.windowing.Windowing.splits_clips`), each clip is one forward pass of what
    the processor prepares (the model's own protocol; clips the extractor cuts are named in one warning).
    Otherwise a clip longer than the window is embedded window by window and pooled (``windowing.pooling``)
    into one entry spanning the whole clip (``starts`` 0, ``ends`` its duration). Arguments as
    :func:`encode_audio_windows`.
    """
    common = {
        "batch_size": batch_size,
        "show_progress": show_progress,
        "strict": strict,
        "description": description,
    }
    if windowing is None or not windowing.splits_clips(processor.feature_extractor):
        return encode_audio_windows(model, processor, dataset, **common)
    encoded = encode_audio_windows(model, processor, dataset, windowing=windowing, **common)
    clips = encoded.kept_clips
    return AudioEmbeddings(
        embeddings=encoded.pooled(windowing.pooling, normalize=model.scoring_head.normalizes_embeddings),
        clip_indices=torch.tensor(clips, dtype=torch.long),
        starts=torch.zeros(len(clips), dtype=torch.float64),
        ends=torch.tensor([encoded.durations[clip] for clip in clips], dtype=torch.float64),
        skipped=encoded.skipped,
        durations=encoded.durations,
        cut_clips=encoded.cut_clips,
    )


def encode_audio(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    *,
    batch_size: int = 64,
    show_progress: bool = False,
    windowing: Windowing | None = None,
) -> torch.Tensor:
    """``(n_clips, dim)`` audio embeddings of a dataset with precomputed features (or raw ``audio``).

    ``dataset`` is a ``datasets.Dataset`` or a list of row dicts (``audio`` or precomputed features, and
    optionally ``audio_id``, which names a clip that cannot be decoded or stacked).

    Without ``windowing`` each clip is one forward pass of what the processor prepares (the model's own
    protocol; clips the extractor cuts to its window are named in one warning). With it, a clip longer
    than the window is embedded window by window and pooled (``windowing.pooling``), unless the extractor
    handles long audio itself (CLAP fusion, :meth:`~hf_atr.windowing.Windowing.splits_clips`); see
    :func:`encode_audio_clips`. Every clip must decode (:func:`encode_audio_clips` with ``strict=False``
    skips and reports instead).
    """
    return encode_audio_clips(
        model, processor, dataset, windowing=windowing, batch_size=batch_size, show_progress=show_progress
    ).embeddings


@dataclass
class EvaluatedClips:
    """The clips of an evaluation set as an evaluator encoded them (:func:`encode_evaluation_clips`).

    ``embeddings: (len(kept), dim)`` float32, one row per kept clip (its windows pooled when the evaluator
    pools); ``kept``: their dataset rows, increasing (every row unless some could not be decoded);
    ``skipped``: the clips left out as undecodable; ``cut_clips``: clips the model's own protocol cut to the
    extractor's window.
    """

    embeddings: torch.Tensor
    kept: list[int]
    skipped: list[SkippedAudio]
    cut_clips: int

    def protocol_entries(self) -> dict[str, Any]:
        """``clips`` (kept), ``clips_cut_to_window`` and ``skipped_clips`` (``[{"audio_id", "reason"}]``) of the
        evaluators' ``protocol``."""
        return {
            "clips": len(self.kept),
            "clips_cut_to_window": self.cut_clips,
            "skipped_clips": [{"audio_id": item.name, "reason": item.reason} for item in self.skipped],
        }

    def dataset_rows(self, dataset: Any) -> Any:
        """``dataset`` restricted to the kept clips (``dataset`` itself when none was skipped), aligned with
        :attr:`embeddings`."""
        return dataset.select(self.kept) if self.skipped else dataset


def encode_evaluation_clips(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    *,
    windowing: Windowing | None = None,
    strict: bool = False,
    batch_size: int = 64,
    show_progress: bool = False,
    description: str = "Evaluating",
) -> EvaluatedClips:
    """Encode every clip of an evaluation set once: the clip protocol of both evaluators
    (:class:`~hf_atr.evaluation.clip_evaluator.ClipEvaluator`).

    Without ``windowing`` each clip is one forward pass of what the processor prepares (the model's own
    protocol; the clips its extractor cuts are counted and named in one warning); with it, clips longer than
    the window are embedded window by window and pooled (:meth:`~hf_atr.windowing.Windowing.splits_clips`:
    CLAP fusion keeps its own embedding of the whole clip unless a window length is given). A clip that
    cannot be decoded is left out and named in one warning, or raises
    :class:`~hf_atr.data.audio_arrays.AudioDecodeError` with ``strict=True``.

    Args:
        description: names the job in the progress bar and the warnings (``"Evaluating on split 'test'"``).
    """
    encoded = encode_audio_clips(
        model,
        processor,
        dataset,
        windowing=windowing,
        batch_size=batch_size,
        show_progress=show_progress,
        strict=strict,
        description=description,
    )
    if encoded.skipped:
        named = "; ".join(f"{item.name} ({item.reason})" for item in encoded.skipped[:MAX_SKIPPED_NAMED])
        more = (
            f" and {len(encoded.skipped) - MAX_SKIPPED_NAMED} more"
            if len(encoded.skipped) > MAX_SKIPPED_NAMED
            else ""
        )
        logger.warning(
            f"{description}: {len(encoded.skipped)} clip(s) cannot be decoded and are left out with their "
            f"captions or labels: {named}{more}. The metrics cover the other clips."
        )
    return EvaluatedClips(
        embeddings=encoded.embeddings,
        kept=encoded.kept_clips,
        skipped=encoded.skipped,
        cut_clips=encoded.cut_clips,
    )
