"""The index of a retrieval pipeline's model: a new empty one, vectors in its geometry, and the check before adding.

Every index a pipeline fills is made by :func:`new_index` (the model's dimension, metric, dtype and fingerprints);
entries and queries alike enter it through :func:`index_vectors`, and :func:`check_appendable` refuses embeddings
of another precision than those it holds.
"""

from __future__ import annotations

from typing import Any

import torch

from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring
from hf_atr.pipelines.index_storage import model_dtype, model_fingerprints


def new_index(pipe: Any, root: str | None = None) -> EmbeddingIndex:
    """An empty index for ``pipe``'s model: its dimension, its scoring's metric, its dtype and its fingerprints, of
    the pipeline's ``index_kind`` and ``index_options``, searched on its ``search_device``."""
    return EmbeddingIndex(
        pipe.model.config.projection_dim,
        metric=metric_for_scoring(pipe.model.config.scoring),
        kind=pipe.index_kind,
        fingerprint=model_fingerprints(pipe.model),
        embedding_dtype=model_dtype(pipe.model),
        root=root,
        device=pipe.search_device,
        search_dtype=pipe.search_dtype,
        frame_seconds=pipe.windowing.frame_seconds,
        **pipe.index_options,
    )


def index_vectors(model: Any, embeds: torch.Tensor) -> torch.Tensor:
    """``embeds: (n, dim)`` in the index's geometry, float32 on the CPU: ``M^{1/2} x`` for Mahalanobis scoring
    (:meth:`~hf_atr.modeling_atr.AtrScoringHead.transform`), unchanged otherwise. Entries and queries alike."""
    head = model.scoring_head
    return head.transform(embeds.to(head.logit_scale.device)).float().cpu()


def check_appendable(index: EmbeddingIndex, model: Any) -> None:
    """Refuse to add embeddings that ``model`` computes in another dtype than those ``index`` holds (one index, one
    precision: its ``embedding_dtype`` says what all of its entries are).

    Raises:
        ValueError: naming both dtypes and what to do.
    """
    dtype = model_dtype(model)
    if index.embedding_dtype != dtype:
        raise ValueError(
            f"The index holds embeddings computed in {index.embedding_dtype}, and this model computes in {dtype}: "
            f"load the model in {index.embedding_dtype} to add to it (dtype= in pipeline(), --dtype "
            f"{index.embedding_dtype} for hf-atr index), or build a new index."
        )


__all__ = ["check_appendable", "index_vectors", "new_index"]
