"""Exact top-k search of a knowledge base's entries by inner product: plain, or the best pair of each distinct clip.

Two backends return the same entries up to ties: blocks of (query, entry) scores by a matrix product and
``torch.topk`` on the queries' device (:func:`top_entries`, :func:`top_distinct_clips`), or a faiss ``IndexFlatIP``
on the CPU (:func:`flat_ip_index`, then :func:`top_entries_faiss`, :func:`top_distinct_clips_faiss`). The torch
search holds one block of scores at a time, whatever the number of queries.
"""

from __future__ import annotations

import math

import faiss
import numpy as np
import torch

_SEARCH_BLOCK_ENTRIES = 2**24
"""Largest ``(queries, entries)`` score block the torch search holds at once (64 MiB in float32)."""
_DISTINCT_BLOCK_ENTRIES = 2**22
"""The same for distinct-clip search, which holds about 17 bytes per (query, entry) (scores, masks, indices)."""


def flat_ip_index(embeds: torch.Tensor) -> faiss.IndexFlatIP:
    """A faiss exact inner-product index of ``embeds: (entries, dim)`` (float32, on the CPU)."""
    index = faiss.IndexFlatIP(embeds.shape[1])
    index.add(np.ascontiguousarray(embeds.numpy(), dtype=np.float32))
    return index


def top_entries(entries: torch.Tensor, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` of ``entries: (entries, dim)`` for float32 ``queries: (n, dim)`` on their device, by blocks of queries.

    Returns:
        ``(scores, indices)``, each ``(n, k)``: inner products in descending order and the entries' rows.
    """
    block_rows = max(1, _SEARCH_BLOCK_ENTRIES // entries.shape[0])
    blocks = [(block @ entries.T).topk(k, dim=1) for block in queries.split(block_rows)]
    return torch.cat([block.values for block in blocks]), torch.cat([block.indices for block in blocks])


def top_entries_faiss(
    index: faiss.IndexFlatIP, queries: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`top_entries`, searched in a faiss ``index`` on the CPU; the results on ``queries.device``."""
    scores, indices = index.search(np.ascontiguousarray(queries.cpu().numpy()), k)
    return torch.from_numpy(scores).to(queries.device), torch.from_numpy(indices).to(queries.device)


def top_distinct_clips(
    entries: torch.Tensor,
    pair_clip: torch.Tensor,
    num_clips: int,
    queries: torch.Tensor,
    k: int,
    excluded: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best pair of each of the ``k`` best clips (by their best pair) for each query, by blocks of queries.

    Args:
        entries: ``(pairs, dim)`` on the queries' device.
        pair_clip: ``(pairs,)`` the clip of each pair, in ``[0, num_clips)``, on the queries' device.
        queries: ``(n, dim)`` float32.
        k: clips per query; at most the clips there are other than the excluded one.
        excluded: ``(n,)`` the clip each query never gets, −1 for none.

    Returns:
        ``(scores, indices)``, each ``(n, k)``: the clips' best inner products in descending order and the rows of
        those pairs (the first pair of a clip among equal scores).
    """
    block_rows = max(1, _DISTINCT_BLOCK_ENTRIES // pair_clip.shape[0])
    blocks = [
        _top_distinct_clips_of_block(entries, pair_clip, num_clips, block, k, excluded_block)
        for block, excluded_block in zip(queries.split(block_rows), excluded.split(block_rows))
    ]
    return torch.cat([scores for scores, _ in blocks]), torch.cat([indices for _, indices in blocks])


def _top_distinct_clips_of_block(
    entries: torch.Tensor,
    pair_clip: torch.Tensor,
    num_clips: int,
    queries: torch.Tensor,
    k: int,
    excluded: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = queries @ entries.T
    pair_clip = pair_clip.expand_as(scores)
    clip_scores = scores.new_full((scores.shape[0], num_clips), -math.inf)
    clip_scores.scatter_reduce_(1, pair_clip, scores, "amax")
    num_pairs = scores.shape[1]
    pair_numbers = torch.arange(num_pairs, device=scores.device).expand_as(scores)
    best_pair = torch.full_like(clip_scores, num_pairs, dtype=torch.long).scatter_reduce_(
        1, pair_clip, pair_numbers.where(scores == clip_scores.gather(1, pair_clip), num_pairs), "amin"
    )
    rows = (excluded >= 0).nonzero().squeeze(1)
    clip_scores[rows, excluded[rows]] = -math.inf
    top = clip_scores.topk(k, dim=1)
    return top.values, best_pair.gather(1, top.indices)


def top_distinct_clips_faiss(
    index: faiss.IndexFlatIP, pair_clip: torch.Tensor, queries: torch.Tensor, k: int, excluded: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`top_distinct_clips` (``pair_clip`` on the CPU), from a faiss top list of the pairs in ``index``
    long enough to hold ``k + 1`` clips; the results on ``queries.device``."""
    candidates = min(pair_clip.shape[0], (k + 1) * int(torch.bincount(pair_clip).max()))
    scores, indices = index.search(np.ascontiguousarray(queries.cpu().numpy()), candidates)
    scores, indices = torch.from_numpy(scores), torch.from_numpy(indices)
    # Equal scores (a clip's audio stored once per caption) in pair order, as the torch search breaks ties.
    by_pair = indices.sort(dim=1, stable=True).indices
    by_score = scores.gather(1, by_pair).sort(dim=1, descending=True, stable=True).indices
    reorder = by_pair.gather(1, by_score)
    scores, indices = scores.gather(1, reorder), indices.gather(1, reorder)
    clips = pair_clip[indices]
    seen_before = (
        (clips[:, :, None] == clips[:, None, :]) & torch.ones(candidates, candidates).tril(-1).bool()
    ).any(-1)
    kept = ~seen_before & (clips != excluded.cpu()[:, None])
    order = torch.sort((~kept).to(torch.uint8), dim=1, stable=True).indices[:, :k]
    return scores.gather(1, order).to(queries.device), indices.gather(1, order).to(queries.device)


__all__ = [
    "flat_ip_index",
    "top_distinct_clips",
    "top_distinct_clips_faiss",
    "top_entries",
    "top_entries_faiss",
]
