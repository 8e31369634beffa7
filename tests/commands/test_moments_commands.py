"""``hf-atr evaluate --moments`` and ``hf-atr train`` on a moment dataset, end to end on tiny models and a tiny
synthetic moment set (tone events in noise)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from tiny_models import make_model, make_processor

from hf_atr.cli import main
from hf_atr.data.moments import load_moment_splits, load_moments
from hf_atr.data.overlap import remove_overlap
from tests.moment_fixtures import write_moment_set

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


def _saved_model(directory: Path, tiny_model) -> Path:
    model, processor = tiny_model
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def _evaluate_moments(model_dir: Path, *dataset: str) -> list[str]:
    return ["evaluate", "--model", str(model_dir), "--moments", "--dataset", *dataset]


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_hf_atr_train_on_moments_evaluates_the_validation_split_during_training_and_keeps_the_best_model(
    in_tmp, towers, moment_folder
):
    audio_tower, text_tower = towers
    argv = ["train", "--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "moments",
            "--data_dir", str(moment_folder), "--output_dir", "run", *QUICK, "--eval_strategy", "steps",
            "--eval_steps", "1", "--save_steps", "1", "--load_best_model_at_end"]  # fmt: skip
    assert main(argv) == 0
    state = json.loads((in_tmp / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    evaluations = [entry for entry in state["log_history"] if "eval_mAP" in entry]
    assert [entry["step"] for entry in evaluations] == [1, 2]
    assert state["best_metric"] == max(entry["eval_mAP"] for entry in evaluations)
    written = json.loads((in_tmp / "run" / "metrics.json").read_text())
    assert written["protocol"]["split"] == "test" and sorted(written["metrics"]) == sorted(METRICS)
