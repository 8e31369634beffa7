"""Exact top-k search of a knowledge base's entries (hf_atr.knowledge.exact_search): torch blocks and faiss agree."""

from __future__ import annotations

import pytest
import torch

from hf_atr.knowledge.exact_search import (
    flat_ip_index,
    top_distinct_clips,
    top_distinct_clips_faiss,
    top_entries,
    top_entries_faiss,
)

# Six pairs of three clips, scored against the query e0 by their first coordinate: clip 0's best pair is row 0
# (0.9), clip 1's row 3 (0.8), clip 2's row 5 (0.7); every gap is 0.1.
ENTRIES = torch.zeros(6, 4)
ENTRIES[:, 0] = torch.tensor([0.9, 0.1, 0.5, 0.8, 0.3, 0.7])
PAIR_CLIP = torch.tensor([0, 0, 1, 1, 2, 2])
QUERIES = torch.eye(4)[:1]


def test_top_entries_are_the_best_rows_in_torch_and_in_faiss():
    for scores, indices in (
        top_entries(ENTRIES, QUERIES, 2),
        top_entries_faiss(flat_ip_index(ENTRIES), QUERIES, 2),
    ):
        assert indices.tolist() == [[0, 3]]
        assert scores[0].tolist() == pytest.approx([0.9, 0.8])


@pytest.mark.parametrize("excluded, rows", [(-1, [0, 3, 5]), (0, [3, 5])])
def test_top_distinct_clips_give_each_clip_s_best_pair_without_the_excluded_clip(excluded, rows):
    k = len(rows)
    excluded = torch.tensor([excluded])
    for scores, indices in (
        top_distinct_clips(ENTRIES, PAIR_CLIP, 3, QUERIES, k, excluded),
        top_distinct_clips_faiss(flat_ip_index(ENTRIES), PAIR_CLIP, QUERIES, k, excluded),
    ):
        assert indices.tolist() == [rows]
        assert scores[0].tolist() == pytest.approx(ENTRIES[rows, 0].tolist())
