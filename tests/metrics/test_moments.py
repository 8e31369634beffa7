"""Moment retrieval metrics: hand-worked cases, the pinned contract, and a brute-force reference on random problems."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from moment_reference import brute_force_moment_metrics, random_moment_problem

from hf_atr.metrics.moments import MAX_PREDICTIONS_PER_QUERY, MOMENT_IOU_THRESHOLDS, moment_retrieval_metrics

KEYS = ["R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"]


def one_query(predicted: list, annotated: list) -> dict[str, float]:
    return moment_retrieval_metrics(
        [{"qid": "q", "pred_relevant_windows": predicted}], [{"qid": "q", "relevant_windows": annotated}]
    )


def test_thresholds_are_the_two_decimal_values():
    assert MOMENT_IOU_THRESHOLDS == (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
    assert MAX_PREDICTIONS_PER_QUERY == 10


def test_an_exact_prediction_scores_one_and_keys_are_the_contract():
    metrics = one_query([[12.0, 19.5, 0.9]], [[12.0, 19.5]])
    assert list(metrics) == KEYS
    assert metrics == dict.fromkeys(KEYS, 1.0)


def test_iou_on_a_threshold_counts_as_reaching_it():
    # IoU [0, 10] vs [0, 20] = 10 / 20 = 0.5 exactly; [0, 14] vs [0, 20] = 0.7 exactly.
    assert one_query([[0, 10, 1.0]], [[0, 20]]) == pytest.approx(
        {"R1@0.5": 1.0, "R1@0.7": 0.0, "mAP@0.5": 1.0, "mAP@0.75": 0.0, "mAP": 0.1}, abs=1e-15
    )
    assert one_query([[0, 14, 1.0]], [[0, 20]])["R1@0.7"] == 1.0


def test_several_annotated_moments_each_need_their_prediction():
    annotated = [[0, 10], [20, 30]]
    assert one_query([[20, 30, 0.9], [0, 10, 0.8]], annotated) == dict.fromkeys(KEYS, 1.0)
    # One of two moments found, by the best-scored prediction: precision 1 at recall 1/2.
    only_second = one_query([[20, 30, 0.9], [40, 50, 0.8]], annotated)
    assert only_second == {"R1@0.5": 1.0, "R1@0.7": 1.0, "mAP@0.5": 0.5, "mAP@0.75": 0.5, "mAP": 0.5}
    # R1 uses the moment the first prediction overlaps most: IoU([18, 30], [20, 30]) = 10 / 12.
    assert one_query([[18, 30, 0.9]], annotated)["R1@0.7"] == 1.0


def test_a_prediction_covering_two_moments_matches_one_at_most():
    # [0, 20] overlaps [0, 10] and [10, 20] with IoU 0.5 each: it matches the first at 0.5, nothing above.
    covering = one_query([[0, 20, 0.9]], [[0, 10], [10, 20]])
    assert covering == pytest.approx(
        {"R1@0.5": 1.0, "R1@0.7": 0.0, "mAP@0.5": 0.5, "mAP@0.75": 0.0, "mAP": 0.05}, abs=1e-15
    )
    # [0, 30] covers [0, 10] and [20, 30] with IoU 1/3 each: a miss; then [0, 10] is a hit at precision 1/2,
    # recall 1/2 -> AP 1/4 at every threshold. R1 takes the first listed, the covering one.
    assert one_query([[0, 30, 0.9], [0, 10, 0.5]], [[0, 10], [20, 30]]) == pytest.approx(
        {"R1@0.5": 0.0, "R1@0.7": 0.0, "mAP@0.5": 0.25, "mAP@0.75": 0.25, "mAP": 0.25}, abs=1e-15
    )


def test_a_second_prediction_of_the_same_moment_is_a_false_positive():
    # Hit, miss (the moment is taken), hit: precisions 1, 1/2, 2/3 -> AP = (1 + 2/3) / 2.
    metrics = one_query([[0, 10, 0.9], [0, 10, 0.8], [20, 30, 0.7]], [[0, 10], [20, 30]])
    assert metrics["mAP"] == pytest.approx(5 / 6, abs=1e-15)


def test_ties_keep_the_listed_order():
    annotated = [[0, 10]]
    # Equal scores: the listed order decides the ranking (and R1 is the first listed).
    assert one_query([[0, 10, 0.5], [50, 60, 0.5]], annotated) == dict.fromkeys(KEYS, 1.0)
    assert one_query([[50, 60, 0.5], [0, 10, 0.5]], annotated) == {
        "R1@0.5": 0.0,
        "R1@0.7": 0.0,
        "mAP@0.5": 0.5,
        "mAP@0.75": 0.5,
        "mAP": 0.5,
    }
    # The score decides, not the listing: the lower-scored first listed window ranks second.
    assert one_query([[50, 60, 0.4], [0, 10, 0.5]], annotated)["mAP"] == 1.0


def test_a_prediction_overlapping_two_moments_equally_takes_the_first_listed():
    # [0, 15] has IoU 2/3 with both [0, 10] and [5, 15]; taking [0, 10] leaves [5, 15] to the exact second
    # prediction: AP 1 up to IoU 0.65. Above, [0, 15] misses and [5, 15] hits at precision 1/2, recall 1/2.
    metrics = one_query([[0, 15, 0.9], [5, 15, 0.8]], [[0, 10], [5, 15]])
    assert metrics == pytest.approx(
        {"R1@0.5": 1.0, "R1@0.7": 0.0, "mAP@0.5": 1.0, "mAP@0.75": 0.25, "mAP": (4 * 1 + 6 * 0.25) / 10},
        abs=1e-15,
    )
    # Listed the other way round, the first listed is [5, 15], which the second prediction needed: AP@0.5 = 1/2.
    assert one_query([[0, 15, 0.9], [5, 15, 0.8]], [[5, 15], [0, 10]])["mAP@0.5"] == 0.5


def test_only_the_first_ten_predictions_count():
    decoys = [[50 + 2 * i, 51 + 2 * i, 0.5] for i in range(10)]
    # The 11th is exact and best scored, but never seen.
    assert one_query([*decoys, [0, 10, 1.0]], [[0, 10]]) == dict.fromkeys(KEYS, 0.0)
    # The 10th listed is exact but scored last: precision 1/10 at full recall.
    assert one_query([*decoys[:9], [0, 10, 0.1], [0, 10, 1.0]], [[0, 10]])["mAP"] == pytest.approx(
        0.1, abs=1e-15
    )


def test_a_query_without_predictions_scores_zero(caplog):
    references = [{"qid": 1, "relevant_windows": [[0, 10]]}, {"qid": 2, "relevant_windows": [[5, 8]]}]
    perfect = [{"qid": 1, "pred_relevant_windows": [[0, 10, 0.3]]}]
    with caplog.at_level(logging.WARNING):
        absent = moment_retrieval_metrics(perfect, references)
    assert absent == dict.fromkeys(KEYS, 0.5)
    assert "1 of 2 queries have no predictions and score 0 (e.g. qid 2)" in caplog.text
    empty = moment_retrieval_metrics([*perfect, {"qid": 2, "pred_relevant_windows": []}], references)
    assert empty == absent
    assert moment_retrieval_metrics([], references) == dict.fromkeys(KEYS, 0.0)


def test_records_are_matched_by_qid_and_carry_other_fields():
    references = [
        {"qid": 7, "query": "a dog barks", "vid": "rec1", "duration": 60.0, "relevant_windows": [[0, 10]]},
        {"qid": 8, "query": "a door closes", "vid": "rec1", "duration": 60.0, "relevant_windows": [[30, 32]]},
    ]
    predictions = [
        {"qid": 8, "query": "a door closes", "vid": "rec1", "pred_relevant_windows": [[30, 32, 0.2]]},
        {"qid": 7, "pred_relevant_windows": np.array([[40, 50, 0.9], [0, 10, 0.8]])},
    ]
    assert moment_retrieval_metrics(predictions, references) == {
        "R1@0.5": 0.5,
        "R1@0.7": 0.5,
        "mAP@0.5": 0.75,
        "mAP@0.75": 0.75,
        "mAP": 0.75,
    }


def test_pinned_outputs_on_a_fixed_problem():
    """The contract: these numbers change only with a stated change of convention."""
    references = [
        {"qid": "a", "relevant_windows": [[0, 10], [20, 30]]},
        {"qid": "b", "relevant_windows": [[0, 10], [5, 15]]},
        {"qid": "c", "relevant_windows": [[0, 20]]},
        {"qid": "d", "relevant_windows": [[3.5, 7.25]]},
    ]
    predictions = [
        {"qid": "a", "pred_relevant_windows": [[0, 30, 0.9], [0, 10, 0.5]]},  # AP 1/4 everywhere, R1 miss
        {
            "qid": "b",
            "pred_relevant_windows": [[0, 15, 0.9], [5, 15, 0.8]],
        },  # AP 1 to 0.65, 1/4 above; IoU 2/3
        {
            "qid": "c",
            "pred_relevant_windows": [[0, 14, 0.7], [0, 10, 0.7]],
        },  # IoU 0.7 then 0.5 (a miss above 0.5)
    ]  # d: no predictions
    # R1 IoUs: a 1/3, b 2/3, c 0.7 (on the threshold), d 0 -> R1@0.5 = 2/4, R1@0.7 = 1/4.
    # AP at 0.50-0.65 (4 thresholds): a 1/4, b 1, c 1, d 0 -> 9/16; at 0.70: 1/4, 1/4, 1, 0 -> 3/8;
    # at 0.75-0.95 (5): 1/4, 1/4, 0, 0 -> 1/8. mAP = (4 * 9/16 + 3/8 + 5 * 1/8) / 10 = 0.325.
    assert moment_retrieval_metrics(predictions, references) == pytest.approx(
        {"R1@0.5": 0.5, "R1@0.7": 0.25, "mAP@0.5": 0.5625, "mAP@0.75": 0.125, "mAP": 0.325}, abs=1e-15
    )


@pytest.mark.parametrize(
    "grid", [0.5, 0.25, None], ids=["half-second grid", "quarter-second grid", "continuous"]
)
def test_matches_the_brute_force_definitions_on_random_problems(grid):
    for seed in range(60):
        predictions, references = random_moment_problem(seed, n_queries=15, grid=grid)
        actual = moment_retrieval_metrics(predictions, references)
        expected = brute_force_moment_metrics(predictions, references)
        assert list(actual) == KEYS
        np.testing.assert_allclose([actual[k] for k in KEYS], [expected[k] for k in KEYS], rtol=0, atol=1e-12)


def test_random_problems_hit_the_cases_that_matter():
    """The random problems exercise ties, several moments, >10 predictions and queries without any."""
    predictions, references = random_moment_problem(0, n_queries=200, grid=0.5)
    listed = [record["pred_relevant_windows"] for record in predictions]
    assert any(len(windows) > MAX_PREDICTIONS_PER_QUERY for windows in listed)
    assert any(len(windows) == 0 for windows in listed) and len(predictions) < len(references)
    assert any(len({window[2] for window in windows}) < len(windows) for windows in listed)
    assert any(len(record["relevant_windows"]) > 1 for record in references)
    metrics = moment_retrieval_metrics(predictions, references)
    assert all(0.05 < value < 0.95 for value in metrics.values())


def test_predictions_for_unknown_qids_are_refused():
    references = [{"qid": 7803, "relevant_windows": [[0, 10]]}]
    with pytest.raises(ValueError, match=r"predictions: 1 qid\(s\) are not in the references: '7803'\. .*"):
        moment_retrieval_metrics([{"qid": "7803", "pred_relevant_windows": [[0, 10, 1]]}], references)
    many = [{"qid": i, "pred_relevant_windows": []} for i in range(9000, 9007)]
    with pytest.raises(
        ValueError, match=r"7 qid\(s\) are not in the references: 9000, 9001, 9002, 9003, 9004, \.\.\."
    ):
        moment_retrieval_metrics(many, references)


@pytest.mark.parametrize("side", ["predictions", "references"])
def test_a_qid_given_twice_is_refused(side):
    records = {
        "predictions": [{"qid": "q", "pred_relevant_windows": [[0, 1, 1]]}],
        "references": [{"qid": "q", "relevant_windows": [[0, 1]]}],
    }
    records[side] = records[side] * 2
    with pytest.raises(ValueError, match=rf"^{side}: qid 'q' is given twice, in records 0 and 1\.$"):
        moment_retrieval_metrics(records["predictions"], records["references"])


@pytest.mark.parametrize(
    ("predicted", "message"),
    [
        ([[5, 2, 0.9]], r"qid 'q': the window \[5.0, 2.0, 0.9\] in pred_relevant_windows is malformed"),
        ([[0, 1, 0.5], [3, 3, 0.1]], r"the window \[3.0, 3.0, 0.1\] in pred_relevant_windows is malformed"),
        ([[0, 1, float("nan")]], r"the window \[0.0, 1.0, nan\] in pred_relevant_windows is malformed"),
        ([[0, float("inf"), 1]], r"the window \[0.0, inf, 1.0\] in pred_relevant_windows is malformed"),
        (
            [[0, 10]],
            r"qid 'q': pred_relevant_windows must be a list of \[start, end, score\] numbers, got \[\[0, 10\]\]",
        ),
        (
            [[0, 10, 1], [0, 10]],
            r"must be a list of \[start, end, score\] numbers, got \[\[0, 10, 1\], \[0, 10\]\]",
        ),
        ([0, 10, 1], r"must be a list of \[start, end, score\] numbers, got \[0, 10, 1\]"),
        ([["0", "10", "1"]], r"numbers, got \[\['0', '10', '1'\]\]"),
        ([[0, 10, None]], r"numbers, got \[\[0, 10, None\]\]"),
        (None, r"numbers, got None"),
    ],
)
def test_malformed_predicted_windows_name_the_qid_and_value(predicted, message):
    references = [
        {"qid": "q", "relevant_windows": [[0, 10]]},
        {"qid": "other", "relevant_windows": [[0, 10]]},
    ]
    predictions = [
        {"qid": "other", "pred_relevant_windows": [[0, 10, 1]]},
        {"qid": "q", "pred_relevant_windows": predicted},
    ]
    with pytest.raises(ValueError, match=rf"^predictions: .*{message}"):
        moment_retrieval_metrics(predictions, references)


def test_a_window_past_the_tenth_is_checked_too():
    predicted = [[0, 10, 1]] * 10 + [[10, 0, 1]]
    with pytest.raises(ValueError, match=r"qid 'q': the window \[10.0, 0.0, 1.0\]"):
        one_query(predicted, [[0, 10]])


def test_malformed_references_name_the_qid_and_value():
    with pytest.raises(
        ValueError, match=r"^references: qid 'q': the window \[4.0, 4.0\] in relevant_windows is malformed; "
    ):
        one_query([], [[0, 1], [4, 4]])
    with pytest.raises(
        ValueError,
        match=r"^references: qid 'q': relevant_windows must be a list of \[start, end\] numbers, got \[\[0, 1, 0.5\]\]",
    ):
        one_query([], [[0, 1, 0.5]])
    with pytest.raises(
        ValueError, match=r"^references: qid 'q' has no relevant_windows; R1 and AP need at least one"
    ):
        one_query([], [])
    with pytest.raises(ValueError, match=r"^references: no query to evaluate"):
        moment_retrieval_metrics([], [])


def test_records_without_their_fields_are_refused():
    with pytest.raises(
        ValueError,
        match=r"^references\[0\] is not a record with 'qid' and 'relevant_windows': got \['qid', 'windows'\]\.$",
    ):
        moment_retrieval_metrics([], [{"qid": 1, "windows": [[0, 1]]}])
    with pytest.raises(
        ValueError,
        match=r"^predictions\[1\] is not a record with 'qid' and 'pred_relevant_windows': got list\.$",
    ):
        moment_retrieval_metrics(
            [{"qid": 1, "pred_relevant_windows": []}, [[0, 1, 1]]], [{"qid": 1, "relevant_windows": [[0, 1]]}]
        )
    with pytest.raises(ValueError, match=r"^references\[0\]: qid \[1\] is not a string or an integer\.$"):
        moment_retrieval_metrics([], [{"qid": [1], "relevant_windows": [[0, 1]]}])
