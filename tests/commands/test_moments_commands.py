"""``hf-atr evaluate --moments`` and ``hf-atr train`` on a moment dataset, end to end on tiny models and a tiny
synthetic moment set (tone events in noise)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import numpy as np
import pytest
from tiny_models import make_model, make_processor

from hf_atr.cli import main
from hf_atr.data.moments import load_moment_splits, load_moments
from hf_atr.data.overlap import remove_overlap
from hf_atr.metrics.moments import MOMENT_METRIC_NAMES, moment_retrieval_metrics
from hf_atr.moments.curve import SimilarityCurve
from hf_atr.moments.proposal import MomentProposalConfig, propose_moments
from hf_atr.pipelines.moment_evaluation import MomentEvaluator
from hf_atr.pipelines.moment_scoring import recording_curve
from hf_atr.windowing import Windowing
from tests.moment_fixtures import with_release_patterns, write_moment_set

METRICS = ["R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"]
QUICK = [
    "--max_steps",
    "2",
    "--per_device_train_batch_size",
    "4",
    "--learning_rate",
    "1e-3",
    "--report_to",
    "none",
]


@pytest.fixture(scope="module")
def moment_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("moment_set")
    write_moment_set(folder, recordings=4, split="train")
    write_moment_set(folder, recordings=2, split="test", seed=1)
    write_moment_set(folder, recordings=1, split="val", seed=2)
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
    import hf_atr.pipelines.moment_evaluation as evaluation_module

    calls = []
    original = evaluation_module.encode_audio_windows

    def counting(model, processor, recordings, **kwargs):
        calls.append(list(recordings["audio_id"]))
        return original(model, processor, recordings, **kwargs)

    monkeypatch.setattr(evaluation_module, "encode_audio_windows", counting)
    evaluator = MomentEvaluator(moments, processor, hop_seconds=0.5)
    evaluation = evaluator.evaluate(model)
    assert calls == [["test_000", "test_001"]]  # one call, each recording once, for its two queries
    assert [record["qid"] for record in evaluation.predictions] == moments["qid"]
    # Each query's curve and moments are those of the recording scored alone for that query.
    from hf_atr.encoding import encode_text
    from hf_atr.pipelines.moment_scoring import moment_windowing

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


def test_predictions_from_a_released_file_carry_its_queries_and_score_against_its_windows(
    tiny_model, tmp_path, monkeypatch, caplog
):
    """Queries with white space around them and windows past the recording's end, as released files have them: the
    predictions carry each query as the file gives it, the metrics read the windows as released, the model reads
    the queries stripped, and the timeline figure draws the windows inside the recording."""
    model, processor = tiny_model
    path = with_release_patterns(write_moment_set(tmp_path, recordings=2, split="test", seed=3))
    released = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    import hf_atr.pipelines.moment_evaluation as evaluation_module

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


def _saved_model(directory: Path, tiny_model) -> Path:
    model, processor = tiny_model
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def _evaluate_moments(model_dir: Path, *dataset: str) -> list[str]:
    return ["evaluate", "--model", str(model_dir), "--moments", "--dataset", *dataset]


def test_hf_atr_evaluate_moments_prints_the_metrics_and_protocol_and_writes_predictions_and_report(
    moment_folder, tiny_model, tmp_path, capsys
):
    pytest.importorskip("matplotlib")
    model_dir = _saved_model(tmp_path / "model", tiny_model)
    argv = _evaluate_moments(model_dir, "moments", "--data-dir", str(moment_folder))
    assert main([*argv, "--report", str(tmp_path / "report"), "--output", str(tmp_path / "out.json")]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("Moment retrieval on moments (test): 4 queries over 2 recordings, 0.004 h; model ")
        and 'windows of 1.015 s every 0.5075 s; proposer {"proposer": "refined"' in printed
    )
    output = json.loads((tmp_path / "out.json").read_text())
    for name in METRICS:
        assert f"  {name}" in printed and f"{100 * output['metrics'][name]:.2f}" in printed
    predictions = [
        json.loads(line) for line in (tmp_path / "report" / "predictions.jsonl").read_text().splitlines()
    ]
    assert [record["qid"] for record in predictions] == [
        "test_000_1",
        "test_000_2",
        "test_001_1",
        "test_001_2",
    ]
    assert all(len(record["pred_relevant_windows"]) <= 10 for record in predictions)
    page = (tmp_path / "report" / "report.html").read_text()
    assert (
        "moment_timelines.png" in page
        and "Moment retrieval" in page
        and (tmp_path / "report" / "moment_timelines.png").exists()
    )
    # The same file read directly, and the baseline proposer with the NMS threshold hf-atr search also takes.
    single = tmp_path / "baseline.jsonl"
    argv = _evaluate_moments(model_dir, str(moment_folder / "moments_test_release.jsonl"))
    assert main([*argv, "--proposer", "baseline", "--nms-iou", "0.3", "--predictions", str(single),
                 "--hop-seconds", "0.5"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert (
        '"proposer": "sliding_window"' in printed and '"nms_iou": 0.3' in printed and "every 0.5 s" in printed
    )
    assert len(single.read_text().splitlines()) == 4


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--zero-shot"], "hf-atr evaluate: --zero-shot applies to clip retrieval, not to --moments."),
        (["--split", "dev"], "has no split 'dev'; its splits: ['test', 'train', 'validation']."),
    ],
)
def test_evaluate_moments_refuses_what_does_not_fit(moment_folder, tiny_model, tmp_path, extra, message):
    model_dir = _saved_model(tmp_path / "model", tiny_model)
    argv = _evaluate_moments(model_dir, "moments", "--data-dir", str(moment_folder))
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        main([*argv, *extra])
    with pytest.raises(
        SystemExit, match="--dataset moments reads the folder of <corpus>_<split>_release.jsonl"
    ):
        main(_evaluate_moments(model_dir, "moments"))


def test_the_overlap_filter_removes_the_queries_of_a_test_recording_from_moment_training(
    moment_folder, tmp_path
):
    """A training recording that is also a test recording (the same samples under another name) loses its queries,
    named by qid; the other training queries stay."""
    train = load_moments(moment_folder / "moments_train_release.jsonl")
    copy = tmp_path / "copy"
    (copy / "audio").mkdir(parents=True)
    (copy / "audio" / "renamed.wav").write_bytes((moment_folder / "audio" / "train_001.wav").read_bytes())
    line = {
        "qid": "t1",
        "query": "a dog sound",
        "duration": 8.0,
        "vid": "renamed",
        "relevant_windows": [[1, 2]],
    }
    (copy / "moments_test_release.jsonl").write_text(json.dumps(line) + "\n")
    filtered, report = remove_overlap(train, [load_moments(copy / "moments_test_release.jsonl")])
    assert report.removed_by_content == ["train_001_1", "train_001_2"]
    assert "train_001" not in filtered["recording_id"] and len(filtered) == len(train) - 2


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    return tmp_path


def test_hf_atr_train_on_a_moment_folder_trains_on_crops_and_tests_with_the_moment_metrics(
    in_tmp, towers, moment_folder, capsys
):
    audio_tower, text_tower = towers
    argv = ["train", "--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "moments",
            "--data_dir", str(moment_folder), "--output_dir", "run", *QUICK]  # fmt: skip
    assert main(argv) == 0
    written = json.loads((in_tmp / "run" / "metrics.json").read_text())
    assert sorted(written["metrics"]) == sorted(METRICS)
    assert written["protocol"]["task"] == "moment retrieval" and written["protocol"]["queries"] == 4
    assert written["training_audio"]["clips"] == 8
    assert written["training_audio"]["kept"].startswith(
        "per query and epoch a 1.015-s crop inside its moment"
    )
    card = (in_tmp / "run" / "model" / "README.md").read_text()
    values = " | ".join(f"{100 * written['metrics'][name]:.2f}" for name in METRICS)
    assert "| R1@0.5 | R1@0.7 | mAP@0.5 | mAP@0.75 | mAP |" in card and f"| {values} |" in card
    assert "- data: split `test`; 4 queries over 2 recordings (0.00 h)" in card
    assert "type: audio-moment-retrieval" in card
    # A saved DatasetDict of moments trains the same way.
    load_moment_splits(moment_folder).save_to_disk(str(in_tmp / "saved"))
    saved = [*argv[:5], "--dataset", "saved", "--output_dir", "run2", *QUICK]
    assert (
        main(saved) == 0
        and json.loads((in_tmp / "run2" / "metrics.json").read_text())["protocol"]["queries"] == 4
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--eval_strategy", "steps", "--eval_steps", "1"], "which moment training does not do"),
        (
            ["--eval_window_pooling", "mean"],
            "--eval_window_pooling applies to clip retrieval; the test split is moment",
        ),
        (["--objective", "kcl"], "objective 'kcl' trains on 'all_languages'. Use a pair objective"),
    ],
)
def test_hf_atr_train_on_moments_refuses_what_does_not_fit(
    in_tmp, towers, moment_folder, extra, message, capsys
):
    audio_tower, text_tower = towers
    argv = ["train", "--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "moments",
            "--data_dir", str(moment_folder), "--output_dir", "run", *QUICK, *extra]  # fmt: skip
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert message in str(raised.value) + capsys.readouterr().err
