"""A similarity curve: how well each stretch of one long recording matches one query.

A dual encoder scores a long recording against a query either window by window (each window of the extractor's
length, every ``hop`` seconds: :mod:`hf_atr.pipelines.moment_scoring`) or frame by frame (a frame-level model,
e.g. 25 frames/s). Either way the result is a sequence of samples, each the score of one stretch of audio
``[starts[k], ends[k])``. Windows overlap (a 10-s window every second reads each second ten times); frames
tile the recording. The proposers (:mod:`hf_atr.moments.proposal`) read the stretches, not only their centres,
so that the moment boundaries come out in recording time whatever the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_FRAME_RATE = 25.0
"""Frames per second of a frame-level source (PE-Audio's audio frames: 40 ms)."""


@dataclass(frozen=True)
class SimilarityCurve:
    """The scores of the stretches of one recording for one query, in time order.

    Attributes:
        starts: ``(steps,)`` float64, where each scored stretch starts, in seconds, non-decreasing.
        ends: ``(steps,)`` float64, where it ends (``> starts``).
        scores: ``(steps,)`` float64, the model's similarity of the query and the stretch (cosine, or the
            negative Euclidean/Mahalanobis distance, as the index scores).
    """

    starts: np.ndarray
    ends: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        starts, ends, scores = (
            np.asarray(values, dtype=np.float64).reshape(-1)
            for values in (self.starts, self.ends, self.scores)
        )
        if not len(starts) == len(ends) == len(scores):
            raise ValueError(
                f"A similarity curve needs one start, end and score per step, got {len(starts)} starts, "
                f"{len(ends)} ends and {len(scores)} scores."
            )
        if len(scores) == 0:
            raise ValueError("A similarity curve needs at least one step, got none.")
        if not (np.isfinite(starts).all() and np.isfinite(ends).all() and np.isfinite(scores).all()):
            raise ValueError(
                "A similarity curve's starts, ends and scores must be finite (found NaN or inf)."
            )
        if (ends <= starts).any():
            step = int(np.flatnonzero(ends <= starts)[0])
            raise ValueError(
                f"Step {step} of the similarity curve ends ({ends[step]:.3f} s) at or before it starts "
                f"({starts[step]:.3f} s)."
            )
        if (np.diff(starts) < 0).any():
            step = int(np.flatnonzero(np.diff(starts) < 0)[0]) + 1
            raise ValueError(
                f"The similarity curve's steps must be in time order: step {step} starts at {starts[step]:.3f} s, "
                f"before step {step - 1} ({starts[step - 1]:.3f} s)."
            )
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "ends", ends)
        object.__setattr__(self, "scores", scores)

    @classmethod
    def from_frames(
        cls, scores: Sequence[float] | np.ndarray, frame_rate: float = DEFAULT_FRAME_RATE
    ) -> SimilarityCurve:
        """A frame-level curve: ``scores[k]`` is the score of frame ``[k / frame_rate, (k + 1) / frame_rate)``."""
        if not (isinstance(frame_rate, (int, float)) and frame_rate > 0):
            raise ValueError(
                f"frame_rate must be a positive number of frames per second, got {frame_rate!r}."
            )
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        starts = np.arange(len(scores), dtype=np.float64) / frame_rate
        return cls(starts, starts + 1.0 / frame_rate, scores)

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def times(self) -> np.ndarray:
        """``(steps,)`` the centre of each stretch, in seconds (where a plot puts its score)."""
        return (self.starts + self.ends) / 2

    @property
    def step(self) -> float:
        """The curve's resolution in seconds: the median distance between consecutive starts (a one-step curve:
        its stretch's length)."""
        if len(self) == 1:
            return float(self.ends[0] - self.starts[0])
        return float(np.median(np.diff(self.starts)))

    @property
    def window(self) -> float:
        """The length of a scored stretch in seconds: the median of ``ends − starts`` (a window's length, or one
        frame)."""
        return float(np.median(self.ends - self.starts))

    @property
    def duration(self) -> float:
        """Where the last stretch ends: the recording's length as far as the curve knows it."""
        return float(self.ends.max())


__all__ = ["DEFAULT_FRAME_RATE", "SimilarityCurve"]
