"""The card's training curves: drawn beside ``README.md`` from the Trainer's log history, so they render on the Hub."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..lazy import get_logger
from ..plots.canvas import INSTALL_HINT, save_figure
from ..plots.training import training_curves, training_curves_figure

logger = get_logger(__name__)

TRAINING_CURVES_FILE = "training_curves.png"
"""The training-curves figure, written beside ``README.md`` and shown by the card (so it renders on the Hub)."""


def draw_training_curves(
    model: Any, log_history: Sequence[Mapping[str, Any]], directory: str | os.PathLike
) -> str:
    """Draw ``training_curves.png`` into ``directory`` from a Trainer's ``log_history``; returns the card's section.

    The figure (:mod:`hf_atr.plots.training`) shows the loss, the objective's logged terms
    (``<objective>/<key>``), what callbacks recorded (ASK's knowledge-base drift) and the evaluation metrics over
    optimizer steps. Returns ``""`` (no section, no file) when the history holds no training loss, and a note
    naming ``pip install 'hf-atr[plots]'`` when matplotlib is missing.
    """
    objective_name = model.config.objective["name"]
    curves = training_curves(log_history, objective_name)
    if curves.is_empty:
        return ""
    heading = "\n\n### Training curves\n\n"
    try:
        figure = training_curves_figure(curves, title=f"Training with the `{objective_name}` objective")
    except ImportError:
        logger.warning(
            f"The model card's training curves were not drawn: matplotlib is missing ({INSTALL_HINT})."
        )
        return (
            f"{heading}Not drawn where this card was written (matplotlib is not installed: `{INSTALL_HINT}`)."
        )
    save_figure(figure, Path(directory) / TRAINING_CURVES_FILE)
    lines = [
        f"![Training curves: loss, objective terms and evaluation over optimizer steps]({TRAINING_CURVES_FILE})",
        "",
        f"The training loss and the terms the `{objective_name}` objective logs (averaged between logging steps), "
        "over optimizer steps"
        + (
            ", and R@k and mAP@10 (%, mean over languages) at each evaluation during training (the trainer's "
            "evaluation set)."
            if curves.evaluation
            else "."
        ),
    ]
    if curves.constants:
        constants = ", ".join(f"`{name}` = {value:g}" for name, value in curves.constants.items())
        lines.append(f"Constant over the run (not drawn): {constants}.")
    return heading + "\n".join(lines)


__all__ = ["TRAINING_CURVES_FILE", "draw_training_curves"]
