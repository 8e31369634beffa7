"""Moments from a similarity curve: which stretches of a recording answer a query, ranked.

Two proposers, pure functions of a :class:`~hf_atr.moments.curve.SimilarityCurve`, parameters in one
:class:`MomentProposalConfig`:

- ``"sliding_window"`` (:func:`sliding_window_moments`), the reference: the baseline of the AMR paper (Munakata
  et al., "Language-based Audio Moment Retrieval", ICASSP 2025), which slides a clip-level retrieval model over the
  recording: every scored window is a candidate moment with its similarity as score, ranked by score, overlapping
  candidates removed by temporal non-maximum suppression (:func:`temporal_nms`);
- ``"refined"`` (:func:`refined_moments`), the default: the curve smoothed (Gaussian), detected where it rises
  above a threshold set by the recording's own score distribution (median + k·MAD), each detection's boundaries
  refined on the unsmoothed curve down to a lower threshold (hysteresis) and placed at the curve's resolution,
  then temporal NMS.

Boundaries from stretches: a run ``i..j`` of steps that overlap an event ``[a, b]`` while steps ``i − 1`` and
``j + 1`` do not bounds it: ``ends[i−1] <= a < ends[i]`` and ``starts[j] < b <= starts[j+1]``. The refined proposer
takes ``[ends[i−1], starts[j+1]]`` (the recording's ends where the run touches them): for frames, the run's own
frames; for windows of length W every h seconds, the event itself to within one hop, not the run's W + (j − i)h
seconds of audio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .curve import SimilarityCurve

PROPOSERS = ("refined", "sliding_window")
"""The proposers :func:`propose_moments` knows (:attr:`MomentProposalConfig.proposer`)."""
MAD_TO_SIGMA = 1.4826
"""The MAD of normal noise times this is its standard deviation: thresholds are in units of the noise's σ."""
MAX_PREDICTIONS = 10
"""Moments kept per query by default: the most the moment metrics read (Moment-DETR's evaluation)."""


@dataclass(frozen=True)
class MomentProposalConfig:
    """How moments are proposed from a similarity curve (every parameter of both proposers).

    Args:
        proposer: ``"refined"`` (default) or ``"sliding_window"`` (the AMR paper's baseline).
        max_moments: moments kept per recording, best first (default :data:`MAX_PREDICTIONS`).
        nms_iou: temporal NMS: a moment whose IoU with a better-scored kept one exceeds this is dropped (``1.0``
            keeps every candidate). Default 0.5.
        smoothing_seconds: ``"refined"``: the σ of the Gaussian that smooths the curve before detection, in
            seconds (converted to steps of the curve); ``0`` detects on the raw curve. Default 0.5.
        threshold_mads: ``"refined"``: a moment is detected where the smoothed curve exceeds the raw curve's
            median by this many σ (σ = 1.4826 · MAD, the median absolute deviation of the raw scores: the
            recording's own noise level, robust to the moments themselves). Default 3.0.
        boundary_mads: ``"refined"``: a detection extends over the contiguous steps around its peak where the
            unsmoothed curve exceeds its median by this many σ. Default 1.0 (at most ``threshold_mads``).
    """

    proposer: str = "refined"
    max_moments: int = MAX_PREDICTIONS
    nms_iou: float = 0.5
    smoothing_seconds: float = 0.5
    threshold_mads: float = 3.0
    boundary_mads: float = 1.0

    def __post_init__(self) -> None:
        if self.proposer not in PROPOSERS:
            raise ValueError(f"proposer must be one of {PROPOSERS}, got {self.proposer!r}.")
        if (
            not isinstance(self.max_moments, int)
            or isinstance(self.max_moments, bool)
            or self.max_moments < 1
        ):
            raise ValueError(f"max_moments must be a positive integer, got {self.max_moments!r}.")
        if not (isinstance(self.nms_iou, (int, float)) and 0.0 <= self.nms_iou <= 1.0):
            raise ValueError(f"nms_iou must be an IoU in [0, 1], got {self.nms_iou!r}.")
        if not (isinstance(self.smoothing_seconds, (int, float)) and self.smoothing_seconds >= 0):
            raise ValueError(f"smoothing_seconds must be >= 0 seconds, got {self.smoothing_seconds!r}.")
        for name in ("threshold_mads", "boundary_mads"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of MADs, got {value!r}.")
        if self.boundary_mads > self.threshold_mads:
            raise ValueError(
                f"boundary_mads ({self.boundary_mads}) must not exceed threshold_mads ({self.threshold_mads}): a "
                "moment's boundaries lie where the curve falls below a lower level than the one that detects it."
            )


@dataclass(frozen=True)
class Moment:
    """A proposed moment: ``[start, end)`` in seconds and its score (the model's similarity)."""

    start: float
    end: float
    score: float

    def as_dict(self) -> dict[str, float]:
        """``{"start", "end", "score"}``."""
        return asdict(self)

    def as_window(self) -> list[float]:
        """``[start, end, score]``: one entry of a prediction record's ``pred_relevant_windows``."""
        return [self.start, self.end, self.score]


def temporal_iou(first: Moment, second: Moment) -> float:
    """Intersection over union of two moments' time spans (0 for disjoint or touching spans)."""
    intersection = max(0.0, min(first.end, second.end) - max(first.start, second.start))
    union = (first.end - first.start) + (second.end - second.start) - intersection
    return intersection / union if union > 0 else 0.0


def temporal_nms(moments: Sequence[Moment], iou: float, limit: int | None = None) -> list[Moment]:
    """Greedy temporal non-maximum suppression: best score first (ties in the given order), a moment is kept
    unless its IoU with one already kept exceeds ``iou``; at most ``limit`` are kept."""
    order = sorted(range(len(moments)), key=lambda index: -moments[index].score)
    kept: list[Moment] = []
    for index in order:
        candidate = moments[index]
        if all(temporal_iou(candidate, chosen) <= iou for chosen in kept):
            kept.append(candidate)
            if limit is not None and len(kept) == limit:
                break
    return kept


def sliding_window_moments(
    curve: SimilarityCurve, config: MomentProposalConfig | None = None
) -> list[Moment]:
    """The AMR paper's sliding-window baseline: each step of ``curve`` (a window, or a frame) is a candidate
    moment spanning its stretch, scored by its similarity; ranked by score, temporal NMS at ``config.nms_iou``,
    the best ``config.max_moments`` kept."""
    config = config or MomentProposalConfig(proposer="sliding_window")
    candidates = [
        Moment(float(start), float(end), float(score))
        for start, end, score in zip(curve.starts, curve.ends, curve.scores)
    ]
    return temporal_nms(candidates, config.nms_iou, config.max_moments)


def robust_level(scores: np.ndarray, mads: float) -> float:
    """``median + mads · σ`` of ``scores``, with σ = 1.4826 · MAD (the median absolute deviation)."""
    median = float(np.median(scores))
    return median + mads * MAD_TO_SIGMA * float(np.median(np.abs(scores - median)))


def smoothed_scores(curve: SimilarityCurve, seconds: float) -> np.ndarray:
    """``(steps,)`` the curve's scores smoothed by a Gaussian of σ = ``seconds`` (in steps of the curve: σ / step),
    edges continued with the nearest score; the scores themselves for ``seconds == 0``."""
    if seconds == 0 or len(curve) == 1:
        return curve.scores.copy()
    from scipy.ndimage import gaussian_filter1d

    return gaussian_filter1d(curve.scores, sigma=seconds / curve.step, mode="nearest")


def run_bounds(curve: SimilarityCurve, first: int, last: int) -> tuple[float, float]:
    """Where an event lies that steps ``first..last`` overlap and their neighbours do not: ``[ends[first − 1],
    starts[last + 1]]`` (the recording's start or end at its edges). Where windows overlap so much that this is
    empty, the audio every step of the run reads, ``[starts[last], ends[first]]``."""
    start = curve.ends[first - 1] if first > 0 else curve.starts[first]
    end = curve.starts[last + 1] if last + 1 < len(curve) else curve.ends[last]
    if start < end:
        return float(start), float(end)
    return float(curve.starts[last]), float(curve.ends[first])


def refined_moments(curve: SimilarityCurve, config: MomentProposalConfig | None = None) -> list[Moment]:
    """The default proposer: detection on the smoothed curve, boundaries on the raw one (module docstring).

    1. The curve is smoothed (``config.smoothing_seconds``).
    2. Detections: the maximal runs of steps where the smoothed curve exceeds ``median + threshold_mads · σ`` of
       the raw curve (its statistics, not the smoothed curve's, which the moments' own smoothed tails inflate).
       The other peaks of the smoothed curve (``scipy.signal.find_peaks``), all below that level, follow as
       candidates of their own: the metrics read up to 10 predictions, and a moment the threshold misses may be
       among them. A curve without any peak (flat) gets one candidate, at its maximum.
    3. Each candidate's peak (its best raw score) grows into the maximal run of steps around it whose raw score
       exceeds ``median + boundary_mads · σ`` of the raw curve; that run's bounds (:func:`run_bounds`) are the
       moment, its score the smoothed curve's maximum over the run.
    4. Temporal NMS at ``config.nms_iou``; the best ``config.max_moments`` are kept.
    """
    config = config or MomentProposalConfig()
    raw = curve.scores
    smooth = smoothed_scores(curve, config.smoothing_seconds)
    from scipy.signal import find_peaks

    detected = smooth > robust_level(raw, config.threshold_mads)
    runs = _runs(detected) + [(peak, peak) for peak in find_peaks(smooth)[0].tolist() if not detected[peak]]
    runs = runs or [(int(np.argmax(smooth)),) * 2]
    boundary = robust_level(raw, config.boundary_mads)
    moments, seen = [], set()
    for first, last in runs:
        peak = first + int(np.argmax(raw[first : last + 1]))
        left, right = peak, peak
        while left > 0 and raw[left - 1] > boundary:
            left -= 1
        while right + 1 < len(raw) and raw[right + 1] > boundary:
            right += 1
        if (left, right) in seen:
            continue
        seen.add((left, right))
        start, end = run_bounds(curve, left, right)
        moments.append(Moment(start, end, float(smooth[left : right + 1].max())))
    return temporal_nms(moments, config.nms_iou, config.max_moments)


def propose_moments(curve: SimilarityCurve, config: MomentProposalConfig | None = None) -> list[Moment]:
    """The moments of ``curve``, best first, by ``config.proposer`` (default :class:`MomentProposalConfig`)."""
    config = config or MomentProposalConfig()
    if config.proposer == "sliding_window":
        return sliding_window_moments(curve, config)
    return refined_moments(curve, config)


def prediction_record(qid: Any, moments: Sequence[Moment]) -> dict[str, Any]:
    """One line of a predictions JSONL file: ``{"qid", "pred_relevant_windows": [[start, end, score], ...]}``, the
    moments in their ranked order (what the moment metrics read: the first listed is the top prediction)."""
    return {"qid": qid, "pred_relevant_windows": [moment.as_window() for moment in moments]}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[(first, last)]`` of the maximal runs of ``True`` in ``mask``, in order."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(first), int(stop) - 1) for first, stop in zip(edges[::2], edges[1::2])]


__all__ = [
    "MAD_TO_SIGMA",
    "MAX_PREDICTIONS",
    "Moment",
    "MomentProposalConfig",
    "PROPOSERS",
    "prediction_record",
    "propose_moments",
    "refined_moments",
    "robust_level",
    "run_bounds",
    "sliding_window_moments",
    "smoothed_scores",
    "temporal_iou",
    "temporal_nms",
]
