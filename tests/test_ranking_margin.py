"""tests/ranking_margin.py: orders of computed scores are read only where their margins are wide; a near-tie fails
with a message asking for a clearer case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from ranking_margin import (
    MIN_RELATIVE_GAP,
    clear_argmax,
    clear_best_among,
    clear_rank_of,
    clear_ranking,
    clear_top_k,
)

NEAR_TIE = "near-tie.*Build a clearer case"

ISSUE_SCORES = [-0.00172850443, -0.00172849745, -0.00172869815]
"""Three windows of a random-init model whose best two are 7e-9 apart: their argmax flipped with the CPU."""


def test_wide_gaps_give_the_order():
    scores = [0.1, 0.9, -0.5, 0.4]
    assert clear_argmax(scores) == 1
    assert clear_ranking(scores).tolist() == [1, 3, 0, 2]
    assert clear_ranking(torch.tensor(scores), k=2).tolist() == [1, 3]
    assert clear_top_k(np.array(scores), 3).tolist() == [1, 3, 0]


def test_rows_give_one_order_per_query():
    scores = torch.tensor([[0.0, 1.0, 2.0], [5.0, -1.0, 3.0]], requires_grad=True)
    assert clear_argmax(scores).tolist() == [2, 0]
    assert clear_ranking(scores).tolist() == [[2, 1, 0], [0, 2, 1]]
    assert clear_top_k(scores, 2).tolist() == [[2, 1], [0, 2]]


def test_the_near_tie_that_flipped_with_the_cpu_fails_on_every_cpu():
    with pytest.raises(AssertionError, match=NEAR_TIE) as raised:
        clear_argmax(ISSUE_SCORES)
    assert (
        "-0.00172849745 (item 1) leading -0.00172850443 (item 0) by 6.98e-09, 4e-06 of the score scale"
        in str(raised.value)
    )


def test_a_gap_of_twice_the_margin_passes_and_one_of_half_fails():
    scale = 2.0
    assert clear_argmax([scale, scale * (1 - 2 * MIN_RELATIVE_GAP)]) == 0
    with pytest.raises(AssertionError, match=NEAR_TIE):
        clear_argmax([scale, scale * (1 - 0.5 * MIN_RELATIVE_GAP)])


def test_a_ranking_checks_every_gap_it_relies_on_and_a_top_k_only_its_boundary():
    scores = [3.0, 2.0, 2.0 + 1e-9, 0.0]
    with pytest.raises(AssertionError, match=NEAR_TIE):
        clear_ranking(scores)
    with pytest.raises(AssertionError, match=NEAR_TIE):
        clear_top_k(scores, 2)
    assert clear_ranking(scores, k=1).tolist() == [0]  # only the lead of the best over the second counts
    assert sorted(clear_top_k(scores, 3).tolist()) == [0, 1, 2]  # the tie lies inside the top 3
    with pytest.raises(AssertionError, match=rf"query 1: {NEAR_TIE}"):
        clear_argmax([[1.0, 0.0], [1.0, 1.0]])


def test_exact_ties_fail():
    with pytest.raises(AssertionError, match=NEAR_TIE):
        clear_argmax([0.5, 0.5, 0.1])


def test_a_given_scale_judges_small_scores_by_the_size_of_their_terms():
    cosines = [
        2e-5,
        1e-5,
        -3e-5,
    ]  # a wide gap relative to the scores, within rounding of unit vectors' cosines
    assert clear_argmax(cosines) == 0
    with pytest.raises(AssertionError, match=r"of the score scale 1 \(needed: 0.0001\)"):
        clear_argmax(cosines, scale=1.0)


def test_scores_of_another_shape_are_refused():
    with pytest.raises(
        ValueError, match=r"scores must be \(items,\) or \(queries, items\), got shape \(1, 2, 2\)"
    ):
        clear_argmax(np.zeros((1, 2, 2)))


def test_the_best_among_candidates_needs_a_wide_lead_over_the_rest_only():
    windows = np.array([0.1, 0.8, 0.8 + 1e-9, 0.3])  # two windows hold the event and tie
    assert clear_best_among(windows, [1, 2]) == 2
    assert clear_best_among(windows, windows > 0.5) == 2
    with pytest.raises(AssertionError, match=NEAR_TIE):
        clear_best_among(windows, [0, 1])  # the event's best, 1, ties with 2, outside
    with pytest.raises(ValueError, match="candidates must hold some items and leave some out, got 4 of 4"):
        clear_best_among(windows, windows > 0)


def test_the_rank_of_a_relevant_item_needs_its_score_apart_from_every_other_only():
    scores = torch.tensor([[0.9, 0.5, 0.5 + 1e-9], [0.1, 0.2, 0.3]])  # the others of query 0 tie
    assert clear_rank_of(scores, [0, 1]).tolist() == [1, 2]
    with pytest.raises(AssertionError, match=rf"query 0: {NEAR_TIE}"):
        clear_rank_of(scores, [1, 1])  # item 1 ties with item 2
    with pytest.raises(ValueError, match=r"scores must be \(queries, items\), got shape \(3,\)"):
        clear_rank_of(scores[0], [0])


def test_several_relevant_items_each_need_their_score_apart_from_the_irrelevant_ones():
    scores = np.array([[0.9, 0.9 + 1e-9, 0.5, 0.7], [0.1, 0.2, 0.3, 0.4]])
    assert clear_rank_of(scores, [[0, 1], [0, 2]]).tolist() == [1, 2]  # the relevant 0 and 1 may tie
    with pytest.raises(AssertionError, match=rf"query 0: {NEAR_TIE}"):
        clear_rank_of(scores, [[0, 3], [0]])  # relevant 0 ties with irrelevant 1


def test_an_exact_tie_of_identical_inputs_is_no_proof_of_a_rank():
    """A clip stored twice ties exactly on one CPU and differs in the last bit on another: both fail alike."""
    scores = np.array([[0.5, 0.5, 0.1], [0.5, 0.5 - 1e-9, 0.1]])
    with pytest.raises(AssertionError, match=rf"query 0: {NEAR_TIE}"):
        clear_rank_of(scores[:1], [0])
    with pytest.raises(AssertionError, match=rf"query 1: {NEAR_TIE}"):
        clear_rank_of(scores, [2, 0])  # query 0 is clear; query 1 is the near-tie


ORDERING_HELPERS = ("ranking_margin", "sound_library")
"""The helpers a test module imports to read an order of computed scores (sound_library plants its events with
ranking_margin)."""


def test_every_module_that_reads_an_order_of_computed_scores_runs_at_the_third_vector_level():
    """``make test-avx2`` (CI's AVX2 leg) runs the tests marked ``numerics``; a module that reads an order of
    computed scores belongs there. This module reads handwritten scores only."""
    unmarked = []
    for path in sorted(Path(__file__).parent.rglob("test_*.py")):
        source = path.read_text()
        reads_orders = any(f"from {helper} import" in source for helper in ORDERING_HELPERS)
        if reads_orders and path.name != Path(__file__).name and "pytest.mark.numerics" not in source:
            unmarked.append(str(path.relative_to(Path(__file__).parent)))
    assert not unmarked, f"mark these modules (or their ordering tests) with pytest.mark.numerics: {unmarked}"
