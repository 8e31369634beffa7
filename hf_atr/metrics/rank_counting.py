"""The one pass over blocks of scores that counts where every relevant item ranks, never sorting the score matrix.

Blocks of captions are scored (from a matrix, :class:`MatrixScores`, or from embeddings by a score function,
:class:`EmbeddingScores`) and, for each relevant item, the gallery items scoring at least as high are counted
(:data:`~hf_atr.metrics.ranks.TIE_RULE`); A2T counts per language are taken in the same pass
(:func:`rank_relevant_items`). Memory stays bounded by about two blocks of :data:`DEFAULT_BLOCK_ENTRIES` scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..lazy import get_logger

logger = get_logger(__name__)

# Default block: as many captions as fit in 2**24 scores (64 MiB in float32). Large blocks matter on CPU,
# where every tensor operation has a fixed cost.
DEFAULT_BLOCK_ENTRIES = 2**24
# Captions per block when scoring each caption against its relevant clips ahead of the main pass: small
# enough to keep that pass cheap, large enough for BLAS to round as it does in the main blocks.
_POSITIVE_BLOCK_ROWS = 1024
# Stands in for the missing relevant items of queries with fewer than the most: beyond every cutoff.
_PADDING_POSITION = 2**62

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class MatrixScores:
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


class EmbeddingScores:
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
        # Scoring against the block's own relevant clips only is cheap; `rank_relevant_items` checks the
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
def rank_relevant_items(
    source: MatrixScores | EmbeddingScores,
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
    source: MatrixScores | EmbeddingScores,
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
