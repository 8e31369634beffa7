"""Fast, memory-bounded audio-text retrieval metrics: R@k, mAP@c, median/mean rank and MRV.

Conventions (DESIGN.md, "Where the papers are ambiguous"):

* Relevance: every caption has one or several relevant clips (``text_to_audio`` gives, per caption, one
  clip index or a sequence of them, as in DCASE 2025's multi-relevance judgements). A clip's relevant
  captions (A2T) are those that list it.
* Ties count against the relevant item (:data:`TIE_RULE`): a relevant item's 0-based position is the
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
in a :class:`RetrievalRanks` (:func:`retrieval_ranks`, :func:`retrieval_ranks_from_embeddings`), from which
the metrics are computed at any cutoffs and R@k curves and rank histograms drawn
(:mod:`hf_atr.evaluation.report`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers.utils import logging

from ..deprecation import HfAtrDeprecationWarning

if TYPE_CHECKING:
    import evaluate

logger = logging.get_logger(__name__)

RETRIEVAL_METRIC_DIR = Path(__file__).resolve().parent / "retrieval_metric"
DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
DEFAULT_MAP_CUTOFFS: tuple[int, ...] = (10,)
TIE_RULE = (
    "ties count against the relevant item: its 0-based position is the number of irrelevant items "
    "scoring >= it, plus i - 1 for the i-th best of several relevant items"
)
"""How positions are counted, as recorded with every evaluation (see the module docstring)."""
# Default block: as many captions as fit in 2**24 scores (64 MiB in float32). Large blocks matter on CPU,
# where every tensor operation has a fixed cost.
DEFAULT_BLOCK_ENTRIES = 2**24
# Captions per block when scoring each caption against its relevant clips ahead of the main pass: small
# enough to keep that pass cheap, large enough for BLAS to round as it does in the main blocks.
_POSITIVE_BLOCK_ROWS = 1024
# Stands in for the missing relevant items of queries with fewer than the most: beyond every cutoff.
_PADDING_POSITION = 2**62

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ArrayLike = Any


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
    ks: Sequence[int] = DEFAULT_KS,
    map_cutoffs: Sequence[int] = DEFAULT_MAP_CUTOFFS,
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
    ks, map_cutoffs = _check_cutoffs(ks, _resolve_map_cutoffs(map_cutoffs, map_cutoff))
    ranks = retrieval_ranks(
        scores, text_to_audio, languages=languages, caption_groups=caption_groups, chunk_size=chunk_size
    )
    return ranks.metrics(ks, map_cutoffs)


def retrieval_ranks(
    scores: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    chunk_size: int | None = None,
) -> RetrievalRanks:
    """The positions of the relevant items behind `retrieval_metrics`, from a score matrix.

    The same pass over blocks of captions as `retrieval_metrics` (which is ``retrieval_ranks(...).metrics(ks,
    map_cutoffs)``): positions are counted, never sorted out of the full matrix.

    Args:
        scores, text_to_audio, languages, caption_groups, chunk_size: as in `retrieval_metrics`.

    Returns:
        A :class:`RetrievalRanks`: per direction and language, every query's 0-based positions of its relevant
        items; ``.metrics(ks, map_cutoffs)`` is the dict of `retrieval_metrics`, ``.text_to_audio[lang]
        .recall_at(range(1, 51))`` an R@k curve.
    """
    return _retrieval_ranks(
        _MatrixScores(_as_float_matrix(scores, "scores")),
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
    ks: Sequence[int] = DEFAULT_KS,
    map_cutoffs: Sequence[int] = DEFAULT_MAP_CUTOFFS,
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
    ks, map_cutoffs = _check_cutoffs(ks, _resolve_map_cutoffs(map_cutoffs, map_cutoff))
    ranks = retrieval_ranks_from_embeddings(
        audio_embeds,
        text_embeds,
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        chunk_size=chunk_size,
        score_fn=score_fn,
    )
    return ranks.metrics(ks, map_cutoffs)


def retrieval_ranks_from_embeddings(
    audio_embeds: ArrayLike,
    text_embeds: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    chunk_size: int | None = None,
    score_fn: ScoreFn | None = None,
) -> RetrievalRanks:
    """`retrieval_ranks` from embeddings, scored in chunks as `retrieval_metrics_from_embeddings` scores them.

    Args:
        audio_embeds, text_embeds, text_to_audio, languages, caption_groups, chunk_size, score_fn: as in
            `retrieval_metrics_from_embeddings`.

    Returns:
        The :class:`RetrievalRanks` whose ``.metrics(ks, map_cutoffs)`` is `retrieval_metrics_from_embeddings`.
    """
    audio = _as_float_matrix(audio_embeds, "audio_embeds")
    text = _as_float_matrix(text_embeds, "text_embeds")
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
        _EmbeddingScores(audio, text, score_fn or inner_product_scores),
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
    if map_cutoffs is not DEFAULT_MAP_CUTOFFS:
        raise ValueError("Pass either map_cutoffs or the deprecated map_cutoff, not both.")
    return (map_cutoff,)


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
        ks, map_cutoffs = _check_cutoffs(ks, map_cutoffs)
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


@torch.no_grad()
def _retrieval_ranks(
    source: _MatrixScores | _EmbeddingScores,
    text_to_audio: ArrayLike,
    *,
    languages: ArrayLike | None,
    caption_groups: ArrayLike | None,
    chunk_size: int | None,
) -> RetrievalRanks:
    n_text, n_audio = source.n_text, source.n_audio
    if n_text == 0 or n_audio == 0:
        raise ValueError(
            f"Need at least one caption and one clip, got {n_text} captions and {n_audio} clips."
        )
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_BLOCK_ENTRIES // n_audio)
    _check_positive_integers("chunk_size", (chunk_size,))
    relevant_clips = _as_relevant_clips(text_to_audio, n_text, n_audio)
    if languages is None:
        if caption_groups is not None:
            raise ValueError("caption_groups needs languages: MRV measures rank variance across languages.")
        language_names, language_of_text = [""], np.zeros(n_text, dtype=np.int64)
    else:
        language_names, language_of_text = _as_labels(languages, n_text, "languages")
    if caption_groups is not None:
        group_of_text = _as_caption_groups(caption_groups, relevant_clips, language_of_text)

    t2a_positions, a2t = _rank_relevant_items(
        source, relevant_clips, language_of_text, len(language_names), chunk_size
    )
    t2a_num_relevant = torch.from_numpy((relevant_clips >= 0).sum(axis=1))
    text_ranks, audio_ranks = {}, {}
    for code, name in enumerate(language_names):
        captions = torch.from_numpy(language_of_text == code)
        text_ranks[name] = QueryRanks(t2a_positions[captions], t2a_num_relevant[captions], n_audio)
        audio_ranks[name] = QueryRanks(*a2t[code], int(captions.sum()))
    mrv = None
    if caption_groups is not None:
        mrv = _mean_rank_variance(t2a_positions[:, 0].numpy(), group_of_text)
        if mrv is None:
            logger.warning("No caption group has captions in two or more languages: MRV is not reported.")
    return RetrievalRanks(text_ranks, audio_ranks, per_language=languages is not None, mean_rank_variance=mrv)


class _MatrixScores:
    """Blocks of an explicit `(n_text, n_audio)` score matrix."""

    def __init__(self, scores: torch.Tensor):
        self.scores = scores
        self.n_text, self.n_audio = scores.shape
        self.device = scores.device

    def text_block(self, text_index: torch.Tensor) -> torch.Tensor:
        block = self.scores.index_select(0, text_index)
        # The caption pass visits every row once, so this covers the whole matrix without a full-size mask;
        # the sum is a cheap screen (NaN propagates), the mask only confirms.
        if torch.isnan(block.sum()) and torch.isnan(block).any():
            row, clip = torch.isnan(block).nonzero()[0].tolist()
            raise ValueError(f"scores contains NaN, e.g. at caption {int(text_index[row])}, clip {clip}.")
        return block

    def relevant_scores(self, text_index: torch.Tensor, relevant_clips: torch.Tensor) -> torch.Tensor:
        return self.scores[text_index[:, None], relevant_clips.clamp(min=0)]

    def audio_block(self, text_index: torch.Tensor, audio_index: torch.Tensor) -> torch.Tensor:
        return self.scores[text_index[:, None], audio_index[None, :]]


class _EmbeddingScores:
    """Blocks of ``score_fn(text_embeds, audio_embeds)``, computed on demand and checked."""

    def __init__(self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor, score_fn: ScoreFn):
        self.audio_embeds = audio_embeds
        self.text_embeds = text_embeds
        self.score_fn = score_fn
        self.n_text, self.n_audio = len(text_embeds), len(audio_embeds)
        self.device = text_embeds.device

    def text_block(self, text_index: torch.Tensor) -> torch.Tensor:
        return self._score(text_index, None)

    def relevant_scores(self, text_index: torch.Tensor, relevant_clips: torch.Tensor) -> torch.Tensor:
        # Scoring against the block's own relevant clips only is cheap; `_rank_relevant_items` checks the
        # values bitwise against the full rows, because BLAS may round differently for other shapes.
        clips, column = torch.unique(relevant_clips.clamp(min=0), return_inverse=True)
        return self._score(text_index, clips).gather(1, column)

    def audio_block(self, text_index: torch.Tensor, audio_index: torch.Tensor) -> torch.Tensor:
        return self._score(text_index, audio_index)

    def _score(self, text_index: torch.Tensor, audio_index: torch.Tensor | None) -> torch.Tensor:
        text = self.text_embeds.index_select(0, text_index)
        audio = self.audio_embeds if audio_index is None else self.audio_embeds.index_select(0, audio_index)
        block = self.score_fn(text, audio)
        if not isinstance(block, torch.Tensor) or tuple(block.shape) != (len(text), len(audio)):
            shape = tuple(block.shape) if isinstance(block, torch.Tensor) else type(block).__name__
            raise ValueError(
                f"score_fn must return a ({len(text)}, {len(audio)}) tensor for "
                f"{_describe_block(text_index)}, got {shape}."
            )
        if torch.isnan(block.sum()) and torch.isnan(block).any():
            raise ValueError(f"score_fn returned NaN scores for {_describe_block(text_index)}.")
        return block


def _describe_block(text_index: torch.Tensor) -> str:
    return f"a block of {len(text_index)} captions (the first is caption {int(text_index[0])})"


class _AtLeastCounter:
    """Counts the entries of score blocks greater than or equal to thresholds.

    Summing a float mask written into one reused buffer is several times faster on CPU than summing a
    fresh bool mask (which goes through int64 and page-faults a new allocation for every block). The
    float sums are exact: float32 counts are exact up to 2**24, beyond which float64 is used.
    """

    def __init__(self, device: torch.device, max_count: int):
        self.buffer = torch.empty(
            0, dtype=torch.float32 if max_count <= 2**24 else torch.float64, device=device
        )

    def __call__(self, block: torch.Tensor, thresholds: torch.Tensor, dim: int) -> torch.Tensor:
        """`(block.shape without dim,)` int64 counts of ``block >= thresholds`` (broadcast) along `dim`."""
        if self.buffer.numel() < block.numel():
            self.buffer = torch.empty(block.numel(), dtype=self.buffer.dtype, device=self.buffer.device)
        mask = torch.ge(block, thresholds, out=self.buffer[: block.numel()].view(block.shape))
        return mask.sum(dim=dim).long()


class _AudioToTextGallery:
    """A2T bookkeeping for the captions of one language (contiguous rows in the sorted caption order).

    `caption[a, s]` is the row, counted from the language's first, of the s-th caption that lists clip `a`
    (-1 past its last one), and `entry[a, s]` the flat index of that (caption, clip) pair in the
    `(n_text, max_clips_per_caption)` matrix of relevant scores; `at_least[a, s]` accumulates the number of
    the language's captions scoring at least as high as that caption on clip `a`.
    """

    def __init__(self, start: int, relevant_clips: np.ndarray, n_audio: int, device: torch.device):
        """`relevant_clips`: `(n_language_captions, max_clips_per_caption)`, -1 for padding."""
        self.start, self.stop = start, start + len(relevant_clips)
        rows, slots = np.nonzero(relevant_clips >= 0)
        pair_clips = relevant_clips[rows, slots]
        by_clip = np.argsort(pair_clips, kind="stable")
        rows, slots, pair_clips = rows[by_clip], slots[by_clip], pair_clips[by_clip]
        self.num_relevant = np.bincount(pair_clips, minlength=n_audio)
        first = np.cumsum(self.num_relevant) - self.num_relevant
        rank_in_clip = np.arange(len(pair_clips)) - np.repeat(first, self.num_relevant)
        caption = np.full((n_audio, int(self.num_relevant.max())), -1, dtype=np.int64)
        entry = np.full_like(caption, -1)
        caption[pair_clips, rank_in_clip] = rows
        entry[pair_clips, rank_in_clip] = (start + rows) * relevant_clips.shape[1] + slots
        self.caption = torch.from_numpy(caption).to(device)
        self.entry = torch.from_numpy(entry).to(device)
        self.is_relevant = self.caption >= 0
        # Clips that have an s-th caption, or None when all do (then no column selection is needed).
        self.slot_clips = [None if has.all() else has.nonzero().squeeze(1) for has in self.is_relevant.T]
        self.at_least = torch.zeros(caption.shape, dtype=torch.int64, device=device)
        self.thresholds = torch.empty(0, device=device)

    def set_thresholds(self, relevant_scores: torch.Tensor) -> None:
        """`relevant_scores`: `(n_text, max_clips_per_caption)` in the sorted caption order."""
        scores = relevant_scores.reshape(-1)[self.entry.clamp(min=0)]
        self.thresholds = torch.where(self.is_relevant, scores, torch.inf)

    def count(self, block: torch.Tensor, count_at_least: _AtLeastCounter) -> None:
        """Adds the counts of one `(n_block_captions, n_audio)` block of this language's captions."""
        for slot, clips in enumerate(self.slot_clips):
            if clips is None:
                self.at_least[:, slot] += count_at_least(block, self.thresholds[:, slot], dim=0)
            elif len(clips) > 0:
                self.at_least[clips, slot] += count_at_least(
                    block.index_select(1, clips), self.thresholds[clips, slot], dim=0
                )


@torch.no_grad()
def _rank_relevant_items(
    source: _MatrixScores | _EmbeddingScores,
    relevant_clips: np.ndarray,
    language_of_text: np.ndarray,
    n_languages: int,
    chunk_size: int,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One pass over blocks of captions: T2A positions and per-language A2T positions.

    The A2T counts need each relevant pair's score before its block is reached, so they are taken from
    `source.relevant_scores` and checked bitwise afterwards against the block values; the few clips whose
    values differ are ranked again from column blocks (`_audio_to_text_positions`).

    Args:
        relevant_clips: `(n_text, max_clips_per_caption)` clip indices, -1 for padding.

    Returns:
        `t2a_positions`: `(n_text, max_clips_per_caption)` int64 sorted 0-based positions of each
        caption's relevant clips (padding beyond every cutoff); per language, A2T `positions`
        `(n_queries, max_relevant)` and `num_relevant` `(n_queries,)` of the clips with captions there.
    """
    n_text, n_audio, device = source.n_text, source.n_audio, source.device
    num_clips = (relevant_clips >= 0).sum(axis=1)
    # Language, then most relevant clips first, then first clip: within a block, the captions with an s-th
    # relevant clip are a prefix, and with one clip per caption a clip's captions sit together.
    order = np.lexsort((relevant_clips[:, 0], -num_clips, language_of_text))
    sorted_clips = relevant_clips[order]
    sorted_num_clips = num_clips[order]
    language_starts = np.searchsorted(language_of_text[order], np.arange(n_languages + 1))
    blocks = [
        (code, start, min(start + chunk_size, language_starts[code + 1]))
        for code in range(n_languages)
        for start in range(language_starts[code], language_starts[code + 1], chunk_size)
    ]
    sorted_text = torch.from_numpy(order).to(device)
    sorted_relevant = torch.from_numpy(sorted_clips).to(device)
    galleries = [
        _AudioToTextGallery(
            int(language_starts[code]),
            sorted_clips[language_starts[code] : language_starts[code + 1]],
            n_audio,
            device,
        )
        for code in range(n_languages)
    ]
    # Fewer captions per block when they have several clips, so that each block scores few distinct clips.
    positive_block_rows = max(1, _POSITIVE_BLOCK_ROWS // relevant_clips.shape[1])
    expected_scores = torch.cat(
        [
            source.relevant_scores(sorted_text[start:stop], sorted_relevant[start:stop])
            for _, block_start, block_stop in blocks
            for start in range(block_start, block_stop, positive_block_rows)
            for stop in (min(start + positive_block_rows, block_stop),)
        ]
    )
    for gallery in galleries:
        gallery.set_thresholds(expected_scores)

    count_at_least = _AtLeastCounter(device, max(n_text, n_audio))
    relevant_scores = torch.empty_like(expected_scores)
    t2a_at_least = torch.zeros(relevant_clips.shape, dtype=torch.int64, device=device)
    for code, start, stop in blocks:
        block = source.text_block(sorted_text[start:stop])
        relevant_scores[start:stop] = block.gather(1, sorted_relevant[start:stop].clamp(min=0))
        for slot in range(relevant_clips.shape[1]):
            rows = int((sorted_num_clips[start:stop] > slot).sum())
            if rows == 0:
                break
            t2a_at_least[start : start + rows, slot] = count_at_least(
                block[:rows], relevant_scores[start : start + rows, slot, None], dim=1
            )
        galleries[code].count(block, count_at_least)
    sorted_t2a_positions = _positions_from_counts(t2a_at_least, relevant_scores, sorted_relevant >= 0)

    a2t = []
    for gallery in galleries:
        expected_thresholds = gallery.thresholds
        gallery.set_thresholds(relevant_scores)
        consistent = ((gallery.thresholds == expected_thresholds) | ~gallery.is_relevant).all(dim=1)
        positions = _positions_from_counts(gallery.at_least, gallery.thresholds, gallery.is_relevant)
        recount = (~consistent & torch.from_numpy(gallery.num_relevant > 0).to(device)).nonzero().squeeze(1)
        if len(recount) > 0:
            logger.info(
                f"Ranking {len(recount)} clip(s) again from column blocks: their scores differ in rounding."
            )
            positions[recount] = _audio_to_text_positions(
                source,
                sorted_text[gallery.start : gallery.stop],
                gallery.caption[recount],
                recount,
                chunk_size,
            )
        has_caption = torch.from_numpy(gallery.num_relevant > 0)
        a2t.append(
            (positions.cpu()[has_caption], torch.from_numpy(gallery.num_relevant[gallery.num_relevant > 0]))
        )
    t2a_positions = torch.empty_like(sorted_t2a_positions, device="cpu")
    t2a_positions[torch.from_numpy(order)] = sorted_t2a_positions.cpu()
    return t2a_positions, a2t


def _positions_from_counts(
    at_least: torch.Tensor, relevant_scores: torch.Tensor, is_relevant: torch.Tensor
) -> torch.Tensor:
    """Positions of each query's relevant items from counts of gallery items scoring at least as high.

    Args:
        at_least: `(n_queries, max_relevant)` gallery items (relevant or not, the item itself included)
            scoring at least as high as each relevant item.
        relevant_scores: `(n_queries, max_relevant)` scores of the relevant items.
        is_relevant: `(n_queries, max_relevant)` False for padding.

    Returns:
        `(n_queries, max_relevant)` int64 0-based positions in increasing order, padding beyond every cutoff.
    """
    max_relevant = at_least.shape[1]
    positions = torch.empty_like(at_least)
    # The (rows, max_relevant, max_relevant) comparison is bounded like a score block.
    rows_per_chunk = max(1, DEFAULT_BLOCK_ENTRIES // max_relevant**2)
    for start in range(0, len(at_least), rows_per_chunk):
        rows = slice(start, start + rows_per_chunk)
        scores, relevant = relevant_scores[rows], is_relevant[rows]
        relevant_at_least = ((scores[:, None, :] >= scores[:, :, None]) & relevant[:, None, :]).sum(dim=2)
        irrelevant_at_least = torch.where(relevant, at_least[rows] - relevant_at_least, _PADDING_POSITION)
        # The i-th best relevant item sits after the irrelevant items at or above it and the i - 1 relevant
        # ones before it; sorting the counts orders the items by score (ties share a count).
        positions[rows] = irrelevant_at_least.sort(dim=1).values + torch.arange(
            max_relevant, device=at_least.device
        )
    return positions


def _audio_to_text_positions(
    source: _MatrixScores | _EmbeddingScores,
    gallery: torch.Tensor,
    relevant: torch.Tensor,
    clips: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """A2T positions of `clips` from column blocks, each rank using the values of one block.

    Args:
        gallery: `(n_gallery,)` caption indices forming the gallery.
        relevant: `(n_clips, max_relevant)` each clip's captions as indices into `gallery`, -1 for padding.
        clips: `(n_clips,)` clip indices.

    Returns:
        `(n_clips, max_relevant)` positions as `_positions_from_counts`.
    """
    count_at_least = _AtLeastCounter(gallery.device, len(gallery))
    is_relevant = relevant >= 0
    positions = torch.empty_like(relevant)
    clips_per_block = max(1, chunk_size * source.n_audio // len(gallery))
    for start in range(0, len(clips), clips_per_block):
        stop = min(start + clips_per_block, len(clips))
        block = source.audio_block(gallery, clips[start:stop])  # (n_gallery, n_block_clips)
        relevant_scores = block.T.gather(1, relevant[start:stop].clamp(min=0))
        at_least = torch.stack(
            [count_at_least(block, relevant_scores[:, j], dim=0) for j in range(relevant.shape[1])], dim=1
        )
        positions[start:stop] = _positions_from_counts(at_least, relevant_scores, is_relevant[start:stop])
    return positions


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


def _as_caption_groups(
    caption_groups: ArrayLike, relevant_clips: np.ndarray, language_of_text: np.ndarray
) -> np.ndarray:
    """`(n_text,)` int64 group codes, checked to hold one caption per language, all with the same clips."""
    _, group_of_text = _as_labels(caption_groups, len(relevant_clips), "caption_groups")
    _, clip_set_of_text = np.unique(np.sort(relevant_clips, axis=1), axis=0, return_inverse=True)
    clip_set_of_text = clip_set_of_text.reshape(-1)
    n_groups = int(group_of_text.max()) + 1
    first_caption = np.full(n_groups, -1, dtype=np.int64)
    first_caption[group_of_text[::-1]] = np.arange(len(group_of_text))[::-1]
    mismatch = np.flatnonzero(clip_set_of_text[first_caption[group_of_text]] != clip_set_of_text)
    if len(mismatch) > 0:
        caption = int(mismatch[0])
        other = int(first_caption[group_of_text[caption]])
        raise ValueError(
            f"caption_groups puts caption {caption} ({_describe_clips(relevant_clips[caption])}) in a group "
            f"with a caption of {_describe_clips(relevant_clips[other])}; translations of one caption must "
            "share its relevant clips."
        )
    group_language = group_of_text * (int(language_of_text.max()) + 1) + language_of_text
    _, first_index, pair_counts = np.unique(group_language, return_index=True, return_counts=True)
    if (pair_counts > 1).any():
        caption = int(first_index[np.argmax(pair_counts > 1)])
        raise ValueError(
            f"caption_groups has several captions of one language in the group of caption {caption}; "
            "a group holds one translation per language."
        )
    return group_of_text


def _describe_clips(clips: np.ndarray) -> str:
    clips = sorted(int(clip) for clip in clips if clip >= 0)
    return f"clip {clips[0]}" if len(clips) == 1 else f"clips {clips}"


def _mean_rank_variance(t2a_ranks: np.ndarray, group_of_text: np.ndarray) -> float | None:
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


def _as_float_matrix(values: ArrayLike, name: str) -> torch.Tensor:
    try:
        matrix = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name} must be a 2-D array of numbers: {error}") from error
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(matrix.shape)}.")
    if matrix.dtype == torch.bool or matrix.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {matrix.dtype}.")
    return matrix if matrix.is_floating_point() else matrix.double()


def _as_relevant_clips(text_to_audio: ArrayLike, n_text: int, n_audio: int) -> np.ndarray:
    """`(n_text, max_clips_per_caption)` int64 relevant clip indices per caption, -1 for padding, checked."""
    if isinstance(text_to_audio, torch.Tensor) or (
        isinstance(text_to_audio, np.ndarray) and text_to_audio.dtype != object
    ):
        values = _to_numpy(text_to_audio)
    else:
        entries = list(text_to_audio)
        values = np.asarray(entries) if all(_is_scalar(entry) for entry in entries) else None
    if values is None:
        if len(entries) != n_text:
            raise ValueError(f"text_to_audio must have one entry per caption ({n_text}), got {len(entries)}.")
        rows = [_clip_list(entry, caption, n_audio) for caption, entry in enumerate(entries)]
        clips = np.full((n_text, max(len(row) for row in rows)), -1, dtype=np.int64)
        for caption, row in enumerate(rows):
            clips[caption, : len(row)] = row
    else:
        if values.ndim not in (1, 2) or len(values) != n_text or values.size == 0:
            raise ValueError(
                f"text_to_audio must have shape ({n_text},) (one clip per caption) or ({n_text}, R) (R clips "
                f"per caption), or hold one clip index or sequence of clip indices per caption; got shape "
                f"{values.shape}."
            )
        if values.dtype.kind not in "iu":
            raise ValueError(f"text_to_audio must hold integer clip indices, got dtype {values.dtype}.")
        clips = values.astype(np.int64).reshape(n_text, -1)
        out_of_range = (clips < 0) | (clips >= n_audio)
        if out_of_range.any():
            caption, slot = (int(index) for index in np.argwhere(out_of_range)[0])
            raise ValueError(
                f"{_describe_out_of_range(caption, int(clips[caption, slot]), clips.shape[1], n_audio)} "
                f"({int(out_of_range.sum())} out-of-range value(s))."
            )
    if clips.shape[1] > 1:
        ordered = np.sort(clips, axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        if repeated.any():
            caption, slot = (int(index) for index in np.argwhere(repeated)[0])
            raise ValueError(f"text_to_audio[{caption}] lists clip {ordered[caption, slot]} more than once.")
    return clips


def _clip_list(entry: Any, caption: int, n_audio: int) -> list[int]:
    """The relevant clips of one caption given as a clip index or a sequence of them, checked."""
    if _is_scalar(entry):
        values = [entry]
    else:
        values = entry.tolist() if isinstance(entry, (torch.Tensor, np.ndarray)) else list(entry)
        if not values:
            raise ValueError(
                f"text_to_audio[{caption}] is empty; every caption needs at least one relevant clip."
            )
    clips = []
    for value in values:
        if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
            value = value.item()
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"text_to_audio[{caption}] must hold integer clip indices, got {value!r}.")
        if not 0 <= value < n_audio:
            raise ValueError(_describe_out_of_range(caption, int(value), len(values), n_audio) + ".")
        clips.append(int(value))
    return clips


def _describe_out_of_range(caption: int, clip: int, num_clips: int, n_audio: int) -> str:
    if num_clips == 1:
        return f"text_to_audio[{caption}] = {clip} is not a clip index in [0, {n_audio})"
    return f"text_to_audio[{caption}] contains {clip}, which is not a clip index in [0, {n_audio})"


def _is_scalar(entry: Any) -> bool:
    if isinstance(entry, (torch.Tensor, np.ndarray)):
        return entry.ndim == 0
    return isinstance(entry, (str, bytes)) or not isinstance(entry, Iterable)


def _as_labels(labels: ArrayLike, n_text: int, name: str) -> tuple[list[str], np.ndarray]:
    """Names in order of first appearance and `(n_text,)` int64 codes into them."""
    values = _to_numpy(labels)
    if values.shape != (n_text,):
        raise ValueError(f"{name} must have shape ({n_text},) (one label per caption), got {values.shape}.")
    unique, first_index, codes = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first_index)
    rename = np.empty_like(order)
    rename[order] = np.arange(len(order))
    return [str(label) for label in unique[order]], rename[codes.reshape(-1)].astype(np.int64)


def _check_cutoffs(ks: Sequence[int], map_cutoffs: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    for name, values in (("ks", ks), ("map_cutoffs", map_cutoffs)):
        if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
            raise ValueError(f"{name} must be a sequence of positive integers, e.g. (10,), got {values!r}.")
        _check_positive_integers(name, tuple(values))
    return tuple(int(k) for k in ks), tuple(dict.fromkeys(int(c) for c in map_cutoffs))


def _check_positive_integers(name: str, values: tuple[Any, ...]) -> None:
    if not values or any(
        isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in values
    ):
        shown = values[0] if name == "chunk_size" else values
        raise ValueError(f"{name} must be positive integer(s), got {shown!r}.")


def _to_numpy(values: ArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)
