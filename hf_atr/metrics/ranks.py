"""Where the relevant items rank, per direction and language, and the retrieval metrics read off those positions.

:class:`QueryRanks` holds one direction's positions in one gallery, :class:`RetrievalRanks` all of them with MRV;
``RetrievalRanks.metrics(ks, map_cutoffs)`` computes R@k, recall fraction@k, mAP@c and the median and mean rank
by the conventions of :mod:`hf_atr.metrics.retrieval` (ties against the relevant item, :data:`TIE_RULE`; MRV is
ATRI Eq. 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .retrieval_inputs import check_cutoffs

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
DEFAULT_MAP_CUTOFFS: tuple[int, ...] = (10,)
TIE_RULE = (
    "ties count against the relevant item: its 0-based position is the number of irrelevant items "
    "scoring >= it, plus i - 1 for the i-th best of several relevant items"
)
"""How positions are counted, as recorded with every evaluation (see the module docstring)."""


@dataclass(frozen=True, eq=False)
class QueryRanks:
    """Where the queries of one direction find their relevant items in one gallery, as the metrics count them.

    Args:
        positions: `(n_queries, max_relevant)` int64 0-based positions of each query's relevant items in
            increasing order (ties count against the relevant item, :data:`TIE_RULE`); entries past a query's
            ``num_relevant`` hold a padding value beyond every cutoff.
        num_relevant: `(n_queries,)` int64 number of relevant items of each query.
        gallery_size: number of items each query ranks (clips for text-to-audio, the language's captions for
            audio-to-text).
    """

    positions: torch.Tensor
    num_relevant: torch.Tensor
    gallery_size: int

    @property
    def best_ranks(self) -> np.ndarray:
        """`(n_queries,)` 1-based rank of each query's best relevant item (1 = retrieved first)."""
        return self.positions[:, 0].numpy() + 1

    def recall_at(self, ks: Sequence[int]) -> np.ndarray:
        """`(len(ks),)` R@k for every k: the fraction of queries with a relevant item in the top k."""
        best = self.positions[:, 0].numpy()
        return np.array([(best < k).mean() for k in ks], dtype=np.float64)

    def chance_recall_at(self, ks: Sequence[int]) -> np.ndarray:
        """`(len(ks),)` expected R@k of scores drawn at random (no ties), averaged over the queries.

        A query with ``R`` relevant items among ``G`` misses them all in the top k with probability
        ``C(G - R, k) / C(G, k) = prod_{i<k} (G - R - i) / (G - i)``.
        """
        ks = np.asarray(list(ks), dtype=np.int64)
        relevant = self.num_relevant.numpy().astype(np.float64)[:, None]
        steps = np.arange(int(ks.max()), dtype=np.float64)[None, :]
        gallery = float(self.gallery_size)
        ratios = np.clip((gallery - relevant - steps) / (gallery - steps).clip(min=1.0), 0.0, 1.0)
        miss = np.cumprod(ratios, axis=1)  # (n_queries, max k): miss[:, k - 1] for the top k
        return 1.0 - miss[:, ks - 1].mean(axis=0)


@dataclass(frozen=True, eq=False)
class RetrievalRanks:
    """The positions behind the retrieval metrics, per direction and caption language.

    What :func:`retrieval_ranks` and :func:`retrieval_ranks_from_embeddings` return: the same single pass over
    blocks of scores that :func:`retrieval_metrics` makes, kept so that R@k curves and rank histograms can be
    drawn for any k without scoring again. :meth:`metrics` gives the metrics dict of :func:`retrieval_metrics`.

    Args:
        text_to_audio: language -> the captions' :class:`QueryRanks` over the clips (in order of first
            appearance; the single key ``""`` when no languages were given).
        audio_to_text: language -> the clips' :class:`QueryRanks` over that language's captions (clips without
            a caption in the language are left out).
        per_language: whether languages were given (metric keys then carry ``/<lang>`` suffixes).
        mean_rank_variance: MRV (ATRI Eq. 16) when caption groups were given and some group spans two or more
            languages, else None.
    """

    text_to_audio: dict[str, QueryRanks]
    audio_to_text: dict[str, QueryRanks]
    per_language: bool = False
    mean_rank_variance: float | None = None

    @property
    def languages(self) -> list[str]:
        """The caption languages, in order of first appearance (``[""]`` without languages)."""
        return list(self.text_to_audio)

    def metrics(
        self, ks: Sequence[int] = DEFAULT_KS, map_cutoffs: Sequence[int] = DEFAULT_MAP_CUTOFFS
    ) -> dict[str, float]:
        """The flat metrics dict of :func:`retrieval_metrics` at these cutoffs."""
        ks, map_cutoffs = check_cutoffs(ks, map_cutoffs)
        several_relevant_clips = any(
            bool((ranks.num_relevant > 1).any()) for ranks in self.text_to_audio.values()
        )
        per_language = {}
        for name, t2a_ranks in self.text_to_audio.items():
            t2a = _query_metrics(t2a_ranks.positions, t2a_ranks.num_relevant, ks, map_cutoffs)
            if not several_relevant_clips:
                t2a.pop("recall_fraction")  # equals R@k with one relevant clip per caption
            a2t_ranks = self.audio_to_text[name]
            per_language[name] = {
                **_flatten("t2a", t2a),
                **_flatten(
                    "a2t", _query_metrics(a2t_ranks.positions, a2t_ranks.num_relevant, ks, map_cutoffs)
                ),
            }
        if not self.per_language:
            return per_language[""]
        first = next(iter(per_language.values()))
        metrics = {key: float(np.mean([values[key] for values in per_language.values()])) for key in first}
        for name, values in per_language.items():
            metrics.update({f"{key}/{name}": value for key, value in values.items()})
        if self.mean_rank_variance is not None:
            metrics["MRV"] = self.mean_rank_variance
        return metrics


def _query_metrics(
    positions: torch.Tensor, num_relevant: torch.Tensor, ks: tuple[int, ...], map_cutoffs: tuple[int, ...]
) -> dict[str, dict[int, float] | float]:
    """R@k, recall fraction@k, mAP@c and 1-based median/mean rank of the best relevant item.

    Args:
        positions: `(n_queries, max_relevant)` sorted 0-based positions, padding beyond every cutoff.
        num_relevant: `(n_queries,)` number of real entries per row.
    """
    positions = positions.double()
    num_relevant = num_relevant.double()
    best = positions[:, 0]
    precision_at_hit = torch.arange(1, positions.shape[1] + 1, dtype=torch.float64) / (positions + 1)
    average_precision = {
        cutoff: torch.where(positions < cutoff, precision_at_hit, 0.0).sum(dim=1)
        / num_relevant.clamp(max=cutoff)
        for cutoff in map_cutoffs
    }
    return {
        "R": {k: float((best < k).double().mean()) for k in ks},
        "recall_fraction": {k: float(((positions < k).sum(dim=1) / num_relevant).mean()) for k in ks},
        "mAP": {cutoff: float(values.mean()) for cutoff, values in average_precision.items()},
        "median_rank": float(np.median(best.numpy() + 1)),
        "mean_rank": float((best + 1).mean()),
    }


def _flatten(direction: str, values: dict[str, dict[int, float] | float]) -> dict[str, float]:
    flat = {}
    for name, value in values.items():
        if isinstance(value, dict):
            flat.update({f"{direction}_{name}@{cutoff}": v for cutoff, v in value.items()})
        else:
            flat[f"{direction}_{name}"] = value
    return flat


def mean_rank_variance(t2a_ranks: np.ndarray, group_of_text: np.ndarray) -> float | None:
    """ATRI Eq. (16): mean over caption groups of the population variance of their 0-based T2A ranks.

    Groups with a single caption carry no cross-language information and are left out; groups missing
    some languages use the variance over the languages they have. Returns None if no group is left.
    """
    ranks = t2a_ranks.astype(np.float64)
    count = np.bincount(group_of_text).astype(np.float64)
    rank_sum = np.bincount(group_of_text, weights=ranks)
    square_sum = np.bincount(group_of_text, weights=ranks**2)
    multilingual = count >= 2
    if not multilingual.any():
        return None
    count, rank_sum, square_sum = count[multilingual], rank_sum[multilingual], square_sum[multilingual]
    # Integer-valued sums below 2**53 are exact in float64, so this form has no cancellation error.
    variance = (count * square_sum - rank_sum**2) / count**2
    return float(variance.mean())
