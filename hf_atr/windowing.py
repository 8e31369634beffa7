"""Long audio, searched whole: the one place that decides how a clip is cut into windows and pooled.

A feature extractor reads a fixed window of a clip (AST: ``max_length`` frames, 10.24 s for a stock AST;
Whisper: ``chunk_length``; CLAP and PANNs: ``max_length_s``) and ignores the rest. Every embedding path
(processor, :mod:`hf_atr.encoding`, the retrieval index, the pipeline, ``hf-atr``, the evaluator) asks this
module:

- :func:`extractor_window`: how long that window is, and whether the extractor cuts longer clips to it or
  handles long audio itself (CLAP ``truncation="fusion"`` reads the whole clip: a shrunk global view and
  three crops; extractors without a window, e.g. wav2vec2's, pass the whole clip to the model);
- :class:`Windowing`: window length and hop (default: the extractor's window with 50 % overlap) and how
  window embeddings pool into one clip embedding (``"mean"`` of the L2-normalised window embeddings, or
  their element-wise ``"max"``; either re-normalised; a ``scoring="dot"`` model's rows as they are);
- :func:`window_bounds`: the ``[start, stop)`` sample ranges of a clip's windows;
- :func:`moment_windowing`: the windows a long recording is scored with for moments (the window length, a fine
  hop), by ``pipe.moments`` and the moment evaluator alike;
- :func:`pool_window_embeddings`: the pooling;
- :func:`pad_short_clip` and :func:`report_cut_clips`: clips shorter than one analysis frame are padded
  (AST's extractor fails on them deep inside transformers), clips the extractor cuts are logged, so that
  nothing is padded or truncated without a log line naming it.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers.utils import logging

from .deprecation import moved_names
from .features.registry import batched_features_class

logger = logging.get_logger(__name__)

POOLINGS = ("mean", "max")
"""How window embeddings become one clip embedding (:func:`pool_window_embeddings`)."""
DEFAULT_POOLING = "mean"
DEFAULT_HOP_FRACTION = 0.5
"""Default hop as a fraction of the window: 50 % overlap, so every moment of a clip is read by two windows
(or one at its very start and end)."""
MIN_CLIP_SECONDS = 0.025
"""Shortest clip handed to a feature extractor: one 25-ms analysis frame (Kaldi's, which AST uses; Whisper's
400 samples at 16 kHz). Shorter clips are zero-padded to it (or to the extractor's FFT window if longer)."""
CUT_CLIPS_NAMED = 5
"""How many cut clips a log line names (the count covers all of them)."""
DEFAULT_MOMENT_HOP_SECONDS = 1.0
"""Hop of the windows a recording is scored with for moments (at most the pipeline's own hop): the curve's
resolution, and so how closely the refined proposer places boundaries."""


@dataclass(frozen=True)
class ExtractorWindow:
    """What one forward pass of a feature extractor reads of a clip.

    Attributes:
        samples: the window in samples at the extractor's rate; ``None`` when it has none (every sample
            reaches the model).
        cuts_long_clips: whether a longer clip is cut to ``samples``, keeping its head (AST, Whisper, PANNs; CLAP
            ``rand_trunc``, whose random crop is training augmentation: :mod:`hf_atr.long_clips`); ``False`` for
            extractors that handle long audio themselves (CLAP ``fusion``, or no window), whose clip embedding of
            a long clip is the model's own.
        sampling_rate: the extractor's rate in Hz.
    """

    samples: int | None
    cuts_long_clips: bool
    sampling_rate: int

    @property
    def seconds(self) -> float | None:
        return None if self.samples is None else self.samples / self.sampling_rate


def extractor_window(feature_extractor: Any) -> ExtractorWindow:
    """The window ``feature_extractor`` reads (see :class:`ExtractorWindow`), as its batched feature class declares
    it (:meth:`~hf_atr.features.BatchedFeatureExtractor.clip_window`, found by
    :func:`~hf_atr.features.batched_features_class`): AST ``max_length`` frames, Whisper ``chunk_length``, PANNs and
    CLAP ``max_length_s`` (CLAP ``fusion`` reads a longer clip whole), PE-Audio the whole waveform (its window,
    10 s, only bounds windowed search). An extractor without a batched class has no window: the whole clip reaches
    the model.
    """
    implementation = batched_features_class(feature_extractor)
    samples, cuts_long_clips = (
        (None, False) if implementation is None else implementation.clip_window(feature_extractor)
    )
    return ExtractorWindow(samples, cuts_long_clips, int(feature_extractor.sampling_rate))


def minimum_samples(feature_extractor: Any) -> int:
    """Samples a clip needs for the extractor to compute one frame: :data:`MIN_CLIP_SECONDS`, or the
    extractor's FFT window (``n_fft`` / ``fft_window_size``) if that is longer."""
    frame = max(
        int(getattr(feature_extractor, "n_fft", 0) or 0),
        int(getattr(feature_extractor, "fft_window_size", 0) or 0),
    )
    return max(math.ceil(MIN_CLIP_SECONDS * feature_extractor.sampling_rate), frame)


@dataclass(frozen=True)
class Windowing:
    """How long clips are cut into windows and pooled.

    Args:
        window_seconds: window length; default the extractor's window (:func:`extractor_window`). It may not
            exceed that window (the extractor would cut it).
        hop_seconds: distance between window starts; default :data:`DEFAULT_HOP_FRACTION` of the window.
        pooling: ``"mean"`` (default) or ``"max"``, see :func:`pool_window_embeddings`.
        frame_seconds: for a model with frame-level embeddings (``config.audio_frame_rate``): entries are its
            frames pooled (``pooling``) to this resolution, rounded to whole frames (:meth:`frames_per_entry`),
            each with its span, instead of windows; the windows (``hop_seconds`` ignored: they do not overlap)
            only bound one forward pass. ``None`` (default): window entries.
    """

    window_seconds: float | None = None
    hop_seconds: float | None = None
    pooling: str = DEFAULT_POOLING
    frame_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        for name in ("window_seconds", "hop_seconds", "frame_seconds"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")

    def samples(self, feature_extractor: Any) -> tuple[int, int] | None:
        """``(window, hop)`` in samples at the extractor's rate; ``None`` when the extractor has no window
        and none was given (each clip is then one window, read whole).

        Raises:
            ValueError: a window longer than the extractor's, or a hop longer than the window.
        """
        window = extractor_window(feature_extractor)
        rate = window.sampling_rate
        if self.window_seconds is None:
            if window.samples is None:
                return None
            window_samples = window.samples
        else:
            window_samples = round(self.window_seconds * rate)
            if window.samples is not None and window.cuts_long_clips and window_samples > window.samples:
                raise ValueError(
                    f"window_seconds={self.window_seconds} is longer than the {window.seconds:.3f}-s window "
                    f"{type(feature_extractor).__name__} reads; the extractor would cut every window to it."
                )
        hop_samples = (
            max(1, round(window_samples * DEFAULT_HOP_FRACTION))
            if self.hop_seconds is None
            else round(self.hop_seconds * rate)
        )
        if not 1 <= hop_samples <= window_samples:
            raise ValueError(
                f"hop_seconds={self.hop_seconds} must be positive and at most the window "
                f"({window_samples / rate:.3f} s), or windows would leave gaps."
            )
        return window_samples, hop_samples

    def frames_per_entry(self, frame_rate: float) -> int:
        """Frames pooled into one entry: ``frame_seconds`` at ``frame_rate`` frames/s, rounded, at least one."""
        if self.frame_seconds is None:
            raise ValueError("frames_per_entry needs frame_seconds.")
        return max(1, round(self.frame_seconds * frame_rate))

    def splits_clips(self, feature_extractor: Any) -> bool:
        """Whether a clip-level embedding pools windows: yes when the extractor would cut long clips or a
        window was asked for; no for extractors that handle long audio themselves (CLAP fusion), whose
        own embedding of the whole clip is kept."""
        return self.window_seconds is not None or extractor_window(feature_extractor).cuts_long_clips

    def describe(self, feature_extractor: Any) -> dict[str, Any]:
        """JSON-ready record: ``pooling``, ``window_seconds`` and ``hop_seconds`` as resolved (and
        ``frame_seconds`` when set)."""
        resolved = self.samples(feature_extractor)
        rate = feature_extractor.sampling_rate
        record = {
            "pooling": self.pooling,
            "window_seconds": None if resolved is None else resolved[0] / rate,
            "hop_seconds": None if resolved is None else resolved[1] / rate,
        }
        if self.frame_seconds is not None:
            record["frame_seconds"] = self.frame_seconds
        return record


def window_bounds(num_samples: int, window: int | None, hop: int | None) -> list[tuple[int, int]]:
    """``[start, stop)`` sample ranges covering a clip of ``num_samples``.

    A clip no longer than ``window`` (or any clip when ``window`` is ``None``) is one range, the whole
    clip. A longer one gets windows starting every ``hop`` samples, plus one ending at the clip's end when
    the last regular window stops short of it, so every sample is read and every window is full length.
    """
    if window is None or num_samples <= window:
        return [(0, num_samples)]
    if hop is None or hop <= 0:
        raise ValueError(f"hop must be a positive number of samples, got {hop!r}.")
    starts = list(range(0, num_samples - window + 1, hop))
    if starts[-1] + window < num_samples:
        starts.append(num_samples - window)
    return [(start, start + window) for start in starts]


def moment_windowing(
    windowing: Windowing, feature_extractor: Any, hop_seconds: float | None = None
) -> Windowing:
    """The windows a recording is scored with for moments: ``windowing``'s length (default the extractor's window),
    every ``hop_seconds`` (default :data:`DEFAULT_MOMENT_HOP_SECONDS`, or ``windowing``'s hop when that is finer).

    Raises:
        ValueError: an extractor without a window and no ``window_seconds`` (each recording would be one window,
            with no time inside it), or a hop longer than the window.
    """
    resolved = windowing.samples(feature_extractor)
    if resolved is None:
        raise ValueError(
            f"{type(feature_extractor).__name__} reads whole clips (it has no window), so a recording would be "
            "scored as one piece with no time inside it; give the pipeline a window, e.g. "
            "windowing=Windowing(window_seconds=10.0)."
        )
    window, hop = resolved
    rate = feature_extractor.sampling_rate
    if hop_seconds is None:
        hop_seconds = min(DEFAULT_MOMENT_HOP_SECONDS, hop / rate)
    scored = Windowing(window_seconds=window / rate, hop_seconds=hop_seconds, pooling=windowing.pooling)
    scored.samples(feature_extractor)  # a hop longer than the window fails here
    return scored


def pool_window_embeddings(
    window_embeds: torch.Tensor, pooling: str = DEFAULT_POOLING, *, normalize: bool = True
) -> torch.Tensor:
    """One clip embedding from its windows' embeddings.

    Args:
        window_embeds: ``(windows, dim)``.
        pooling: ``"mean"``: the mean of the rows; ``"max"``: their element-wise maximum.
        normalize: ``True`` (cosine and distance heads): the rows are L2-normalised before pooling and the
            result after it, like every audio embedding of such a model. ``False`` (``scoring="dot"``, whose
            embeddings are not normalised, e.g. PE-Audio's): the rows are pooled as they are, so that a mean's
            dot product with a caption is the mean of the windows' dot products.

    Returns:
        ``(dim,)``, L2-normalised when ``normalize``.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}.")
    if window_embeds.ndim != 2 or window_embeds.shape[0] == 0:
        raise ValueError(f"window_embeds must be (windows >= 1, dim), got {tuple(window_embeds.shape)}.")
    rows = window_embeds.float()
    if normalize:
        rows = torch.nn.functional.normalize(rows, dim=-1)
    pooled = rows.mean(dim=0) if pooling == "mean" else rows.max(dim=0).values
    return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled


def pad_short_clip(waveform: np.ndarray, minimum: int, sampling_rate: int, name: str) -> np.ndarray:
    """``waveform`` zero-padded at the end to ``minimum`` samples if shorter, with a warning naming it."""
    if len(waveform) >= minimum:
        return waveform
    logger.warning(
        f"{name}: the clip is {1000 * len(waveform) / sampling_rate:.1f} ms long, shorter than the "
        f"{1000 * minimum / sampling_rate:.1f} ms the feature extractor needs for one frame; it is padded "
        "with silence to that length."
    )
    return np.pad(waveform, (0, minimum - len(waveform)))


@dataclass
class _CutClips:
    """Clips cut to the extractor's window during one job (see :func:`collect_cut_clips`)."""

    names: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


_CUT_COLLECTOR: contextvars.ContextVar[_CutClips | None] = contextvars.ContextVar("cut_clips", default=None)


@contextlib.contextmanager
def collect_cut_clips(job: str, window: ExtractorWindow, *, log: bool = True) -> Iterator[_CutClips]:
    """Within the block, :func:`report_cut_clips` collects instead of logging; at its end one warning
    names the count and the first clips of the whole ``job`` (e.g. ``"Encoding split 'test'"``), unless
    ``log`` is ``False`` (a caller that only counts). A block inside another hands its clips on to the outer
    one as well."""
    collected = _CutClips()
    outer = _CUT_COLLECTOR.get()
    token = _CUT_COLLECTOR.set(collected)
    try:
        yield collected
    finally:
        _CUT_COLLECTOR.reset(token)
        if outer is not None:
            outer.names.extend(collected.names)
            outer.seconds.extend(collected.seconds)
    if log and collected.names:
        logger.warning(f"{job}: {_cut_message(collected.names, collected.seconds, window)}")


def report_cut_clips(names: Sequence[str], lengths: Sequence[int], window: ExtractorWindow) -> None:
    """Log (or collect, inside :func:`collect_cut_clips`) the clips of ``names`` with ``lengths`` (samples)
    that the extractor cuts to its window."""
    if not window.cuts_long_clips or window.samples is None:
        return
    cut = [
        (name, length / window.sampling_rate)
        for name, length in zip(names, lengths)
        if length > window.samples
    ]
    if not cut:
        return
    collector = _CUT_COLLECTOR.get()
    if collector is not None:
        collector.names.extend(name for name, _ in cut)
        collector.seconds.extend(seconds for _, seconds in cut)
        return
    logger.warning(_cut_message([name for name, _ in cut], [seconds for _, seconds in cut], window))


def _cut_message(names: Sequence[str], seconds: Sequence[float], window: ExtractorWindow) -> str:
    named = ", ".join(f"{name} ({length:.1f} s)" for name, length in zip(names[:CUT_CLIPS_NAMED], seconds))
    more = f" and {len(names) - CUT_CLIPS_NAMED} more" if len(names) > CUT_CLIPS_NAMED else ""
    return (
        f"{len(names)} clip(s) longer than the feature extractor's {window.seconds:.2f}-s window are cut to "
        f"the first {window.seconds:.2f} s (their head, the same on every call): {named}{more}. Encode them whole "
        "with windowed embedding "
        "(hf_atr.windowing.Windowing; `hf-atr index` does by default, `hf-atr evaluate --window-pooling mean`)."
    )


MOVED_NAMES = {"RAW_WAVEFORM_WINDOW_SECONDS": "hf_atr.features.pe_audio_waveform"}
"""Names that moved out of this module -> their home (the class that declares PE-Audio's window); the old path
warns."""
__getattr__ = moved_names(__name__, MOVED_NAMES)


__all__ = [
    "DEFAULT_HOP_FRACTION",
    "DEFAULT_MOMENT_HOP_SECONDS",
    "DEFAULT_POOLING",
    "ExtractorWindow",
    "MIN_CLIP_SECONDS",
    "POOLINGS",
    "Windowing",
    "collect_cut_clips",
    "extractor_window",
    "minimum_samples",
    "moment_windowing",
    "pad_short_clip",
    "pool_window_embeddings",
    "report_cut_clips",
    "window_bounds",
]
