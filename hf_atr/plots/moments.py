"""Moment figures: for a sample of queries, the similarity curve over the recording with the annotated moments and
the predicted ones on one time axis (what the evaluation report of ``hf-atr evaluate --moments`` shows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .canvas import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ANNOTATED_STYLE = {"color": "tab:green", "alpha": 0.25}
PREDICTED_COLOUR = "tab:red"
DEFAULT_PREDICTIONS_SHOWN = 3
"""Predicted moments drawn per query, best first (the rest would cover the curve)."""


@dataclass(frozen=True)
class MomentTimeline:
    """One query's timeline.

    Attributes:
        query: the query text (the panel's title).
        times: ``(steps,)`` seconds, where each score of the curve is drawn (the centre of its window or frame).
        scores: ``(steps,)`` the model's similarity of the query and each stretch.
        predicted: ``[[start, end, score], ...]`` best first (a prediction record's ``pred_relevant_windows``).
        annotated: ``[[start, end], ...]`` (a moment annotation's ``relevant_windows``, clipped to the recording:
            :func:`~hf_atr.data.moments.windows_inside`).
        recording: names the recording in the panel's title.
        duration: the recording's length in seconds: where the time axis ends (``None``: at the last time or
            window drawn).
    """

    query: str
    times: Sequence[float] | np.ndarray
    scores: Sequence[float] | np.ndarray
    predicted: Sequence[Sequence[float]] = ()
    annotated: Sequence[Sequence[float]] = ()
    recording: str | None = None
    duration: float | None = None


def moment_timeline_figure(
    timelines: Sequence[MomentTimeline],
    *,
    predictions_shown: int = DEFAULT_PREDICTIONS_SHOWN,
    title: str | None = None,
) -> Figure:
    """One panel per query, stacked on their own time axes: the similarity curve, the annotated moments as shaded
    spans, and the best ``predictions_shown`` predicted moments as bars under the curve, numbered by rank.

    Raises:
        ValueError: no timeline, a timeline whose times and scores differ in length, or ``predictions_shown`` < 0.
    """
    if not timelines:
        raise ValueError("moment_timeline_figure needs at least one query's timeline, got none.")
    if not isinstance(predictions_shown, int) or predictions_shown < 0:
        raise ValueError(f"predictions_shown must be a non-negative integer, got {predictions_shown!r}.")
    figure = new_figure(10.0, 2.2 * len(timelines) + 0.6)
    axes = figure.subplots(len(timelines), 1, squeeze=False)[:, 0]
    for ax, timeline in zip(axes, timelines):
        times = np.asarray(timeline.times, dtype=float)
        scores = np.asarray(timeline.scores, dtype=float)
        if times.shape != scores.shape or times.ndim != 1 or len(times) == 0:
            raise ValueError(
                f"The timeline of {timeline.query!r} needs one score per time, got {times.shape} times and "
                f"{scores.shape} scores."
            )
        ax.plot(times, scores, color="tab:blue", linewidth=1.5, label="similarity", gid="curve")
        for number, (start, end, *_) in enumerate(timeline.annotated):
            ax.axvspan(
                start, end, label="annotated" if number == 0 else None, gid="annotated", **ANNOTATED_STYLE
            )
        low, high = float(scores.min()), float(scores.max())
        spread = (high - low) or 1.0
        bar_height = 0.08 * spread
        for rank, (start, end, score, *_) in enumerate(timeline.predicted[:predictions_shown], start=1):
            bottom = low - (rank + 0.2) * 1.3 * bar_height
            ax.broken_barh(
                [(start, end - start)],
                (bottom, bar_height),
                color=PREDICTED_COLOUR,
                alpha=1.0 - 0.2 * (rank - 1),
                label="predicted (best first)" if rank == 1 else None,
                gid=f"predicted {rank}",
            )
            ax.annotate(
                f"#{rank} {score:.3f}",
                (end, bottom + bar_height / 2),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize="x-small",
            )
        ax.set_ylim(low - (predictions_shown + 1) * 1.3 * bar_height, high + 0.1 * spread)
        right = timeline.duration or max(
            [float(times.max())] + [float(window[1]) for window in (*timeline.annotated, *timeline.predicted)]
        )
        ax.set_xlim(0.0, right)
        ax.set_ylabel("similarity")
        ax.set_title(
            f"“{timeline.query}”" + (f" in {timeline.recording}" if timeline.recording else ""), loc="left"
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize="x-small")
    axes[-1].set_xlabel("time in the recording (s)")
    figure.suptitle(title or "Moments: similarity over time, annotated and predicted moments")
    return figure


__all__ = ["DEFAULT_PREDICTIONS_SHOWN", "MomentTimeline", "moment_timeline_figure"]
