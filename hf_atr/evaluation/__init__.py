"""Evaluating a model: the retrieval and zero-shot evaluators, their OT scoring and report pages.

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
    "RetrievalEvaluator": ".evaluator",
    "ZeroShotEvaluator": ".zero_shot",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)

__all__ = sorted(_LAZY_NAMES)
