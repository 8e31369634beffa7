"""Fast, memory-bounded audio-text retrieval metrics: R@k, mAP@c, median/mean rank and MRV.

Conventions, where the papers leave a choice:

* Relevance: every caption has one or several relevant clips (``text_to_audio`` gives, per caption, one
  clip index or a sequence of them, as in DCASE 2025's multi-relevance judgements). A clip's relevant
  captions (A2T) are those that list it.
* Ties count against the relevant item (:data:`~hf_atr.metrics.ranks.TIE_RULE`): a relevant item's 0-based position is the
  number of *irrelevant* gallery items scoring higher than **or equal to** it; with ``R`` relevant items,
  the i-th best (1-based ``i``) sits at ``(#irrelevant items scoring >= it) + (i - 1)``. A collapsed model
  (every score equal) therefore ranks every relevant item after all irrelevant ones: R@k = 0 whenever k is
  smaller than the number of irrelevant items. (The earlier rule, "count the items scoring strictly
  higher", gave a constant score matrix R@1 = mAP@10 = 1.0 and is withdrawn.)
* ``AP@c = (1 / min(c, R)) * sum_{p <= c} P@p * rel_p`` with ``R`` relevant items (one clip per caption
  in the classic T2A protocol, where it equals MRR@c; a clip's captions for A2T); one key per cutoff in
  ``map_cutoffs`` (DCASE 2025 ranks by mAP@16).
* Recall: ``R@k`` is 1 if *any* relevant item is in the top k (XinhaoMei / CLAP / the seed papers);
  ``recall_fraction@k`` is the fraction of the relevant items in the top k (DCASE 2023+). Both are
  reported for A2T; for T2A the fraction is reported when some caption has several relevant clips (with
  one clip per caption it equals ``t2a_R@k``).
* Median and mean ranks are reported 1-based (the best possible value is 1), as is conventional, and use
  the best-ranked relevant item.
* Several languages: T2A queries of every language search the whole audio gallery; for A2T each
  language's captions form their own gallery and clips without a caption in that language are skipped.
  Per-language values carry a ``/<lang>`` suffix and the un-suffixed key is their mean (ATRI's "avg").
* MRV (ATRI Eq. 16): for each caption group (the translations of one caption), the population variance
  across languages of the 0-based T2A position of the best relevant clip, averaged over the groups.

Positions are computed in one pass over blocks of captions, by counting the items that score at least as
high as each relevant item: the score matrix is never materialised in full and never sorted. They are kept
in a :class:`~hf_atr.metrics.ranks.RetrievalRanks` (:func:`retrieval_ranks`, :func:`retrieval_ranks_from_embeddings`), from which
the metrics are computed at any cutoffs and R@k curves and rank histograms drawn
(:mod:`hf_atr.evaluation.report`).

This module is the entry: the inputs are checked in :mod:`~hf_atr.metrics.retrieval_inputs`, the pass over
blocks counts in :mod:`~hf_atr.metrics.rank_counting`, and the positions and the metrics read off them are
:mod:`~hf_atr.metrics.ranks`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..deprecation import HfAtrDeprecationWarning, moved_names
from ..lazy import get_logger
from . import ranks
from .rank_counting import DEFAULT_BLOCK_ENTRIES, EmbeddingScores, MatrixScores, ScoreFn, rank_relevant_items
from .ranks import mean_rank_variance
from .retrieval_inputs import (
    ArrayLike,
    as_caption_groups,
    as_float_matrix,
    as_labels,
    as_relevant_clips,
    check_cutoffs,
    check_positive_integers,
)

if TYPE_CHECKING:
    import evaluate

logger = get_logger(__name__)

RETRIEVAL_METRIC_DIR = Path(__file__).resolve().parent / "retrieval_metric"


def inner_product_scores(text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
    """Default score of `retrieval_metrics_from_embeddings`: ``text_embeds @ audio_embeds.T``.

    Args:
        text_embeds: `(n_text_chunk, dim)`.
        audio_embeds: `(n_audio_chunk, dim)`.

    Returns:
        `(n_text_chunk, n_audio_chunk)` scores; cosine similarity for L2-normalised embeddings.
    """
    return text_embeds @ audio_embeds.T


def retrieval_metrics(
    scores: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    ks: Sequence[int] = ranks.DEFAULT_KS,
    map_cutoffs: Sequence[int] = ranks.DEFAULT_MAP_CUTOFFS,
    chunk_size: int | None = None,
    *,
    map_cutoff: int | None = None,
) -> dict[str, float]:
    """Text-to-audio and audio-to-text retrieval metrics from a score matrix.

    Args:
        scores: `(n_text, n_audio)` torch tensor or NumPy array; higher means more similar.
        text_to_audio: the relevant clips of each caption, as clip indices in `[0, n_audio)`: an `(n_text,)`
            integer array (one clip per caption), an `(n_text, R)` integer array (R clips each), or a
            sequence of `n_text` entries that are each a clip index or a non-empty sequence of distinct
            clip indices. A clip may be relevant to any number of captions, including none.
        languages: optional `(n_text,)` language of each caption (strings such as ``"eng"`` or ints).
        caption_groups: optional `(n_text,)` labels, equal for the translations of one caption (which
            must share their relevant clips); with `languages` it adds ``MRV`` (ATRI Eq. 16).
        ks: cutoffs of the R@k metrics.
        map_cutoffs: cutoffs ``c`` of mAP@c, one key per cutoff.
        chunk_size: captions scored at once; the temporary memory is about ``2 * chunk_size * n_audio``
            entries. Default: ``DEFAULT_BLOCK_ENTRIES // n_audio`` (at least 1).
        map_cutoff: deprecated alias of ``map_cutoffs=(map_cutoff,)``.

    Returns:
        A flat dict of floats, recall and mAP as fractions in [0, 1]: ``t2a_R@k``, ``a2t_R@k``,
        ``a2t_recall_fraction@k`` (and ``t2a_recall_fraction@k`` when a caption has several relevant
        clips), ``t2a_mAP@c``, ``a2t_mAP@c``, ``{t2a,a2t}_{median,mean}_rank`` (1-based), with ``/<lang>``
        suffixed copies per language and ``MRV`` when `languages` is given (see the module docstring for
        the conventions).

    Raises:
        ValueError: on inconsistent shapes, out-of-range, repeated or missing clip indices, NaN scores or
            bad options.
    """
    ks, map_cutoffs = check_cutoffs(ks, _resolve_map_cutoffs(map_cutoffs, map_cutoff))
    positions = retrieval_ranks(
        scores, text_to_audio, languages=languages, caption_groups=caption_groups, chunk_size=chunk_size
    )
    return positions.metrics(ks, map_cutoffs)


def retrieval_ranks(
    scores: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    chunk_size: int | None = None,
) -> ranks.RetrievalRanks:
    """The positions of the relevant items behind `retrieval_metrics`, from a score matrix.

    The same pass over blocks of captions as `retrieval_metrics` (which is ``retrieval_ranks(...).metrics(ks,
    map_cutoffs)``): positions are counted, never sorted out of the full matrix.

    Args:
        scores, text_to_audio, languages, caption_groups, chunk_size: as in `retrieval_metrics`.

    Returns:
        A :class:`~hf_atr.metrics.ranks.RetrievalRanks`: per direction and language, every query's 0-based positions of its relevant
        items; ``.metrics(ks, map_cutoffs)`` is the dict of `retrieval_metrics`, ``.text_to_audio[lang]
        .recall_at(range(1, 51))`` an R@k curve.
    """
    return _retrieval_ranks(
        MatrixScores(as_float_matrix(scores, "scores")),
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        chunk_size=chunk_size,
    )


def retrieval_metrics_from_embeddings(
    audio_embeds: ArrayLike,
    text_embeds: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    ks: Sequence[int] = ranks.DEFAULT_KS,
    map_cutoffs: Sequence[int] = ranks.DEFAULT_MAP_CUTOFFS,
    chunk_size: int | None = None,
    score_fn: ScoreFn | None = None,
    *,
    map_cutoff: int | None = None,
) -> dict[str, float]:
    """Retrieval metrics from embeddings, scoring in chunks without building the full score matrix.

    Each score is computed once, in blocks of `chunk_size` captions against all clips (plus a small pass
    scoring each caption against its own relevant clips, to know the A2T thresholds in advance). Memory
    stays bounded by about ``2 * chunk_size * n_audio`` entries, e.g. for 10k clips x 50k captions.

    Args:
        audio_embeds: `(n_audio, dim)` torch tensor or NumPy array.
        text_embeds: `(n_text, dim)`; computation runs on `text_embeds`' device.
        text_to_audio: each caption's relevant clip index, or sequence of them (see `retrieval_metrics`).
        languages, caption_groups, ks, map_cutoffs, chunk_size, map_cutoff: as in `retrieval_metrics`.
        score_fn: ``(text_chunk (m, dim), audio_chunk (n, dim)) -> (m, n)`` scores, higher is more similar,
            e.g. negative distances for a Euclidean or Mahalanobis head. Defaults to the inner product.

    Returns:
        The same dict as `retrieval_metrics` on the full score matrix.
    """
    ks, map_cutoffs = check_cutoffs(ks, _resolve_map_cutoffs(map_cutoffs, map_cutoff))
    positions = retrieval_ranks_from_embeddings(
        audio_embeds,
        text_embeds,
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        chunk_size=chunk_size,
        score_fn=score_fn,
    )
    return positions.metrics(ks, map_cutoffs)


def retrieval_ranks_from_embeddings(
    audio_embeds: ArrayLike,
    text_embeds: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    chunk_size: int | None = None,
    score_fn: ScoreFn | None = None,
) -> ranks.RetrievalRanks:
    """`retrieval_ranks` from embeddings, scored in chunks as `retrieval_metrics_from_embeddings` scores them.

    Args:
        audio_embeds, text_embeds, text_to_audio, languages, caption_groups, chunk_size, score_fn: as in
            `retrieval_metrics_from_embeddings`.

    Returns:
        The :class:`~hf_atr.metrics.ranks.RetrievalRanks` whose ``.metrics(ks, map_cutoffs)`` is `retrieval_metrics_from_embeddings`.
    """
    audio = as_float_matrix(audio_embeds, "audio_embeds")
    text = as_float_matrix(text_embeds, "text_embeds")
    if audio.shape[1] != text.shape[1]:
        raise ValueError(
            f"audio_embeds and text_embeds must have the same dimension, got {audio.shape[1]} and {text.shape[1]}."
        )
    for name, embeds in (("audio_embeds", audio), ("text_embeds", text)):
        # The sum is a cheap screen (it is finite whenever every entry is, barring overflow); the mask confirms.
        if not torch.isfinite(embeds.sum()) and not torch.isfinite(embeds).all():
            row = int((~torch.isfinite(embeds)).any(dim=1).nonzero()[0])
            raise ValueError(f"{name} contains NaN or infinite values, e.g. in row {row}.")
    audio = audio.to(device=text.device, dtype=torch.promote_types(audio.dtype, text.dtype))
    text = text.to(audio.dtype)
    return _retrieval_ranks(
        EmbeddingScores(audio, text, score_fn or inner_product_scores),
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        chunk_size=chunk_size,
    )


def load_retrieval_metric(**load_kwargs: Any) -> evaluate.EvaluationModule:
    """``evaluate.load`` of the bundled `retrieval_metric` module (offline; wraps `retrieval_metrics`).

    Args:
        **load_kwargs: forwarded to `evaluate.load` (e.g. ``cache_dir``, ``experiment_id``).
    """
    import evaluate  # ~5 s: pulls in transformers pipelines, so only when asked for

    return evaluate.load(str(RETRIEVAL_METRIC_DIR), **load_kwargs)


def _resolve_map_cutoffs(map_cutoffs: Sequence[int], map_cutoff: int | None) -> Sequence[int]:
    if map_cutoff is None:
        return map_cutoffs
    warnings.warn(
        "`map_cutoff` is deprecated and will be removed in a future version; pass `map_cutoffs=(c,)`.",
        HfAtrDeprecationWarning,
        stacklevel=3,
    )
    if map_cutoffs is not ranks.DEFAULT_MAP_CUTOFFS:
        raise ValueError("Pass either map_cutoffs or the deprecated map_cutoff, not both.")
    return (map_cutoff,)


@torch.no_grad()
def _retrieval_ranks(
    source: MatrixScores | EmbeddingScores,
    text_to_audio: ArrayLike,
    *,
    languages: ArrayLike | None,
    caption_groups: ArrayLike | None,
    chunk_size: int | None,
) -> ranks.RetrievalRanks:
    n_text, n_audio = source.n_text, source.n_audio
    if n_text == 0 or n_audio == 0:
        raise ValueError(
            f"Need at least one caption and one clip, got {n_text} captions and {n_audio} clips."
        )
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_BLOCK_ENTRIES // n_audio)
    check_positive_integers("chunk_size", (chunk_size,))
    relevant_clips = as_relevant_clips(text_to_audio, n_text, n_audio)
    if languages is None:
        if caption_groups is not None:
            raise ValueError("caption_groups needs languages: MRV measures rank variance across languages.")
        language_names, language_of_text = [""], np.zeros(n_text, dtype=np.int64)
    else:
        language_names, language_of_text = as_labels(languages, n_text, "languages")
    if caption_groups is not None:
        group_of_text = as_caption_groups(caption_groups, relevant_clips, language_of_text)

    t2a_positions, a2t = rank_relevant_items(
        source, relevant_clips, language_of_text, len(language_names), chunk_size
    )
    t2a_num_relevant = torch.from_numpy((relevant_clips >= 0).sum(axis=1))
    text_ranks, audio_ranks = {}, {}
    for code, name in enumerate(language_names):
        captions = torch.from_numpy(language_of_text == code)
        text_ranks[name] = ranks.QueryRanks(t2a_positions[captions], t2a_num_relevant[captions], n_audio)
        audio_ranks[name] = ranks.QueryRanks(*a2t[code], int(captions.sum()))
    mrv = None
    if caption_groups is not None:
        mrv = mean_rank_variance(t2a_positions[:, 0].numpy(), group_of_text)
        if mrv is None:
            logger.warning("No caption group has captions in two or more languages: MRV is not reported.")
    return ranks.RetrievalRanks(
        text_ranks, audio_ranks, per_language=languages is not None, mean_rank_variance=mrv
    )


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "DEFAULT_KS": "hf_atr.metrics.ranks",
    "DEFAULT_MAP_CUTOFFS": "hf_atr.metrics.ranks",
    "QueryRanks": "hf_atr.metrics.ranks",
    "RetrievalRanks": "hf_atr.metrics.ranks",
    "TIE_RULE": "hf_atr.metrics.ranks",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "RETRIEVAL_METRIC_DIR",
    "inner_product_scores",
    "load_retrieval_metric",
    "retrieval_metrics",
    "retrieval_metrics_from_embeddings",
    "retrieval_ranks",
    "retrieval_ranks_from_embeddings",
]
