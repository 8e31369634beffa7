"""hf_atr.metrics.ranks: the positions behind the metrics (the metrics themselves: tests/metrics/test_retrieval.py)."""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest
import torch

from hf_atr.metrics.ranks import QueryRanks


def test_chance_recall_is_the_expected_recall_of_random_scores():
    # Exhaustive over every ordering of a gallery of 6 items: a query with 2 relevant items.
    positions = torch.tensor([[0, 1]])
    ranks = QueryRanks(positions=positions, num_relevant=torch.tensor([2]), gallery_size=6)
    orderings = list(permutations(range(6)))
    for k in (1, 2, 3, 5, 6):
        hit = np.mean([min(order.index(0), order.index(1)) < k for order in orderings])
        assert ranks.chance_recall_at([k])[0] == pytest.approx(hit)
    one_relevant = QueryRanks(positions=torch.tensor([[3]]), num_relevant=torch.tensor([1]), gallery_size=40)
    np.testing.assert_allclose(
        one_relevant.chance_recall_at(range(1, 51)), np.minimum(np.arange(1, 51), 40) / 40
    )
