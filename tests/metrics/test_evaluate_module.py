"""The `evaluate` wrappers load offline and return exactly what `retrieval_metrics` and `moment_retrieval_metrics`
return."""

from __future__ import annotations

import numpy as np
import pytest
from evaluate_cache import isolated_evaluate_cache
from moment_reference import random_moment_problem

from hf_atr.metrics.moments import load_moment_retrieval_metric, moment_retrieval_metrics
from hf_atr.metrics.retrieval import retrieval_metrics

evaluate = pytest.importorskip("evaluate")


@pytest.fixture(scope="module")
def evaluate_cache(tmp_path_factory):
    with isolated_evaluate_cache(tmp_path_factory.mktemp("hf_home")) as cache:
        yield cache


@pytest.fixture(scope="module")
def metric(evaluate_cache):
    from hf_atr.metrics.retrieval import load_retrieval_metric

    return load_retrieval_metric(cache_dir=str(evaluate_cache / "metrics"))


@pytest.fixture(scope="module")
def moment_metric(evaluate_cache):
    return load_moment_retrieval_metric(cache_dir=str(evaluate_cache / "metrics"))


def multilingual_problem():
    rng = np.random.default_rng(0)
    n_audio = 6
    text_to_audio = np.repeat(np.arange(n_audio), 2)[:-1]  # clip 5 has no French caption
    languages = ["eng", "fra"] * n_audio
    languages = languages[:-1]
    caption_groups = list(text_to_audio)
    scores = rng.integers(0, 5, size=(len(text_to_audio), n_audio)).astype(np.float32) / 5
    return scores, text_to_audio, languages, caption_groups


def test_compute_matches_retrieval_metrics(metric):
    scores, text_to_audio, languages, caption_groups = multilingual_problem()
    result = metric.compute(
        predictions=scores.tolist(),
        references=text_to_audio.tolist(),
        languages=languages,
        caption_groups=caption_groups,
        ks=(1, 3),
    )
    assert result == retrieval_metrics(scores, text_to_audio, languages, caption_groups, ks=(1, 3))
    assert {"MRV", "t2a_R@1/fra", "a2t_mAP@10/eng", "a2t_recall_fraction@3"} <= set(result)


def test_add_batch_then_compute(metric):
    scores, text_to_audio, _, _ = multilingual_problem()
    for start in range(0, len(scores), 4):
        metric.add_batch(predictions=scores[start : start + 4], references=text_to_audio[start : start + 4])
    assert metric.compute() == retrieval_metrics(scores, text_to_audio)


def test_module_errors_are_clear(metric):
    with pytest.raises(ValueError, match=r"text_to_audio\[1\] = 7 is not a clip index"):
        metric.compute(predictions=[[0.1, 0.2], [0.3, 0.4]], references=[0, 7])


@pytest.mark.slow
def test_ragged_score_rows_are_rejected(metric):
    with pytest.raises(ValueError, match=r"score rows of one length .* got lengths \[1, 2\]"):
        metric.compute(predictions=[[0.1, 0.2], [0.3]], references=[0, 1])


def test_several_relevant_clips_per_caption_and_map_cutoffs(metric):
    scores, text_to_audio, languages, _ = multilingual_problem()
    relevant = [[int(clip), (int(clip) + 1) % scores.shape[1]] for clip in text_to_audio]
    relevant[0] = relevant[0][:1]
    result = metric.compute(
        predictions=scores.tolist(), references=relevant, languages=languages, map_cutoffs=(2, 16)
    )
    assert result == retrieval_metrics(scores, relevant, languages, map_cutoffs=(2, 16))
    assert {"t2a_recall_fraction@5", "t2a_mAP@16/fra", "a2t_mAP@2"} <= set(result)
    assert "t2a_mAP@10" not in result
    for start in range(0, len(scores), 4):
        metric.add_batch(predictions=scores[start : start + 4], references=relevant[start : start + 4])
    assert metric.compute() == retrieval_metrics(scores, relevant)


def test_deprecated_map_cutoff_still_works(metric):
    scores, text_to_audio, _, _ = multilingual_problem()
    with pytest.deprecated_call(match="map_cutoff` is deprecated"):
        result = metric.compute(predictions=scores.tolist(), references=text_to_audio.tolist(), map_cutoff=3)
    assert result == retrieval_metrics(scores, text_to_audio, map_cutoffs=(3,))


def moment_records(string_qids: bool) -> tuple[list[dict], list[dict]]:
    """A random moment problem with a record for every query (an empty list where it has no predictions), the
    predictions in the reverse order of the references: records are matched by qid, not by row."""
    predictions, references = random_moment_problem(3, n_queries=12)
    listed = {record["qid"]: record["pred_relevant_windows"] for record in predictions}
    predictions = [
        {"qid": r["qid"], "pred_relevant_windows": listed.get(r["qid"], [])} for r in reversed(references)
    ]

    def qid(value: str) -> str | int:
        return value if string_qids else int(value[1:])

    return (
        [{**record, "qid": qid(record["qid"])} for record in predictions],
        [{**record, "qid": qid(record["qid"])} for record in references],
    )


@pytest.mark.parametrize("string_qids", [True, False], ids=["string qids", "integer qids"])
def test_moment_metric_compute_matches_moment_retrieval_metrics(moment_metric, string_qids):
    predictions, references = moment_records(string_qids)
    expected = moment_retrieval_metrics(predictions, references)
    assert moment_metric.compute(predictions=predictions, references=references) == expected
    for start in range(0, len(predictions), 5):
        moment_metric.add_batch(
            predictions=predictions[start : start + 5], references=references[start : start + 5]
        )
    assert moment_metric.compute() == expected
    for prediction, reference in zip(predictions, references):
        moment_metric.add(prediction=prediction, reference=reference)
    assert moment_metric.compute() == expected
    assert set(expected) == {"R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"}


@pytest.mark.slow
def test_moment_metric_errors_are_those_of_the_function(moment_metric):
    with pytest.raises(ValueError, match=r"^predictions: 1 qid\(s\) are not in the references: 'b'\."):
        moment_metric.compute(
            predictions=[{"qid": "b", "pred_relevant_windows": [[0.0, 1.0, 0.5]]}],
            references=[{"qid": "a", "relevant_windows": [[0.0, 1.0]]}],
        )
    with pytest.raises(
        ValueError,
        match=r"^predictions: qid 'a': pred_relevant_windows must be a list of \[start, end, score\]",
    ):
        moment_metric.compute(
            predictions=[{"qid": "a", "pred_relevant_windows": [[0.0, 1.0]]}],
            references=[{"qid": "a", "relevant_windows": [[0.0, 1.0]]}],
        )


def test_moment_metric_stores_numeric_string_qids_as_integers_beside_integer_ones(moment_metric):
    predictions, references = moment_records(string_qids=False)
    as_strings = [{**record, "qid": str(record["qid"])} for record in references]
    expected = moment_retrieval_metrics(predictions, references)
    assert moment_metric.compute(predictions=predictions, references=as_strings) == expected
    with pytest.raises(ValueError, match=r"qid\(s\) are not in the references"):
        moment_retrieval_metrics(predictions, as_strings)
