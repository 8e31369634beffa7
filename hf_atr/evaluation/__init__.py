"""Evaluating a model: the retrieval, zero-shot and moment evaluators, their OT scoring and report pages.

Every evaluator is called with a model and returns its metrics, and names its ``primary_metric`` (with
``greater_is_better``), by which :class:`~hf_atr.AtrTrainer` (``evaluator=``) picks its best model.

The metric arithmetic they call lives a floor below, in :mod:`hf_atr.metrics`; its retrieval names are
re-exported here as well (``hf_atr.evaluation.retrieval_metrics``). Names resolve on first use.
"""

from ..lazy import lazy_attributes

_LAZY_NAMES = {
    "DEFAULT_KS": "..metrics.ranks",
    "DEFAULT_MAP_CUTOFFS": "..metrics.ranks",
    "QueryRanks": "..metrics.ranks",
    "RetrievalRanks": "..metrics.ranks",
    "inner_product_scores": "..metrics.retrieval",
    "load_retrieval_metric": "..metrics.retrieval",
    "retrieval_metrics": "..metrics.retrieval",
    "retrieval_metrics_from_embeddings": "..metrics.retrieval",
    "retrieval_ranks": "..metrics.retrieval",
    "retrieval_ranks_from_embeddings": "..metrics.retrieval",
    "MomentEvaluation": ".moment_evaluator",
    "MomentEvaluator": ".moment_evaluator",
    "RetrievalEvaluator": ".evaluator",
    "ZeroShotEvaluator": ".zero_shot",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)

__all__ = sorted(_LAZY_NAMES)
