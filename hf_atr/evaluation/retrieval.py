"""Fast, memory-bounded audio-text retrieval metrics: R@k, mAP@10, median/mean rank and MRV.

Conventions (DESIGN.md, "Where the papers are ambiguous"):

* Ranks are 0-based and count the gallery items scoring *strictly higher* than the relevant item; ties
  are therefore resolved in favour of the relevant item. When several relevant items of one query tie,
  they take consecutive positions, so the position of the i-th best relevant item (1-based ``i``) is
  ``(#irrelevant items scoring strictly higher) + (i - 1)``. With a single relevant item (T2A) this is
  exactly the number of items scoring strictly higher.
* ``AP@c = (1 / min(c, R)) * sum_{p < c} P@(p + 1) * rel_p`` with ``R`` relevant items (1 clip for
  T2A, where it equals MRR@c; the clip's captions for A2T).
* A2T recall in two conventions: ``a2t_R@k`` is 1 if *any* relevant caption is in the top k (XinhaoMei
  / CLAP / the seed papers); ``a2t_recall_fraction@k`` is the fraction of the clip's captions in the
  top k (DCASE 2023+).
* Median and mean ranks are reported 1-based (the best possible value is 1), as is conventional; for
  A2T they use the best-ranked relevant caption.
* Several languages: T2A queries of every language search the whole audio gallery; for A2T each
  language's captions form their own gallery and clips without a caption in that language are skipped.
  Per-language values carry a ``/<lang>`` suffix and the un-suffixed key is their mean (ATRI's "avg").
* MRV (ATRI Eq. 16): for each caption group (the translations of one caption), the population variance
  across languages of the 0-based T2A rank of the true clip, averaged over the groups.

Ranks are computed in one pass over blocks of captions, by counting the items that score strictly higher
than each relevant item: the score matrix is never materialised in full and never sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers.utils import logging

if TYPE_CHECKING:
    import evaluate

logger = logging.get_logger(__name__)

RETRIEVAL_METRIC_DIR = Path(__file__).resolve().parent / "retrieval_metric"
DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
DEFAULT_MAP_CUTOFF = 10
# Default block: as many captions as fit in 2**24 scores (64 MiB in float32). Large blocks matter on CPU,
# where every tensor operation has a fixed cost.
DEFAULT_BLOCK_ENTRIES = 2**24
# Captions per block when scoring each caption against its own clips ahead of the main pass: small enough
# to keep that pass cheap, large enough for BLAS to round as it does in the main blocks.
_POSITIVE_BLOCK_ROWS = 1024
# Stands in for the missing captions of clips with fewer than the most captions: beyond every cutoff.
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
    map_cutoff: int = DEFAULT_MAP_CUTOFF,
    chunk_size: int | None = None,
) -> dict[str, float]:
    """Text-to-audio and audio-to-text retrieval metrics from a score matrix.

    Args:
        scores: `(n_text, n_audio)` torch tensor or NumPy array; higher means more similar.
        text_to_audio: `(n_text,)` integers, the index of each caption's clip in `[0, n_audio)`. A clip may
            have any number of captions, including none.
        languages: optional `(n_text,)` language of each caption (strings such as ``"eng"`` or ints).
        caption_groups: optional `(n_text,)` labels, equal for the translations of one caption; with
            `languages` it adds ``MRV`` (ATRI Eq. 16).
        ks: cutoffs of the R@k metrics.
        map_cutoff: cutoff ``c`` of mAP@c.
        chunk_size: captions scored at once; the temporary memory is about ``2 * chunk_size * n_audio``
            entries. Default: ``DEFAULT_BLOCK_ENTRIES // n_audio`` (at least 1).

    Returns:
        A flat dict of floats, recall and mAP as fractions in [0, 1]: ``t2a_R@k``, ``a2t_R@k``,
        ``a2t_recall_fraction@k``, ``t2a_mAP@c``, ``a2t_mAP@c``, ``{t2a,a2t}_{median,mean}_rank`` (1-based),
        with ``/<lang>`` suffixed copies per language and ``MRV`` when `languages` is given (see the
        module docstring for the conventions).

    Raises:
        ValueError: on inconsistent shapes, out-of-range clip indices, NaN scores or bad options.
    """
    return _retrieval_metrics(
        _MatrixScores(_as_float_matrix(scores, "scores")),
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        ks=ks,
        map_cutoff=map_cutoff,
        chunk_size=chunk_size,
    )


def retrieval_metrics_from_embeddings(
    audio_embeds: ArrayLike,
    text_embeds: ArrayLike,
    text_to_audio: ArrayLike,
    languages: ArrayLike | None = None,
    caption_groups: ArrayLike | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    map_cutoff: int = DEFAULT_MAP_CUTOFF,
    chunk_size: int | None = None,
    score_fn: ScoreFn | None = None,
) -> dict[str, float]:
    """Retrieval metrics from embeddings, scoring in chunks without building the full score matrix.

    Each score is computed once, in blocks of `chunk_size` captions against all clips (plus a small pass
    scoring each caption against its own block's clips, to know the A2T thresholds in advance). Memory
    stays bounded by about ``2 * chunk_size * n_audio`` entries, e.g. for 10k clips x 50k captions.

    Args:
        audio_embeds: `(n_audio, dim)` torch tensor or NumPy array.
        text_embeds: `(n_text, dim)`; computation runs on `text_embeds`' device.
        text_to_audio: `(n_text,)` index of each caption's clip.
        languages, caption_groups, ks, map_cutoff, chunk_size: as in `retrieval_metrics`.
        score_fn: ``(text_chunk (m, dim), audio_chunk (n, dim)) -> (m, n)`` scores, higher is more similar,
            e.g. negative distances for a Euclidean or Mahalanobis head. Defaults to the inner product.

    Returns:
        The same dict as `retrieval_metrics` on the full score matrix.
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
    return _retrieval_metrics(
        _EmbeddingScores(audio, text, score_fn or inner_product_scores),
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        ks=ks,
        map_cutoff=map_cutoff,
        chunk_size=chunk_size,
    )


def load_retrieval_metric(**load_kwargs: Any) -> evaluate.EvaluationModule:
    """``evaluate.load`` of the bundled `retrieval_metric` module (offline; wraps `retrieval_metrics`).

    Args:
        **load_kwargs: forwarded to `evaluate.load` (e.g. ``cache_dir``, ``experiment_id``).
    """
    import evaluate  # ~5 s: pulls in transformers pipelines, so only when asked for

    return evaluate.load(str(RETRIEVAL_METRIC_DIR), **load_kwargs)


@torch.no_grad()
def _retrieval_metrics(
    source: _MatrixScores | _EmbeddingScores,
    text_to_audio: ArrayLike,
    *,
    languages: ArrayLike | None,
    caption_groups: ArrayLike | None,
    ks: Sequence[int],
    map_cutoff: int,
    chunk_size: int | None,
) -> dict[str, float]:
    n_text, n_audio = source.n_text, source.n_audio
    if n_text == 0 or n_audio == 0:
        raise ValueError(
            f"Need at least one caption and one clip, got {n_text} captions and {n_audio} clips."
        )
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_BLOCK_ENTRIES // n_audio)
    ks = _check_cutoffs(ks, map_cutoff, chunk_size)
    clip_of_text = _as_clip_indices(text_to_audio, n_text, n_audio)
    if languages is None:
        if caption_groups is not None:
            raise ValueError("caption_groups needs languages: MRV measures rank variance across languages.")
        language_names, language_of_text = [""], np.zeros(n_text, dtype=np.int64)
    else:
        language_names, language_of_text = _as_labels(languages, n_text, "languages")
    if caption_groups is not None:
        group_of_text = _as_caption_groups(caption_groups, clip_of_text, language_of_text)

    t2a_ranks, a2t = _rank_relevant_items(
        source, clip_of_text, language_of_text, len(language_names), chunk_size
    )
    per_language = {}
    for code, name in enumerate(language_names):
        captions = language_of_text == code
        t2a = _query_metrics(
            torch.from_numpy(t2a_ranks[captions])[:, None], torch.ones(int(captions.sum())), ks, map_cutoff
        )
        t2a.pop("recall_fraction")  # equals R@k with one relevant clip
        per_language[name] = {
            **_flatten("t2a", t2a),
            **_flatten("a2t", _query_metrics(*a2t[code], ks, map_cutoff)),
        }
    if languages is None:
        return per_language[""]

    metrics = {
        key: float(np.mean([values[key] for values in per_language.values()]))
        for key in per_language[language_names[0]]
    }
    for name, values in per_language.items():
        metrics.update({f"{key}/{name}": value for key, value in values.items()})
    if caption_groups is not None:
        mrv = _mean_rank_variance(t2a_ranks, group_of_text)
        if mrv is None:
            logger.warning("No caption group has captions in two or more languages: MRV is not reported.")
        else:
            metrics["MRV"] = mrv
    return metrics


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

    def positive_scores(self, text_index: torch.Tensor, clip_index: torch.Tensor) -> torch.Tensor:
        return self.scores[text_index, clip_index]

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

    def positive_scores(self, text_index: torch.Tensor, clip_index: torch.Tensor) -> torch.Tensor:
        # Scoring against the block's own clips only is cheap; `_rank_relevant_items` checks the values
        # bitwise against the full rows, because BLAS may round differently for other shapes.
        clips, column = torch.unique(clip_index, return_inverse=True)
        return self._score(text_index, clips).gather(1, column[:, None]).squeeze(1)

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


class _GreaterCounter:
    """Counts the entries of score blocks strictly greater than thresholds.

    Summing a float mask written into one reused buffer is several times faster on CPU than summing a
    fresh bool mask (which goes through int64 and page-faults a new allocation for every block). The
    float sums are exact: float32 counts are exact up to 2**24, beyond which float64 is used.
    """

    def __init__(self, device: torch.device, max_count: int):
        self.buffer = torch.empty(
            0, dtype=torch.float32 if max_count <= 2**24 else torch.float64, device=device
        )

    def __call__(self, block: torch.Tensor, thresholds: torch.Tensor, dim: int) -> torch.Tensor:
        """`(block.shape without dim,)` int64 counts of ``block > thresholds`` (broadcast) along `dim`."""
        if self.buffer.numel() < block.numel():
            self.buffer = torch.empty(block.numel(), dtype=self.buffer.dtype, device=self.buffer.device)
        mask = torch.gt(block, thresholds, out=self.buffer[: block.numel()].view(block.shape))
        return mask.sum(dim=dim).long()


class _AudioToTextGallery:
    """A2T bookkeeping for the captions of one language (contiguous in the language-then-clip order).

    `relevant[a, j]` is the position, in that order, of clip `a`'s j-th caption (-1 past its last one);
    `higher[a, j]` accumulates the number of the language's captions scoring strictly above it.
    """

    def __init__(self, start: int, clip_of_caption: np.ndarray, n_audio: int, device: torch.device):
        self.start, self.stop = start, start + len(clip_of_caption)
        self.num_relevant = np.bincount(clip_of_caption, minlength=n_audio)
        max_relevant = int(self.num_relevant.max())
        first = np.cumsum(self.num_relevant) - self.num_relevant
        slot = np.arange(len(clip_of_caption)) - np.repeat(first, self.num_relevant)
        relevant = np.full((n_audio, max_relevant), -1, dtype=np.int64)
        relevant[clip_of_caption, slot] = np.arange(self.start, self.stop)
        self.relevant = torch.from_numpy(relevant).to(device)
        self.is_relevant = self.relevant >= 0
        # Clips that have a j-th caption, or None when all do (then no column selection is needed).
        self.slot_clips = [None if has.all() else has.nonzero().squeeze(1) for has in self.is_relevant.T]
        self.higher = torch.zeros((n_audio, max_relevant), dtype=torch.int64, device=device)
        self.thresholds = torch.empty(0, device=device)

    def set_thresholds(self, positive_scores: torch.Tensor) -> None:
        """`positive_scores`: `(n_text,)` in the language-then-clip order."""
        relevant_scores = positive_scores[self.relevant.clamp(min=0)]
        self.thresholds = torch.where(self.is_relevant, relevant_scores, torch.inf)

    def count(self, block: torch.Tensor, count_greater: _GreaterCounter) -> None:
        """Adds the counts of one `(n_block_captions, n_audio)` block of this language's captions."""
        for j, clips in enumerate(self.slot_clips):
            if clips is None:
                self.higher[:, j] += count_greater(block, self.thresholds[:, j], dim=0)
            elif len(clips) > 0:
                self.higher[clips, j] += count_greater(
                    block.index_select(1, clips), self.thresholds[clips, j], dim=0
                )


@torch.no_grad()
def _rank_relevant_items(
    source: _MatrixScores | _EmbeddingScores,
    clip_of_text: np.ndarray,
    language_of_text: np.ndarray,
    n_languages: int,
    chunk_size: int,
) -> tuple[np.ndarray, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One pass over blocks of captions: T2A ranks and per-language A2T positions.

    The A2T counts need each relevant caption's score before its block is reached, so they are taken
    from `source.positive_scores` and checked bitwise afterwards against the block values; the few clips
    whose values differ are ranked again from column blocks (`_audio_to_text_positions`).

    Returns:
        `t2a_ranks`: `(n_text,)` int64 0-based ranks; per language, A2T `positions` `(n_queries,
        max_relevant)` and `num_relevant` `(n_queries,)` (see `_audio_to_text_positions`).
    """
    n_text, n_audio, device = source.n_text, source.n_audio, source.device
    # Language-then-clip order: a block holds one language, and a clip's captions sit together.
    order = np.lexsort((clip_of_text, language_of_text))
    language_starts = np.searchsorted(language_of_text[order], np.arange(n_languages + 1))
    blocks = [
        (code, start, min(start + chunk_size, language_starts[code + 1]))
        for code in range(n_languages)
        for start in range(language_starts[code], language_starts[code + 1], chunk_size)
    ]
    sorted_text = torch.from_numpy(order).to(device)
    sorted_clip = torch.from_numpy(clip_of_text[order]).to(device)
    galleries = [
        _AudioToTextGallery(
            int(language_starts[code]),
            clip_of_text[order[language_starts[code] : language_starts[code + 1]]],
            n_audio,
            device,
        )
        for code in range(n_languages)
    ]
    expected_positive = torch.cat(
        [
            source.positive_scores(sorted_text[start:stop], sorted_clip[start:stop])
            for _, block_start, block_stop in blocks
            for start in range(block_start, block_stop, _POSITIVE_BLOCK_ROWS)
            for stop in (min(start + _POSITIVE_BLOCK_ROWS, block_stop),)
        ]
    )
    for gallery in galleries:
        gallery.set_thresholds(expected_positive)

    count_greater = _GreaterCounter(device, max(n_text, n_audio))
    positive = torch.empty_like(expected_positive)
    t2a_ranks = torch.empty(n_text, dtype=torch.int64, device=device)
    for code, start, stop in blocks:
        block = source.text_block(sorted_text[start:stop])
        positive[start:stop] = block.gather(1, sorted_clip[start:stop, None]).squeeze(1)
        t2a_ranks[start:stop] = count_greater(block, positive[start:stop, None], dim=1)
        galleries[code].count(block, count_greater)

    a2t = []
    for gallery in galleries:
        expected_thresholds = gallery.thresholds
        gallery.set_thresholds(positive)
        consistent = ((gallery.thresholds == expected_thresholds) | ~gallery.is_relevant).all(dim=1)
        positions = _positions_from_counts(gallery.higher, gallery.thresholds, gallery.is_relevant)
        recount = (~consistent & torch.from_numpy(gallery.num_relevant > 0).to(device)).nonzero().squeeze(1)
        if len(recount) > 0:
            logger.info(
                f"Ranking {len(recount)} clip(s) again from column blocks: their scores differ in rounding."
            )
            positions[recount] = _audio_to_text_positions(
                source,
                sorted_text[gallery.start : gallery.stop],
                gallery.relevant[recount] - gallery.start,
                recount,
                chunk_size,
            )
        has_caption = torch.from_numpy(gallery.num_relevant > 0)
        a2t.append(
            (positions.cpu()[has_caption], torch.from_numpy(gallery.num_relevant[gallery.num_relevant > 0]))
        )
    ranks = np.empty(n_text, dtype=np.int64)
    ranks[order] = t2a_ranks.cpu().numpy()
    return ranks, a2t


def _positions_from_counts(
    higher: torch.Tensor, relevant_scores: torch.Tensor, is_relevant: torch.Tensor
) -> torch.Tensor:
    """Positions of each query's relevant items from counts of gallery items scoring strictly higher.

    Args:
        higher: `(n_queries, max_relevant)` gallery items (relevant or not) scoring strictly higher.
        relevant_scores: `(n_queries, max_relevant)` scores of the relevant items.
        is_relevant: `(n_queries, max_relevant)` False for padding.

    Returns:
        `(n_queries, max_relevant)` int64 0-based positions in increasing order, padding beyond every cutoff.
    """
    relevant_higher = (
        (relevant_scores[:, None, :] > relevant_scores[:, :, None]) & is_relevant[:, None, :]
    ).sum(dim=2)
    irrelevant_higher = torch.where(is_relevant, higher - relevant_higher, _PADDING_POSITION)
    # The i-th best relevant item sits after the irrelevant items above it and the i - 1 relevant ones.
    return irrelevant_higher.sort(dim=1).values + torch.arange(higher.shape[1], device=higher.device)


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
    count_greater = _GreaterCounter(gallery.device, len(gallery))
    is_relevant = relevant >= 0
    positions = torch.empty_like(relevant)
    clips_per_block = max(1, chunk_size * source.n_audio // len(gallery))
    for start in range(0, len(clips), clips_per_block):
        stop = min(start + clips_per_block, len(clips))
        block = source.audio_block(gallery, clips[start:stop])  # (n_gallery, n_block_clips)
        relevant_scores = block.T.gather(1, relevant[start:stop].clamp(min=0))
        higher = torch.stack(
            [count_greater(block, relevant_scores[:, j], dim=0) for j in range(relevant.shape[1])], dim=1
        )
        positions[start:stop] = _positions_from_counts(higher, relevant_scores, is_relevant[start:stop])
    return positions


def _query_metrics(
    positions: torch.Tensor, num_relevant: torch.Tensor, ks: tuple[int, ...], map_cutoff: int
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
    average_precision = torch.where(positions < map_cutoff, precision_at_hit, 0.0).sum(
        dim=1
    ) / num_relevant.clamp(max=map_cutoff)
    return {
        "R": {k: float((best < k).double().mean()) for k in ks},
        "recall_fraction": {k: float(((positions < k).sum(dim=1) / num_relevant).mean()) for k in ks},
        "mAP": {map_cutoff: float(average_precision.mean())},
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
    caption_groups: ArrayLike, clip_of_text: np.ndarray, language_of_text: np.ndarray
) -> np.ndarray:
    """`(n_text,)` int64 group codes, checked to hold one caption per language, all of the same clip."""
    _, group_of_text = _as_labels(caption_groups, len(clip_of_text), "caption_groups")
    n_groups = int(group_of_text.max()) + 1
    first_clip = np.full(n_groups, -1, dtype=np.int64)
    first_clip[group_of_text[::-1]] = clip_of_text[::-1]
    mismatch = np.flatnonzero(first_clip[group_of_text] != clip_of_text)
    if len(mismatch) > 0:
        caption = int(mismatch[0])
        raise ValueError(
            f"caption_groups puts caption {caption} (clip {clip_of_text[caption]}) in a group with a caption "
            f"of clip {first_clip[group_of_text[caption]]}; translations of one caption must share its clip."
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


def _as_clip_indices(text_to_audio: ArrayLike, n_text: int, n_audio: int) -> np.ndarray:
    clips = _to_numpy(text_to_audio)
    if clips.shape != (n_text,):
        raise ValueError(
            f"text_to_audio must have shape ({n_text},) (one clip per caption), got {clips.shape}."
        )
    if clips.dtype.kind not in "iu":
        raise ValueError(f"text_to_audio must hold integer clip indices, got dtype {clips.dtype}.")
    out_of_range = np.flatnonzero((clips < 0) | (clips >= n_audio))
    if len(out_of_range) > 0:
        caption = int(out_of_range[0])
        raise ValueError(
            f"text_to_audio[{caption}] = {clips[caption]} is not a clip index in [0, {n_audio}) "
            f"({len(out_of_range)} out-of-range value(s))."
        )
    return clips.astype(np.int64)


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


def _check_cutoffs(ks: Sequence[int], map_cutoff: int, chunk_size: int) -> tuple[int, ...]:
    ks = tuple(ks)
    for name, values in (("ks", ks), ("map_cutoff", (map_cutoff,)), ("chunk_size", (chunk_size,))):
        if not values or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in values
        ):
            raise ValueError(
                f"{name} must be positive integer(s), got {values if name == 'ks' else values[0]!r}."
            )
    return tuple(int(k) for k in ks)


def _to_numpy(values: ArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)
