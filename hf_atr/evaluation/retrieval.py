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

Ranks are computed chunk by chunk with comparisons against the relevant item's score: the score matrix
is never materialised in full and never sorted.
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
DEFAULT_CHUNK_SIZE = 1024
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
    chunk_size: int = DEFAULT_CHUNK_SIZE,
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
        chunk_size: captions ranked at once; bounds the temporary memory to about
            ``chunk_size * n_audio`` entries.

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
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    score_fn: ScoreFn | None = None,
) -> dict[str, float]:
    """Retrieval metrics from embeddings, scoring in chunks without building the full score matrix.

    The scores are computed twice, once in caption blocks (T2A) and once in clip blocks (A2T), so that
    every rank compares values produced by the same call; memory stays bounded (about
    ``chunk_size * n_audio`` score entries at a time) for 10k clips x 50k captions.

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
        if not torch.isfinite(embeds).all():
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


class _MatrixScores:
    """Blocks of an explicit `(n_text, n_audio)` score matrix."""

    def __init__(self, scores: torch.Tensor):
        self.scores = scores
        self.n_text, self.n_audio = scores.shape
        self.device = scores.device

    def text_block(self, start: int, stop: int) -> torch.Tensor:
        # The T2A pass visits every row once, so checking here covers the whole matrix without a full-size mask.
        block = self.scores[start:stop]
        if torch.isnan(block).any():
            text_index, audio_index = torch.isnan(block).nonzero()[0].tolist()
            raise ValueError(
                f"scores contains NaN, e.g. at caption {start + text_index}, clip {audio_index}."
            )
        return block

    def audio_block(self, text_index: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        return self.scores[:, start:stop].index_select(0, text_index)


class _EmbeddingScores:
    """Blocks of ``score_fn(text_embeds, audio_embeds)``, computed on demand and checked."""

    def __init__(self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor, score_fn: ScoreFn):
        self.audio_embeds = audio_embeds
        self.text_embeds = text_embeds
        self.score_fn = score_fn
        self.n_text, self.n_audio = len(text_embeds), len(audio_embeds)
        self.device = text_embeds.device

    def text_block(self, start: int, stop: int) -> torch.Tensor:
        return self._score(self.text_embeds[start:stop], self.audio_embeds, f"captions {start}..{stop - 1}")

    def audio_block(self, text_index: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        return self._score(
            self.text_embeds.index_select(0, text_index),
            self.audio_embeds[start:stop],
            f"clips {start}..{stop - 1}",
        )

    def _score(self, text: torch.Tensor, audio: torch.Tensor, where: str) -> torch.Tensor:
        block = self.score_fn(text, audio)
        if not isinstance(block, torch.Tensor) or tuple(block.shape) != (len(text), len(audio)):
            shape = tuple(block.shape) if isinstance(block, torch.Tensor) else type(block).__name__
            raise ValueError(
                f"score_fn must return a ({len(text)}, {len(audio)}) tensor for {where}, got {shape}."
            )
        if torch.isnan(block).any():
            raise ValueError(f"score_fn returned NaN scores for {where}.")
        return block


@torch.no_grad()
def _retrieval_metrics(
    source: _MatrixScores | _EmbeddingScores,
    text_to_audio: ArrayLike,
    *,
    languages: ArrayLike | None,
    caption_groups: ArrayLike | None,
    ks: Sequence[int],
    map_cutoff: int,
    chunk_size: int,
) -> dict[str, float]:
    n_text, n_audio = source.n_text, source.n_audio
    if n_text == 0 or n_audio == 0:
        raise ValueError(
            f"Need at least one caption and one clip, got {n_text} captions and {n_audio} clips."
        )
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

    t2a_ranks = _text_to_audio_ranks(source, clip_of_text, chunk_size)
    per_language = {}
    for code, name in enumerate(language_names):
        captions = np.flatnonzero(language_of_text == code)
        t2a = _query_metrics(
            torch.from_numpy(t2a_ranks[captions])[:, None], torch.ones(len(captions)), ks, map_cutoff
        )
        t2a.pop("recall_fraction")  # equals R@k with one relevant clip
        a2t_positions, a2t_relevant = _audio_to_text_positions(
            source, captions, clip_of_text[captions], chunk_size
        )
        a2t = _query_metrics(a2t_positions, a2t_relevant, ks, map_cutoff)
        per_language[name] = {**_flatten("t2a", t2a), **_flatten("a2t", a2t)}
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


def _text_to_audio_ranks(
    source: _MatrixScores | _EmbeddingScores, clip_of_text: np.ndarray, chunk_size: int
) -> np.ndarray:
    """0-based rank of each caption's clip: clips scoring strictly higher. Returns `(n_text,)` int64."""
    clips = torch.from_numpy(clip_of_text).to(source.device)
    ranks = np.empty(source.n_text, dtype=np.int64)
    for start in range(0, source.n_text, chunk_size):
        stop = min(start + chunk_size, source.n_text)
        block = source.text_block(start, stop)
        positive = block.gather(1, clips[start:stop, None])
        ranks[start:stop] = (block > positive).sum(dim=1).cpu().numpy()
    return ranks


def _audio_to_text_positions(
    source: _MatrixScores | _EmbeddingScores,
    captions: np.ndarray,
    clip_of_caption: np.ndarray,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of each clip's captions in the gallery `captions` (one language).

    Args:
        captions: `(n_gallery,)` caption indices forming the gallery.
        clip_of_caption: `(n_gallery,)` clip of each of them.

    Returns:
        `positions`: `(n_queries, max_relevant)` int64, 0-based positions of the relevant captions in
        increasing order, padded with a value beyond every cutoff; `num_relevant`: `(n_queries,)`.
        Only clips with at least one caption in the gallery are queries.
    """
    n_gallery, n_audio = len(captions), source.n_audio
    num_relevant = np.bincount(clip_of_caption, minlength=n_audio)
    max_relevant = int(num_relevant.max())
    # relevant[a, j]: gallery index of the j-th caption of clip a, -1 where the clip has fewer captions.
    by_clip = np.argsort(clip_of_caption, kind="stable")
    slot = np.arange(n_gallery) - np.repeat(np.cumsum(num_relevant) - num_relevant, num_relevant)
    relevant = np.full((n_audio, max_relevant), -1, dtype=np.int64)
    relevant[clip_of_caption[by_clip], slot] = by_clip
    relevant = torch.from_numpy(relevant).to(source.device)
    gallery = torch.from_numpy(captions).to(source.device)

    positions = torch.empty((n_audio, max_relevant), dtype=torch.int64)
    clips_per_block = max(1, chunk_size * n_audio // n_gallery)
    for start in range(0, n_audio, clips_per_block):
        stop = min(start + clips_per_block, n_audio)
        block = source.audio_block(gallery, start, stop)  # (n_gallery, n_clips)
        block_relevant = relevant[start:stop]
        is_relevant = block_relevant >= 0
        relevant_scores = block.T.gather(1, block_relevant.clamp(min=0))  # (n_clips, max_relevant)
        higher = torch.zeros_like(block_relevant)
        for j in range(max_relevant):
            has_slot = is_relevant[:, j]
            if has_slot.all():
                higher[:, j] = (block > relevant_scores[:, j]).sum(dim=0)
            elif has_slot.any():
                clip_index = has_slot.nonzero().squeeze(1)
                threshold = relevant_scores[clip_index, j]
                higher[clip_index, j] = (block.index_select(1, clip_index) > threshold).sum(dim=0)
        relevant_higher = (
            (relevant_scores[:, None, :] > relevant_scores[:, :, None]) & is_relevant[:, None, :]
        ).sum(dim=2)
        irrelevant_higher = torch.where(is_relevant, higher - relevant_higher, _PADDING_POSITION)
        # The i-th best relevant caption sits after the irrelevant ones above it and the i - 1 relevant ones.
        ordered = irrelevant_higher.sort(dim=1).values + torch.arange(max_relevant, device=source.device)
        positions[start:stop] = ordered.cpu()
    has_caption = torch.from_numpy(num_relevant > 0)
    return positions[has_caption], torch.from_numpy(num_relevant[num_relevant > 0])


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
