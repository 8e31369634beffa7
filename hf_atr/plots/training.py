"""Training curves from a Trainer's ``log_history``: the loss, the objective's logged terms, the evaluation.

What is drawn, read from the entries of ``TrainerState.log_history``:

- ``loss`` and the objective's loss terms (``<objective>/loss...``, which :class:`~hf_atr.AtrTrainer` logs
  averaged between logging steps) in one panel;
- every other ``<objective>/<key>`` in a panel of its own (keys that differ only by the direction token ``t2a``
  / ``a2t`` share one), e.g. DART's ``uwd_transported_mass`` and ``reliability_entropy``, IOT's
  ``iot_diagonal_mass``, ASK's ``modulation_t2a`` / ``modulation_a2t``; terms that never change over the run
  (IOT's ``iot_transported_mass`` of 1, DART's ``uwd_channels``) are listed, not drawn;
- :data:`CALLBACK_TERMS`: what callbacks record in the history, such as the knowledge-base drift of ASK's
  refresh;
- the evaluation: ``eval_`` retrieval metrics (R@1/5/10, mAP@10 of :data:`~hf_atr.metrics.tables
  .RETRIEVAL_COLUMNS`, averaged over languages), one panel per direction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..metrics.tables import RETRIEVAL_COLUMNS
from .canvas import new_figure
from .retrieval import DIRECTIONS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CALLBACK_TERMS = {"kb_drift": "knowledge-base drift (ASK Eq. 4)"}
"""Keys that callbacks record in ``log_history`` (``kb_drift``: :class:`~hf_atr.training.callbacks
.KnowledgeBaseRefreshCallback`, at each refresh) -> panel title."""
LOSS_KEY = "loss"
EVAL_PREFIX = "eval_"
_MARKERS_UP_TO = 30
"""Series with at most this many points are drawn with markers (a single point is otherwise invisible)."""


@dataclass
class Series:
    """One logged quantity: `(n,)` optimizer steps and `(n,)` values."""

    steps: np.ndarray
    values: np.ndarray


@dataclass
class TrainingCurves:
    """The series of a run's ``log_history``, grouped into the figure's panels (see the module docstring).

    Args:
        losses: legend name -> series, drawn together (``loss`` first).
        terms: panel title -> legend name -> series.
        constants: terms that kept one value over the run -> that value.
        evaluation: direction (``"t2a"``, ``"a2t"``) -> metric (``"R@1"``, ``"mAP@10"``, ...) -> series of fractions.
    """

    losses: dict[str, Series] = field(default_factory=dict)
    terms: dict[str, dict[str, Series]] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)
    evaluation: dict[str, dict[str, Series]] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        """True when the history holds no training loss (nothing was trained, or nothing was logged)."""
        return LOSS_KEY not in self.losses


def training_curves(log_history: Iterable[Mapping[str, Any]], objective_name: str) -> TrainingCurves:
    """Group a Trainer's ``log_history`` into the series of :func:`training_curves_figure`.

    Args:
        log_history: ``TrainerState.log_history``: dicts with ``step`` and logged values.
        objective_name: the objective's registered name (its terms are logged as ``<name>/<key>``).
    """
    collected: dict[str, tuple[list[float], list[float]]] = {}
    for entry in log_history:
        step = entry.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                continue
            steps, values = collected.setdefault(key, ([], []))
            steps.append(float(step))
            values.append(float(value))
    series = {
        key: Series(np.asarray(steps), np.asarray(values)) for key, (steps, values) in collected.items()
    }

    curves = TrainingCurves()
    if LOSS_KEY in series:
        curves.losses[LOSS_KEY] = series[LOSS_KEY]
    prefix = f"{objective_name}/"
    for key, values in series.items():
        if not key.startswith(prefix):
            continue
        term = key[len(prefix) :]
        if term.startswith(LOSS_KEY):
            curves.losses[term] = values
        elif len(values.values) > 1 and np.all(values.values == values.values[0]):
            curves.constants[term] = float(values.values[0])
        else:
            panel, line = _split_direction(term)
            curves.terms.setdefault(panel, {})[line] = values
    for key, title in CALLBACK_TERMS.items():
        if key in series:
            curves.terms[title] = {key: series[key]}
    for column in RETRIEVAL_COLUMNS:
        if f"{EVAL_PREFIX}{column}" in series:
            direction, metric = column.split("_", 1)
            curves.evaluation.setdefault(direction, {})[metric] = series[f"{EVAL_PREFIX}{column}"]
    return curves


def training_curves_figure(curves: TrainingCurves, *, title: str | None = None) -> Figure:
    """The loss, the objective's terms and the evaluation over optimizer steps, two panels per row.

    Raises:
        ValueError: when `curves` holds no training loss.
    """
    if curves.is_empty:
        raise ValueError("The training history holds no logged loss: there is no training curve to draw.")
    panels: list[tuple[str, str, dict[str, Series], bool]] = [("training loss", "loss", curves.losses, False)]
    panels += [(name, name, lines, False) for name, lines in curves.terms.items()]
    panels += [
        (f"evaluation: {DIRECTIONS[direction]}", "% of evaluation queries", metrics, True)
        for direction, metrics in curves.evaluation.items()
    ]
    columns = 1 if len(panels) == 1 else 2
    rows = -(-len(panels) // columns)
    figure = new_figure(5.2 * columns, 3.2 * rows + 0.4)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, (panel_title, ylabel, lines, in_percent) in zip(axes, panels):
        for name, values in lines.items():
            ax.plot(
                values.steps,
                100 * values.values if in_percent else values.values,
                label=name,
                linewidth=1.8,
                marker="o" if len(values.steps) <= _MARKERS_UP_TO else None,
                markersize=4,
            )
        if in_percent:
            ax.set_ylim(0, 100)
        ax.set_title(panel_title)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(lines) > 1 or in_percent:
            ax.legend(fontsize="small")
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    figure.suptitle(title or "Training curves")
    return figure


def _split_direction(term: str) -> tuple[str, str]:
    """(panel, legend name): ``"modulation_t2a"`` -> ``("modulation", "t2a")``; a term without a direction token
    is its own panel and line."""
    parts = term.split("_")
    for direction in DIRECTIONS:
        if direction in parts:
            rest = [part for part in parts if part != direction]
            return "_".join(rest) or term, direction
    return term, term


__all__ = ["CALLBACK_TERMS", "Series", "TrainingCurves", "training_curves", "training_curves_figure"]
