"""The end of a training run: evaluate the test split, then save the model, processor, card and metrics.

``hf-atr demo`` and ``hf-atr train`` end with :func:`evaluate_and_save`, so both write the same layout::

    OUTPUT_DIR/model/        weights, config, processor, README.md (the card: results table and protocol)
    OUTPUT_DIR/metrics.json  {"metrics": {...}, "protocol": {...}, ...}

``metrics.json`` has the form ``hf-atr evaluate --output`` writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..evaluation.evaluator import RetrievalEvaluator
from ..model_card import record_evaluation

MODEL_DIRECTORY = "model"
"""Sub-directory of a run's output directory that holds the final model, processor and card."""
METRICS_FILE = "metrics.json"
"""File of a run's output directory with the test metrics and their protocol."""


@dataclass
class FinalModel:
    """What :func:`evaluate_and_save` wrote."""

    metrics: dict[str, float]
    protocol: dict[str, Any]
    model_dir: Path
    metrics_file: Path


def evaluate_and_save(
    model: Any,
    processor: Any,
    evaluator: RetrievalEvaluator,
    output_dir: str | os.PathLike,
    *,
    eval_dataset: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> FinalModel:
    """Evaluate ``model`` with ``evaluator``, then save it with its processor and a card showing the result.

    The evaluation and its protocol are recorded for the card (:func:`~hf_atr.model_card.record_evaluation`),
    so the card in ``output_dir/model`` (and any later ``push_to_hub``) carries the results table, the protocol
    behind it and a warning when the test set is smaller than its official split.

    Args:
        evaluator: a :class:`~hf_atr.evaluation.RetrievalEvaluator` over the test split.
        eval_dataset: the evaluated data's name in the card (e.g. ``"Clotho test"``).
        extra: more JSON-ready entries for ``metrics.json`` (e.g. ``{"training": {...}}``).

    Returns:
        The metrics, the protocol and where they were written.
    """
    metrics = evaluator(model)
    protocol = dict(evaluator.protocol)
    record_evaluation(model, metrics, protocol, eval_dataset=eval_dataset)
    output_dir = Path(output_dir)
    model_dir = output_dir / MODEL_DIRECTORY
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    metrics_file = output_dir / METRICS_FILE
    metrics_file.write_text(
        json.dumps({"metrics": metrics, "protocol": protocol, **(extra or {})}, indent=2, sort_keys=True)
    )
    return FinalModel(metrics=metrics, protocol=protocol, model_dir=model_dir, metrics_file=metrics_file)


__all__ = ["METRICS_FILE", "MODEL_DIRECTORY", "FinalModel", "evaluate_and_save"]
