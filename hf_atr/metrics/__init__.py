"""Metric arithmetic on the ground floor: retrieval ranks and metrics, moment retrieval metrics, the `evaluate`
modules, the results table.

Arrays and tensors in, numbers and Markdown out: nothing here knows a model (the evaluators in
:mod:`hf_atr.evaluation` encode one and call these). Names resolve on first use, so the results table
(:mod:`~hf_atr.metrics.tables`) is imported without torch.
"""

from ..lazy import lazy_attributes

_LAZY_NAMES = {
    "DEFAULT_KS": ".ranks",
    "DEFAULT_MAP_CUTOFFS": ".ranks",
    "TIE_RULE": ".ranks",
    "QueryRanks": ".ranks",
    "RetrievalRanks": ".ranks",
    "inner_product_scores": ".retrieval",
    "load_retrieval_metric": ".retrieval",
    "retrieval_metrics": ".retrieval",
    "retrieval_metrics_from_embeddings": ".retrieval",
    "retrieval_ranks": ".retrieval",
    "retrieval_ranks_from_embeddings": ".retrieval",
    "MAX_PREDICTIONS_PER_QUERY": ".moments",
    "MOMENT_IOU_THRESHOLDS": ".moments",
    "load_moment_retrieval_metric": ".moments",
    "moment_retrieval_metrics": ".moments",
    "CONSISTENCY_COLUMNS": ".tables",
    "RETRIEVAL_COLUMNS": ".tables",
    "format_metric": ".tables",
    "results_table": ".tables",
    "results_table_rows": ".tables",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)

__all__ = sorted(_LAZY_NAMES)
