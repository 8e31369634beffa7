"""Moments from a similarity curve: which stretches of a recording answer a query, ranked.

Two proposers, pure functions of a :class:`~hf_atr.moments.curve.SimilarityCurve`, parameters in one
:class:`MomentProposalConfig`:

- ``"sliding_window"`` (:func:`sliding_window_moments`), the reference: the baseline of the AMR paper (Munakata
  et al., "Language-based Audio Moment Retrieval", ICASSP 2025), which slides a clip-level retrieval model over the
  recording: every scored window is a candidate moment with its similarity as score, ranked by score, overlapping
  candidates removed by temporal non-maximum suppression (:func:`temporal_nms`);
- ``"refined"`` (:func:`refined_moments`), the default: candidate moments of several lengths around every peak of
  the smoothed curve, each scored by how far the curve inside it stands above the recording's median, with a mild
  preference for length; then temporal NMS.

Boundaries from the shape of a window curve. A window of length ``W`` scores, to first order, the recording's
background level plus the event's height times the share of the event it holds, ``overlap / min(L, W)`` for an
event of length ``L`` (the model of ``tests/moments/test_proposal.py``). Plotted at the windows' centres, that curve
is a trapezoid whose flanks are ``min(L, W)`` long and whose half-height points lie ``max(L, W)`` apart, centred on
the event: for ``L >= W`` the crossings of half the peak's prominence are the event's own boundaries, for
``L < W`` they are a window around it (:func:`peak_stretches`, at several fractions of the prominence for noisy
curves). A run ``i..j`` of steps that overlap the event while steps ``i − 1`` and ``j + 1`` do not bounds a short
event from inside: ``ends[i−1] <= a < ends[i]`` and ``starts[j] < b <= starts[j+1]`` (:func:`run_bounds`). For
frames (``W`` one frame) both are the event itself to within a frame.

Which candidate: the score of ``[a, b]`` is ``m + (μ − m) · ((b − a) / W)^γ`` (:func:`moment_score`), ``μ`` the
curve's mean score over the steps centred inside (the raw scores: smoothing would lower a box's edges and pull every
boundary inwards), ``m`` the recording's median score. Within one recording it ranks as the candidate's contrast in units of the noise, ``(μ − m) / σ``, times the length factor: averaging
``(b − a) / W`` independent windows lowers the noise of ``μ`` by the square root of that, so a longer stretch at the
same height is better evidence, and a candidate shorter than a window, whose ``μ`` is read from the one or two
steps at its middle (a peak's value, raised by the noise it was selected on), is less. ``γ = 0.25``, half that
square root, was chosen on the validation split of ``benchmarks/moments.py`` (the windows overlap, so they are not
independent). The score is in the curve's own units (a similarity) and equals ``μ`` for a candidate one window long.
"""

from __future__ import annotations

import warnings
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
        smoothing_seconds: ``"refined"``: the σ of the Gaussian that smooths the curve, in seconds (converted to
            steps of the curve; ``0`` reads the raw curve) before peaks are found and cut. Default 0.25.
        coarse_smoothing_seconds: ``"refined"``: a second, wider Gaussian whose peaks give the candidates of long
            events (their tops are flat and noisy, so the fine curve splits them). Default 1.0 (at least
            ``smoothing_seconds``).
        peak_levels: ``"refined"``: the fractions of a peak's prominence below its top at which its stretch is cut
            (:func:`peak_stretches`; ``0.5`` is the half-height width). Default ``(0.25, 0.5, 0.75)``.
        threshold_mads: ``"refined"``: the smoothed curve's runs above the raw curve's median plus this many σ
            (σ = 1.4826 · MAD, the median absolute deviation of the raw scores: the recording's own noise level,
            robust to the moments themselves) are candidates too, bounded by their neighbours (:func:`run_bounds`).
            Default 3.0.
        boundary_mads: ``"refined"``: such a run extends over the contiguous steps around its peak where the
            unsmoothed curve exceeds its median by this many σ. Default 1.0 (at most ``threshold_mads``).
        length_exponent: ``"refined"``: ``γ`` of the score :func:`moment_score`, the preference for a longer
            candidate at the same height (``0`` ranks by height alone). Default 0.25.
    """

    proposer: str = "refined"
    max_moments: int = MAX_PREDICTIONS
    nms_iou: float = 0.5
    smoothing_seconds: float = 0.25
    coarse_smoothing_seconds: float = 1.0
    peak_levels: tuple[float, ...] = (0.25, 0.5, 0.75)
    threshold_mads: float = 3.0
    boundary_mads: float = 1.0
    length_exponent: float = 0.25

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
        for name in ("smoothing_seconds", "coarse_smoothing_seconds", "length_exponent"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
        if self.coarse_smoothing_seconds < self.smoothing_seconds:
            raise ValueError(
                f"coarse_smoothing_seconds ({self.coarse_smoothing_seconds}) must be at least smoothing_seconds "
                f"({self.smoothing_seconds}): it is the wider of the two Gaussians."
            )
        levels = tuple(self.peak_levels) if isinstance(self.peak_levels, (list, tuple)) else None
        if not levels or not all(isinstance(level, (int, float)) and 0 < level <= 1 for level in levels):
            raise ValueError(
                f"peak_levels must be a non-empty sequence of fractions in (0, 1], got {self.peak_levels!r}."
            )
        object.__setattr__(self, "peak_levels", tuple(float(level) for level in levels))
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


def smoothed_peaks(smoothed: np.ndarray) -> np.ndarray:
    """The steps where ``smoothed`` (``(steps,)``) peaks (``scipy.signal.find_peaks``; the middle of a plateau; a
    maximum at either end of the recording counts), in time order; a flat curve's first step."""
    from scipy.signal import find_peaks

    peaks = find_peaks(_padded(smoothed))[0] - 1
    return peaks if len(peaks) else np.array([int(np.argmax(smoothed))])


def peak_stretches(
    curve: SimilarityCurve, smoothed: np.ndarray, levels: Sequence[float]
) -> list[tuple[int, float, float]]:
    """``[(peak, start, end)]``: each peak of ``smoothed`` (``(steps,)``, the curve smoothed; a plateau counts
    once, and so does a maximum at either end of the recording; a flat curve has its first step) cut at each of
    ``levels`` of its prominence below its top (``scipy.signal.peak_widths`` with ``rel_height=level``), in
    seconds. The crossings are interpolated between the centres of the steps they fall between, to a fraction of a
    step; one beyond the first or last centre is the recording's start or end. Peaks in order, each with its levels
    in the given order."""
    from scipy.signal import peak_prominences, peak_widths

    steps = len(smoothed)
    padded = _padded(smoothed)
    peaks = smoothed_peaks(smoothed) + 1
    centres = curve.times

    def seconds(position: float, edge: float) -> float:
        step = position - 1.0  # from the padded curve's positions to the curve's steps
        return edge if step < 0 or step > steps - 1 else float(np.interp(step, np.arange(steps), centres))

    # a flat curve's peak has prominence 0 and empty stretches, which the caller drops: no warning for them
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "some peaks have a (prominence|width) of 0", RuntimeWarning)
        prominences = peak_prominences(padded, peaks)
        cuts = [peak_widths(padded, peaks, rel_height=level, prominence_data=prominences) for level in levels]
    stretches = []
    for k, peak in enumerate(peaks):
        for _, _, lefts, rights in cuts:
            start = seconds(lefts[k], float(curve.starts[0]))
            end = seconds(rights[k], float(curve.ends[-1]))
            stretches.append((int(peak) - 1, start, end))
    return stretches


def moment_score(
    curve: SimilarityCurve, scores: np.ndarray, start: float, end: float, median: float, exponent: float
) -> float:
    """The score of the candidate moment ``[start, end]`` (module docstring): ``median + (μ − median) ·
    ((end − start) / W)^exponent``, ``μ`` the mean of ``scores`` (``(steps,)``, the curve's
    scores or a smoothing of them) over the steps whose centres lie in the moment (where none does, ``scores``
    interpolated at its middle), ``W`` the curve's :attr:`window`."""
    centres = curve.times
    inside = (centres >= start) & (centres <= end)
    level = (
        float(scores[inside].mean()) if inside.any() else float(np.interp((start + end) / 2, centres, scores))
    )
    window = curve.window
    return median + (level - median) * ((end - start) / window) ** exponent


def refined_moments(curve: SimilarityCurve, config: MomentProposalConfig | None = None) -> list[Moment]:
    """The default proposer (module docstring): candidates of several lengths, scored, then NMS.

    1. The curve is smoothed twice: fine (``config.smoothing_seconds``) and coarse
       (``config.coarse_smoothing_seconds``).
    2. Candidates:
       - every peak of either smoothed curve, cut at each of ``config.peak_levels`` (:func:`peak_stretches`);
       - every peak of the fine curve as its own step (the baseline's window, or one frame);
       - the runs where the fine curve exceeds ``median + threshold_mads · σ`` of the raw curve, each grown from its
         best raw score over the contiguous steps above ``median + boundary_mads · σ`` and bounded by
         :func:`run_bounds`.
    3. Each distinct candidate is scored by :func:`moment_score` on the raw curve (``config.length_exponent``).
    4. Temporal NMS at ``config.nms_iou``; the best ``config.max_moments`` are kept (ties in the order above).
    """
    config = config or MomentProposalConfig()
    raw = curve.scores
    fine = smoothed_scores(curve, config.smoothing_seconds)
    coarse = smoothed_scores(curve, config.coarse_smoothing_seconds)
    spans = [(start, end) for _, start, end in peak_stretches(curve, fine, config.peak_levels)]
    spans += [(start, end) for _, start, end in peak_stretches(curve, coarse, config.peak_levels)]
    fine_peaks = smoothed_peaks(fine).tolist()
    spans += [(float(curve.starts[peak]), float(curve.ends[peak])) for peak in fine_peaks]
    boundary = robust_level(raw, config.boundary_mads)
    seeds = _runs(fine > robust_level(raw, config.threshold_mads)) + [(peak, peak) for peak in fine_peaks]
    for first, last in seeds:
        left = right = first + int(np.argmax(raw[first : last + 1]))
        while left > 0 and raw[left - 1] > boundary:
            left -= 1
        while right + 1 < len(raw) and raw[right + 1] > boundary:
            right += 1
        spans.append(run_bounds(curve, left, right))
    median = float(np.median(raw))
    moments = [
        Moment(start, end, moment_score(curve, raw, start, end, median, config.length_exponent))
        for start, end in dict.fromkeys(spans)
        if end > start
    ]
    return temporal_nms(moments, config.nms_iou, config.max_moments)


def propose_moments(curve: SimilarityCurve, config: MomentProposalConfig | None = None) -> list[Moment]:
    """The moments of ``curve``, best first, by ``config.proposer`` (default :class:`MomentProposalConfig`)."""
    config = config or MomentProposalConfig()
    if config.proposer == "sliding_window":
        return sliding_window_moments(curve, config)
    return refined_moments(curve, config)


def prediction_record(
    qid: Any, moments: Sequence[Moment], *, query: str | None = None, vid: str | None = None
) -> dict[str, Any]:
    """One line of a predictions JSONL file: ``{"qid", "query", "vid", "pred_relevant_windows": [[start, end,
    score], ...]}`` as Moment-DETR writes it (``query`` and ``vid`` when given, unchanged), the moments in their
    ranked order (what the moment metrics read: the first listed is the top prediction; they ignore the rest)."""
    named = {"query": query, "vid": vid}
    return {
        "qid": qid,
        **{key: value for key, value in named.items() if value is not None},
        "pred_relevant_windows": [moment.as_window() for moment in moments],
    }


def _padded(smoothed: np.ndarray) -> np.ndarray:
    """``smoothed`` between two steps at its minimum, so that a maximum at either end is a peak (and its prominence
    is measured down to the curve's own lowest level)."""
    floor = float(smoothed.min())
    return np.concatenate([[floor], smoothed, [floor]])


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
    "moment_score",
    "peak_stretches",
    "prediction_record",
    "propose_moments",
    "refined_moments",
    "robust_level",
    "run_bounds",
    "smoothed_peaks",
    "sliding_window_moments",
    "smoothed_scores",
    "temporal_iou",
    "temporal_nms",
]
