"""Retrieval evaluation: chunked metrics, the `evaluate` module, the evaluator and the results table."""

from .retrieval import (
    DEFAULT_KS,
    DEFAULT_MAP_CUTOFFS,
    QueryRanks,
    RetrievalRanks,
    inner_product_scores,
    load_retrieval_metric,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
    retrieval_ranks,
    retrieval_ranks_from_embeddings,
)

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_MAP_CUTOFFS",
    "QueryRanks",
    "RetrievalRanks",
    "inner_product_scores",
    "load_retrieval_metric",
    "retrieval_metrics",
    "retrieval_metrics_from_embeddings",
    "retrieval_ranks",
    "retrieval_ranks_from_embeddings",
]
