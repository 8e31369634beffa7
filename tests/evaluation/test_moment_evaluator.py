"""MomentEvaluator: each recording decoded once per evaluator and encoded once per call, every query scored as
``pipe.moments`` would score it, undecodable recordings left out, released files' queries kept as released; the
primary metric; the old import path."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_model, make_processor

import hf_atr.evaluation.moment_evaluator as evaluation_module
from hf_atr.data.moments import load_moments
from hf_atr.encoding import encode_text
from hf_atr.evaluation.moment_evaluator import MomentEvaluator
from hf_atr.metrics.moments import MOMENT_METRIC_NAMES, moment_retrieval_metrics
from hf_atr.moments.curve import SimilarityCurve
from hf_atr.moments.proposal import MomentProposalConfig, propose_moments
from hf_atr.pipelines.moment_scoring import recording_curve
from hf_atr.windowing import Windowing, moment_windowing
from tests.moment_fixtures import with_release_patterns, write_moment_set

METRICS = ["R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"]


@pytest.fixture(scope="module")
def moment_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("moment_set")
    write_moment_set(folder, recordings=2, split="test", seed=1)
    return folder


@pytest.fixture(scope="module")
def tiny_model():
    processor = make_processor()
    return make_model(processor=processor), processor


def test_the_evaluator_encodes_each_recording_once_and_scores_every_query_as_pipe_moments_would(
    moment_folder, tiny_model, monkeypatch
):
    model, processor = tiny_model
    moments = load_moments(moment_folder / "moments_test_release.jsonl")

    calls = []
    original = evaluation_module.encode_audio_windows

    def counting(model, processor, recordings, **kwargs):
        calls.append([row["audio_id"] for row in recordings])
        return original(model, processor, recordings, **kwargs)

    monkeypatch.setattr(evaluation_module, "encode_audio_windows", counting)
    evaluator = MomentEvaluator(moments, processor, hop_seconds=0.5)
    evaluation = evaluator.evaluate(model)
    assert calls == [["test_000", "test_001"]]  # one call, each recording once, for its two queries
    assert [record["qid"] for record in evaluation.predictions] == moments["qid"]
    # Each query's curve and moments are those of the recording scored alone for that query.
    windowing = moment_windowing(Windowing(), processor.feature_extractor, 0.5)
    for row in range(len(moments)):
        alone = recording_curve(
            model,
            processor,
            moments[row]["audio"],
            encode_text(model, processor, [moments[row]["query"]]),
            windowing,
        )
        curve = evaluation.curves[moments[row]["qid"]]
        np.testing.assert_array_equal(curve.starts, alone.starts)
        np.testing.assert_allclose(curve.scores, alone.scores, rtol=1e-5, atol=1e-6)
        expected = [
            moment.as_window()
            for moment in propose_moments(SimilarityCurve(curve.starts, curve.ends, curve.scores))
        ]
        assert evaluation.predictions[row]["pred_relevant_windows"] == expected
    references = [{"qid": q, "relevant_windows": w} for q, w in zip(moments["qid"], moments["windows"])]
    assert evaluation.metrics == moment_retrieval_metrics(evaluation.predictions, references)
    assert tuple(evaluation.metrics) == MOMENT_METRIC_NAMES == tuple(METRICS)
    protocol = evaluation.protocol
    assert (protocol["queries"], protocol["recordings"], protocol["hop_seconds"]) == (4, 2, 0.5)
    assert protocol["window_seconds"] == pytest.approx(1.015) and protocol["audio_seconds"] == 16.0
    assert protocol["proposal"]["proposer"] == "refined" and evaluator.protocol == protocol
    baseline = MomentEvaluator(moments, processor, proposal=MomentProposalConfig(proposer="sliding_window"))
    assert baseline(model).keys() == set(METRICS)
    assert baseline.protocol["proposal"]["proposer"] == "sliding_window"


def test_the_evaluator_leaves_out_undecodable_recordings_and_refuses_other_data(
    moment_folder, tiny_model, tmp_path
):
    model, processor = tiny_model
    folder = tmp_path / "broken"
    write_moment_set(folder, recordings=2, split="test", seed=2)
    moments = load_moments(folder / "moments_test_release.jsonl")
    (folder / "audio" / "test_001.wav").write_bytes(b"not audio")
    evaluation = MomentEvaluator(moments, processor).evaluate(model)
    assert [record["qid"] for record in evaluation.predictions] == ["test_000_1", "test_000_2"]
    assert evaluation.protocol["skipped_queries"] == 2
    assert evaluation.protocol["skipped_recordings"][0]["recording"] == "test_001"
    with pytest.raises(
        ValueError, match=r"A moment evaluation needs a moment dataset .* got the columns \['qid'"
    ):
        MomentEvaluator(moments.select_columns(["qid", "query"]), processor)


@pytest.mark.slow
def test_predictions_from_a_released_file_carry_its_queries_and_score_against_its_windows(
    tiny_model, tmp_path, monkeypatch, caplog
):
    """Queries with white space around them and windows past the recording's end, as released files have them: the
    predictions carry each query as the file gives it, the metrics read the windows as released, the model reads
    the queries stripped, and the timeline figure draws the windows inside the recording."""
    model, processor = tiny_model
    path = with_release_patterns(write_moment_set(tmp_path, recordings=2, split="test", seed=3))
    released = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    encoded = []
    original = evaluation_module.encode_text

    def recording_texts(model, processor, texts, **kwargs):
        encoded.extend(texts)
        return original(model, processor, texts, **kwargs)

    monkeypatch.setattr(evaluation_module, "encode_text", recording_texts)
    evaluator = MomentEvaluator(load_moments(path), processor)
    evaluation = evaluator.evaluate(model)
    assert encoded == [line["query"].strip() for line in released]
    written = evaluation.write_predictions(tmp_path / "predictions.jsonl")
    predictions = [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines()]
    assert [(p["qid"], p["query"], p["vid"]) for p in predictions] == [
        (line["qid"], line["query"], line["vid"]) for line in released
    ]
    assert released[0]["query"].startswith(" ") and released[3]["query"].endswith(" ")
    assert evaluation.metrics == moment_retrieval_metrics(predictions, released)
    pytest.importorskip("matplotlib")
    with caplog.at_level(logging.WARNING):
        page = evaluator.write_report(evaluation, tmp_path / "report", timelines=4)
    assert "2 annotated window(s) lying wholly outside their recording are not drawn" in page.read_text()
    assert "Moment timelines: 2 annotated window(s) of the queries drawn lie wholly outside" in caplog.text


def test_the_recordings_are_decoded_once_across_calls_and_again_for_another_dataset(
    moment_folder, tiny_model, monkeypatch
):
    model, processor = tiny_model
    moments = load_moments(moment_folder / "moments_test_release.jsonl")
    decoded = []
    original = evaluation_module.decode_audio

    def counting(value, sampling_rate=None, *, source=None):
        decoded.append(source)
        return original(value, sampling_rate, source=source)

    monkeypatch.setattr(evaluation_module, "decode_audio", counting)
    evaluator = MomentEvaluator(moments, processor, hop_seconds=0.5)
    first = evaluator(model)
    assert evaluator(model) == first and decoded == ["test_000", "test_001"]
    evaluator.moments = moments.select([2, 3])  # another dataset (another fingerprint): decoded anew
    assert evaluator.evaluate(model).protocol["queries"] == 2 and decoded[2:] == ["test_001"]


def test_the_primary_metric_is_map_and_the_old_import_path_warns(moment_folder, tiny_model):
    model, processor = tiny_model
    evaluator = MomentEvaluator(load_moments(moment_folder / "moments_test_release.jsonl"), processor)
    assert (evaluator.name, evaluator.primary_metric, evaluator.greater_is_better) == ("moments", "mAP", True)
    assert evaluator.primary_metric in evaluator(model) and evaluator.dataset is evaluator.moments
    import hf_atr.pipelines.moment_evaluation as old_home

    with pytest.deprecated_call(match="moved to `hf_atr.evaluation.moment_evaluator.MomentEvaluator`"):
        assert old_home.MomentEvaluator is MomentEvaluator
    with pytest.raises(AttributeError):
        old_home.nothing_here  # noqa: B018
