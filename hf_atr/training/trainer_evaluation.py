"""What :class:`~hf_atr.AtrTrainer` evaluates during training: one evaluator or several, their metrics named as
transformers names them, and the metric a best model is chosen by.

An evaluator is anything called with a model that returns ``{metric: value}`` and names its ``primary_metric``
and ``greater_is_better`` (:class:`~hf_atr.evaluation.RetrievalEvaluator`,
:class:`~hf_atr.evaluation.ZeroShotEvaluator`, :class:`~hf_atr.evaluation.MomentEvaluator`, or one of your own);
its ``protocol``, when it has one, goes into the model card. One evaluator's metrics are reported as
``eval_<metric>`` (``eval_t2a_R@1``, ``eval_mAP``); several evaluators' as ``eval_<name>_<metric>``, ``name`` each
evaluator's own (``retrieval``, ``zero_shot``, ``moments``), numbered when two share it (``retrieval_1``,
``retrieval_2``), as transformers names the metrics of a dict of evaluation sets.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from transformers import TrainingArguments
from transformers.utils import logging

from ..evaluation.evaluator import retrieval_primary_metric

logger = logging.get_logger(__name__)

BEST_MODEL_PLACEHOLDERS = (None, "loss", "eval_loss")
"""``metric_for_best_model`` values that name no metric of an evaluator (``TrainingArguments`` sets ``"loss"`` when
``load_best_model_at_end`` is given without one; AtrTrainer computes no evaluation loss): replaced by the primary
metric."""


def evaluator_list(evaluator: Any) -> list[Any]:
    """``evaluator`` as a list: ``[]`` for ``None``, the evaluators of a list or tuple, else ``[evaluator]``.

    Raises:
        TypeError: something that cannot be called with a model, or an empty list.
    """
    if evaluator is None:
        return []
    evaluators = list(evaluator) if isinstance(evaluator, (list, tuple)) else [evaluator]
    if not evaluators:
        raise TypeError("evaluator=[] evaluates nothing: pass None, one evaluator or a non-empty list.")
    for each in evaluators:
        if not callable(each):
            raise TypeError(
                f"An evaluator is called with the model and returns its metrics; got a {type(each).__name__}."
            )
    return evaluators


def evaluator_names(evaluators: Sequence[Any]) -> list[str | None]:
    """The name each evaluator's metrics carry: ``[None]`` for one evaluator (``eval_<metric>``); for several, each
    one's ``name`` (its class name in lower case when it has none), numbered from 1 where two share it."""
    if len(evaluators) == 1:
        return [None]
    names = [getattr(evaluator, "name", None) or type(evaluator).__name__.lower() for evaluator in evaluators]
    shared = {name for name, count in Counter(names).items() if count > 1}
    seen: Counter[str] = Counter()
    numbered = []
    for name in names:
        if name in shared:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
        numbered.append(name)
    return numbered


def evaluation_sets(evaluators: Sequence[Any], eval_dataset: Any = None) -> dict[str, Any]:
    """What ``trainer.eval_dataset`` holds with evaluators: ``{name: dataset}`` of each (``None`` for one without a
    ``dataset``), named as :func:`evaluator_names` names them (one evaluator: its own ``name``).

    Raises:
        ValueError: an ``eval_dataset`` given as well.
    """
    if eval_dataset is not None:
        raise ValueError(
            "Pass evaluator=... or eval_dataset=..., not both: an evaluator holds its own evaluation set."
        )
    names = evaluator_names(evaluators)
    return {
        name or getattr(each, "name", None) or type(each).__name__.lower(): getattr(each, "dataset", None)
        for name, each in zip(names, evaluators)
    }


def metric_key(name: str | None, metric: str, prefix: str | None = "eval") -> str:
    """``<prefix>_<name>_<metric>``, leaving out the parts that are ``None``."""
    return "_".join(part for part in (prefix, name, metric) if part)


def evaluate_all(
    evaluators: Sequence[Any], names: Sequence[str | None], model: Any, prefix: str
) -> tuple[dict[str, float], dict[str, Any] | None]:
    """Every evaluator's finite numeric metrics on ``model``, named by :func:`metric_key`, and the protocol the card
    records: the evaluator's own with one evaluator, ``None`` with several (their metrics carry their names)."""
    metrics: dict[str, float] = {}
    for evaluator, name in zip(evaluators, names):
        for key, value in evaluator(model).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                metrics[metric_key(name, key, prefix)] = value
    protocol = getattr(evaluators[0], "protocol", None) if len(evaluators) == 1 else None
    return metrics, protocol


def choose_best_model_metric(
    args: TrainingArguments, evaluators: Sequence[Any], names: Sequence[str | None]
) -> None:
    """Point ``args.metric_for_best_model`` at the primary metric of the first evaluator (of the default
    retrieval evaluation when there is none) and ``args.greater_is_better`` at its direction, unless
    ``metric_for_best_model`` names a metric already (:data:`BEST_MODEL_PLACEHOLDERS` do not).

    Only when a best model is kept: ``load_best_model_at_end``, or ``save_strategy="best"``.
    """
    keeps_best = (
        args.load_best_model_at_end or str(getattr(args.save_strategy, "value", args.save_strategy)) == "best"
    )
    if not keeps_best or args.metric_for_best_model not in BEST_MODEL_PLACEHOLDERS:
        return
    if evaluators:
        primary = getattr(evaluators[0], "primary_metric", None)
        if primary is None:
            raise ValueError(
                f"load_best_model_at_end needs a metric: {type(evaluators[0]).__name__} names no primary_metric; "
                "give it one, or set TrainingArguments(metric_for_best_model=...)."
            )
        greater = bool(getattr(evaluators[0], "greater_is_better", True))
        metric = metric_key(names[0], primary, prefix=None)
    else:
        metric, greater = retrieval_primary_metric(), True
    logger.info(f"The best model is chosen by eval_{metric} ({'higher' if greater else 'lower'} is better).")
    args.metric_for_best_model = metric
    args.greater_is_better = greater


__all__ = [
    "BEST_MODEL_PLACEHOLDERS",
    "choose_best_model_metric",
    "evaluate_all",
    "evaluation_sets",
    "evaluator_list",
    "evaluator_names",
    "metric_key",
]
