"""Retrieval figures: R@k curves, the histogram of the true item's rank, a transport plan beside its scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .canvas import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DIRECTIONS = {"t2a": "text → audio", "a2t": "audio → text"}
"""Metric prefix -> the direction in words, in the order the panels are drawn."""
GALLERY_ITEMS = {"t2a": "clip", "a2t": "caption"}
"""What each direction retrieves."""
QUERY_ITEMS = {"t2a": "caption", "a2t": "clip"}
"""What each direction's queries are."""
CHANCE_STYLE = {"color": "0.45", "linestyle": ":", "linewidth": 1.5}


def language_label(language: str) -> str:
    """Legend name of a caption language (``""``: the captions were not split by language)."""
    return language or "all captions"


def recall_at_k_figure(
    ks: Sequence[int],
    recall: Mapping[str, Mapping[str, Sequence[float]]],
    chance: Mapping[str, Sequence[float]] | None = None,
    *,
    query_counts: Mapping[str, Mapping[str, int]] | None = None,
    title: str | None = None,
) -> Figure:
    """R@k against k, one panel per direction, one line per caption language.

    Args:
        ks: the cutoffs, e.g. ``range(1, 51)``.
        recall: direction (``"t2a"`` / ``"a2t"``) -> language -> R@k at each of `ks`, fractions in [0, 1].
        chance: direction -> the expected R@k of random scores at `ks`, drawn dotted.
        query_counts: direction -> language -> number of queries, shown in the legend.
        title: the figure's title.

    Returns:
        The figure; recall is drawn in percent.
    """
    ks = np.asarray(list(ks))
    directions = [direction for direction in DIRECTIONS if direction in recall]
    figure = new_figure(5.0 * len(directions), 4.2)
    axes = figure.subplots(1, len(directions), squeeze=False)[0]
    for ax, direction in zip(axes, directions):
        for language, values in recall[direction].items():
            count = (query_counts or {}).get(direction, {}).get(language)
            label = language_label(language) + (f" ({count} {QUERY_ITEMS[direction]}s)" if count else "")
            ax.plot(ks, 100 * np.asarray(values, dtype=float), label=label, linewidth=2)
        if chance is not None and direction in chance:
            chance_values = 100 * np.asarray(chance[direction], dtype=float)
            ax.plot(ks, chance_values, label="random scores", zorder=3, **CHANCE_STYLE)
        ax.set_xlim(ks.min(), ks.max())
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"k ({GALLERY_ITEMS[direction]}s retrieved)")
        ax.set_ylabel(f"R@k (% of {QUERY_ITEMS[direction]}s)")
        ax.set_title(DIRECTIONS[direction])
        ax.grid(alpha=0.3)
        entries = len(recall[direction]) + (chance is not None)
        ax.legend(loc="lower right", fontsize="small", ncol=1 if entries <= 5 else 2)
    figure.suptitle(title or "Recall at k: the share of queries with a relevant item in the top k")
    return figure


def rank_histogram_figure(
    best_ranks: Mapping[str, Mapping[str, np.ndarray]],
    gallery_sizes: Mapping[str, int],
    *,
    title: str | None = None,
) -> Figure:
    """Histogram of the rank of each query's best relevant item, one panel per direction, one outline per language.

    Bins grow geometrically from rank 1 to the gallery size (every rank its own bin while that is at most 50),
    so both the head of the distribution and the long tail are visible. Heights are in percent of the language's
    queries, so languages with different numbers of queries compare; the median is marked per language.

    Args:
        best_ranks: direction -> language -> `(n_queries,)` 1-based ranks.
        gallery_sizes: direction -> the largest gallery (the largest possible rank).
        title: the figure's title.
    """
    directions = [direction for direction in DIRECTIONS if direction in best_ranks]
    figure = new_figure(5.0 * len(directions), 4.2)
    axes = figure.subplots(1, len(directions), squeeze=False)[0]
    for ax, direction in zip(axes, directions):
        edges = rank_bin_edges(gallery_sizes[direction])
        for index, (language, ranks) in enumerate(best_ranks[direction].items()):
            ranks = np.asarray(ranks)
            color = f"C{index}"
            median = float(np.median(ranks))
            ax.hist(
                ranks,
                bins=edges,
                weights=np.full(len(ranks), 100 / max(len(ranks), 1)),
                histtype="step",
                linewidth=2,
                color=color,
                label=f"{language_label(language)} (median {median:g})",
            )
            ax.axvline(median, color=color, linestyle="--", linewidth=1)
        if gallery_sizes[direction] > 50:
            ax.set_xscale("log")
            ticks = _round_ticks(gallery_sizes[direction])
            ax.set_xticks(ticks, labels=[str(tick) for tick in ticks])
            ax.minorticks_off()
        ax.set_xlim(edges[0], edges[-1])
        ax.set_xlabel(
            f"rank of the best relevant {GALLERY_ITEMS[direction]} (1 = first; ties count against it)"
        )
        ax.set_ylabel(f"% of {QUERY_ITEMS[direction]}s (queries)")
        ax.set_title(DIRECTIONS[direction])
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    figure.suptitle(title or "Rank of the true item")
    return figure


def rank_bin_edges(gallery_size: int, max_bins: int = 40) -> np.ndarray:
    """Bin edges over ranks ``1 .. gallery_size``: one bin per rank up to 50 ranks, else about `max_bins`
    geometrically growing bins (edges at half-integers, so each rank falls inside one bin)."""
    if gallery_size < 1:
        raise ValueError(f"gallery_size must be at least 1, got {gallery_size}.")
    if gallery_size <= 50:
        return np.arange(1, gallery_size + 2) - 0.5
    edges = np.unique(np.round(np.geomspace(1, gallery_size + 1, max_bins + 1)))
    return edges - 0.5


def _round_ticks(largest: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to `largest`: plain-number ticks for a logarithmic rank axis."""
    ticks, decade = [], 1
    while decade <= largest:
        ticks += [step * decade for step in (1, 2, 5) if step * decade <= largest]
        decade *= 10
    return ticks


def transport_plan_figure(
    scores: np.ndarray,
    plan: np.ndarray,
    *,
    score_label: str,
    plan_label: str,
    title: str | None = None,
) -> Figure:
    """A batch's score matrix beside the transport plan computed on it; true pairs lie on the diagonal.

    Args:
        scores: `(n_captions, n_clips)` the model's similarity of each caption to each clip.
        plan: `(n_captions, n_clips)` the plan, scaled so that 1 is a row's whole mass (``n_captions * Π``); its
            colours follow the square root of the value, so that a plan spread over many clips stays visible.
        score_label, plan_label: colour-bar labels (what the values are, with units).
        title: the figure's title.
    """
    scores, plan = np.asarray(scores, dtype=float), np.asarray(plan, dtype=float)
    if scores.shape != plan.shape or scores.ndim != 2:
        raise ValueError(
            f"scores and plan must be matrices of one shape, got {scores.shape} and {plan.shape}."
        )
    from matplotlib.colors import Normalize, PowerNorm  # matplotlib is there: new_figure checked it

    figure = new_figure(11.0, 5.0)
    axes = figure.subplots(1, 2)
    panels = (
        (axes[0], scores, "model scores", score_label, "viridis", Normalize()),
        (
            axes[1],
            plan,
            "transport plan",
            plan_label,
            "magma",
            PowerNorm(0.5, 0.0, max(1.0, float(plan.max()))),
        ),
    )
    for ax, values, name, label, colormap, norm in panels:
        image = ax.imshow(values, cmap=colormap, norm=norm, interpolation="nearest", aspect="equal")
        ax.set_xlabel("clip (batch column)")
        ax.set_ylabel("caption (batch row; its own clip is on the diagonal)")
        ax.set_title(name)
        figure.colorbar(image, ax=ax, label=label, shrink=0.85)
    figure.suptitle(title or "One evaluation batch: scores and transport plan")
    return figure


__all__ = ["rank_bin_edges", "rank_histogram_figure", "recall_at_k_figure", "transport_plan_figure"]
