"""Zero-shot classification figures: the confusion matrix and the accuracy of every class."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .canvas import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ANNOTATED_CLASSES = 25
"""Confusion matrices with at most this many classes print the clip count in every non-empty cell."""


def confusion_matrix_figure(
    confusion: np.ndarray, class_names: Sequence[str], *, title: str | None = None
) -> Figure:
    """Rows: true class, columns: predicted class, coloured by the fraction of the true class's clips.

    Args:
        confusion: `(n_classes, n_classes)` clip counts, ``confusion[t, p]`` clips of class t predicted as p.
        class_names: the `n_classes` names, in the matrix's order.
        title: the figure's title.
    """
    confusion = np.asarray(confusion)
    n_classes = len(class_names)
    if confusion.shape != (n_classes, n_classes):
        raise ValueError(
            f"confusion must be ({n_classes}, {n_classes}) for {n_classes} class names, got {confusion.shape}."
        )
    clips_per_class = confusion.sum(axis=1, keepdims=True)
    fractions = confusion / np.maximum(clips_per_class, 1)
    side = min(16.0, max(5.5, 0.32 * n_classes + 3.0))
    figure = new_figure(side + 1.2, side)
    ax = figure.subplots()
    image = ax.imshow(100 * fractions, cmap="Blues", vmin=0, vmax=100, interpolation="nearest")
    ticks = np.arange(n_classes)
    fontsize = "small" if n_classes <= 30 else "x-small"
    ax.set_xticks(ticks, labels=list(class_names), rotation=90, fontsize=fontsize)
    ax.set_yticks(ticks, labels=list(class_names), fontsize=fontsize)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if n_classes <= ANNOTATED_CLASSES:
        for true_class, predicted in zip(*np.nonzero(confusion)):
            dark = fractions[true_class, predicted] > 0.5
            ax.text(
                predicted,
                true_class,
                str(int(confusion[true_class, predicted])),
                ha="center",
                va="center",
                fontsize="small",
                color="white" if dark else "black",
            )
    ax.plot([-0.5, n_classes - 0.5], [-0.5, n_classes - 0.5], color="0.6", linewidth=0.8, linestyle=":")
    figure.colorbar(image, ax=ax, label="% of the true class's clips", shrink=0.8)
    correct = int(np.trace(confusion))
    total = int(confusion.sum())
    ax.set_title(f"{correct} of {total} clips on the diagonal (numbers: clip counts)", fontsize="medium")
    figure.suptitle(title or "Zero-shot confusion matrix")
    return figure


def per_class_accuracy_figure(
    accuracy: np.ndarray,
    clip_counts: np.ndarray,
    class_names: Sequence[str],
    *,
    title: str | None = None,
) -> Figure:
    """Horizontal bars of each class's accuracy, best first (labelled correct/clips), with the overall accuracy and
    chance marked.

    Args:
        accuracy: `(n_classes,)` fraction of each class's clips classified correctly (NaN for a class without
            clips, which is drawn empty and named as such).
        clip_counts: `(n_classes,)` clips of each class.
        class_names: the `n_classes` names.
        title: the figure's title.
    """
    accuracy, clip_counts = np.asarray(accuracy, dtype=float), np.asarray(clip_counts)
    n_classes = len(class_names)
    if accuracy.shape != (n_classes,) or clip_counts.shape != (n_classes,):
        raise ValueError(
            f"accuracy and clip_counts must have one value per class ({n_classes}), got shapes "
            f"{accuracy.shape} and {clip_counts.shape}."
        )
    order = np.argsort(np.nan_to_num(-accuracy, nan=1.0), kind="stable")
    labels = [
        f"{class_names[index]} ({int(clip_counts[index])} clip{'s' if clip_counts[index] != 1 else ''})"
        for index in order
    ]
    figure = new_figure(8.0, min(18.0, max(3.5, 0.28 * n_classes + 1.5)))
    ax = figure.subplots()
    positions = np.arange(n_classes)
    bars = ax.barh(positions, 100 * np.nan_to_num(accuracy[order]), color="C0")
    correct = np.rint(np.nan_to_num(accuracy) * clip_counts).astype(int)
    ax.bar_label(
        bars,
        labels=[f"{correct[index]}/{int(clip_counts[index])}" for index in order],
        padding=3,
        fontsize="x-small",
    )
    ax.set_yticks(positions, labels=labels, fontsize="small" if n_classes <= 30 else "x-small")
    ax.invert_yaxis()
    overall = float(np.nansum(accuracy * clip_counts) / max(int(clip_counts.sum()), 1))
    ax.axvline(100 * overall, color="C1", linewidth=2, label=f"all clips: {100 * overall:.1f} %")
    ax.axvline(
        100 / n_classes, color="0.45", linestyle=":", linewidth=1.5, label=f"chance: {100 / n_classes:.1f} %"
    )
    ax.set_xlim(0, 110)  # room for the correct/clips labels of full bars
    ax.set_xticks(np.arange(0, 101, 20))
    ax.set_xlabel("accuracy (% of the class's clips whose top-scoring label is their class)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    figure.suptitle(title or "Zero-shot accuracy per class")
    return figure


__all__ = ["confusion_matrix_figure", "per_class_accuracy_figure"]
