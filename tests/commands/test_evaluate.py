"""hf-atr evaluate, called as the CLI calls it: retrieval on synthcaps and saved datasets with a random-init model;
--report and --zero-shot end to end on CPU with a tiny model trained a few steps."""

from __future__ import annotations

import json
import re

import pytest
from cli_runner import run_cli
from datasets import Dataset, DatasetDict
from esc50_release import write_esc50_release
from synthetic_audio import recording_with_event
from tiny_models import (
    SAMPLING_RATE,
    WORD_CLASSES,
    feature_dataset,
    make_model,
    make_processor,
    training_args,
    write_sound_folder,
)

from hf_atr import AtrTrainer
from hf_atr.cli import main
from hf_atr.data.audio import encode_wav
from hf_atr.model_card import TRAINING_CURVES_FILE


@pytest.mark.parametrize(("command", "explains"), [("evaluate", "`synthcaps`")])
def test_help_explains_the_command(command, explains, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli([command, "--help"])
    assert exit_info.value.code == 0
    assert explains in " ".join(capsys.readouterr().out.split())


def test_evaluate_on_synthcaps_writes_metrics_and_protocol(model_dir, tmp_path, capsys):
    output = tmp_path / "metrics.json"
    argv = ["evaluate", "--model", str(model_dir), "--dataset", "synthcaps", "--num-test", "6",
            "--languages", "eng", "fra", "--map-cutoffs", "10", "16", "--output", str(output)]  # fmt: skip
    assert run_cli(argv) == 0
    written = json.loads(output.read_text())
    metrics, protocol = written["metrics"], written["protocol"]
    assert {"t2a_R@1", "a2t_R@1", "t2a_mAP@10", "t2a_mAP@16", "t2a_R@1/fra", "MRV"} <= set(metrics)
    assert protocol["split"] == "test" and protocol["clips"] == 6 and protocol["languages"] == ["eng", "fra"]
    assert protocol["captions"] == 6 * 5 * 2 and protocol["map_cutoffs"] == [10, 16]
    assert protocol["relevance"] == "own clip" and "irrelevant items scoring >=" in protocol["tie_rule"]
    printed = capsys.readouterr().out
    assert "Retrieval on synthcaps (test, 6 clips, 60 captions, each caption's own clip relevant" in printed
    median_line = next(line for line in printed.splitlines() if line.strip().startswith("t2a_median_rank"))
    assert float(median_line.split()[-1]) == pytest.approx(metrics["t2a_median_rank"])  # ranks are not scaled


def test_evaluate_on_a_saved_dataset_dict(model_dir, saved_split, tmp_path):
    output = tmp_path / "metrics.json"
    argv = ["evaluate", "--model", str(model_dir), "--dataset", str(saved_split), "--split", "validation",
            "--output", str(output)]  # fmt: skip
    assert run_cli(argv) == 0
    metrics = json.loads(output.read_text())["metrics"]
    # Every clip has the same two captions, so the four copies of a caption score alike: in T2A they rank
    # their four clips once (one of them first), and in A2T the three copies of a clip's captions tie with
    # its own, which count against it: its best caption sits at position 3, its other at 7.
    assert metrics["t2a_R@1"] == 0.25 and metrics["t2a_mean_rank"] == 2.5
    assert metrics["a2t_R@1"] == 0.0 and metrics["a2t_R@5"] == 1.0 and metrics["a2t_mean_rank"] == 4.0
    assert metrics["a2t_mAP@10"] == pytest.approx((1 / 4 + 2 / 8) / 2)
    with pytest.raises(SystemExit, match=r"has no split\(s\) \['test'\]; its splits: \['validation'\]\.$"):
        run_cli(["evaluate", "--model", str(model_dir), "--dataset", str(saved_split)])
    with pytest.raises(SystemExit, match="neither `synthcaps` nor a directory"):
        run_cli(["evaluate", "--model", str(model_dir), "--dataset", str(tmp_path / "missing")])


def test_evaluate_with_relevance_judgements(model_dir, saved_split, tmp_path, capsys):
    judgements = tmp_path / "judgements.csv"
    judgements.write_text(
        "caption,file_name,relevance\na dog barks,clip0,90\na dog barks,clip2,75\na dog barks,clip3,20\n"
    )
    output = tmp_path / "metrics.json"
    argv = ["evaluate", "--model", str(model_dir), "--dataset", str(saved_split), "--split", "validation",
            "--relevance", str(judgements), "--relevance-threshold", "50", "--output", str(output)]  # fmt: skip
    assert run_cli(argv) == 0
    written = json.loads(output.read_text())
    protocol = written["protocol"]
    assert protocol["relevance"] == "judgements" and protocol["relevance_file"] == str(judgements)
    assert protocol["relevance_threshold"] == 50 and protocol["captions"] == 1
    assert protocol["relevant_clips_per_caption"] == 2 and protocol["captions_without_judgement"] == 7
    assert "t2a_recall_fraction@1" in written["metrics"]
    assert f"relevance judgements {judgements}" in capsys.readouterr().out
    judgements.write_text("caption,file_name,relevance\na dog barks,clip9,1\n")
    with pytest.raises(
        SystemExit, match=r"hf-atr evaluate: .*judgements\.csv, line 2: field 'file_name' names 'clip9'"
    ):
        run_cli(argv[:-2])


def test_evaluate_with_window_pooling_records_it_and_skips_undecodable_clips(model_dir, tmp_path):
    waveforms = [recording_with_event(3, 1.0, SAMPLING_RATE, seed=seed)[0] for seed in range(3)]
    audio = [{"bytes": encode_wav(w, SAMPLING_RATE, subtype="FLOAT"), "path": None} for w in waveforms]
    audio.append({"bytes": b"not audio at all", "path": "broken.wav"})
    split = Dataset.from_dict(
        {
            "audio_id": ["c0", "c1", "c2", "broken"],
            "audio": audio,
            "captions": [["a tone"], ["a beep"], ["noise"], ["x"]],
        }
    )
    DatasetDict({"test": split}).save_to_disk(str(tmp_path / "data"))
    output = tmp_path / "metrics.json"
    argv = [
        "evaluate",
        "--model",
        str(model_dir),
        "--dataset",
        str(tmp_path / "data"),
        "--output",
        str(output),
    ]
    assert run_cli([*argv, "--window-pooling", "max", "--hop-seconds", "0.25"]) == 0
    protocol = json.loads(output.read_text())["protocol"]
    assert protocol["window_pooling"] == {"pooling": "max", "window_seconds": 1.015, "hop_seconds": 0.25}
    assert protocol["clips"] == 3 and protocol["captions"] == 3
    assert protocol["skipped_clips"] == [
        {"audio_id": "broken", "reason": "the audio is unreadable or corrupt (Format not recognised)."}
    ]
    assert run_cli(argv) == 0
    protocol = json.loads(output.read_text())["protocol"]
    assert protocol["window_pooling"] is None and protocol["clips_cut_to_window"] == 3
    with pytest.raises(SystemExit, match="--window-seconds / --hop-seconds apply with --window-pooling"):
        run_cli([*argv, "--hop-seconds", "0.5"])
    with pytest.raises(SystemExit, match="broken: the audio is unreadable or corrupt"):
        run_cli([*argv, "--strict"])


def labelled(num_clips: int, seed: int = 0):
    return feature_dataset(num_clips, seed=seed).add_column(
        "label", [WORD_CLASSES[index % len(WORD_CLASSES)] for index in range(num_clips)]
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An IOT model trained 8 steps (evaluated every 4), saved with its processor; a labelled test split."""
    root = tmp_path_factory.mktemp("trained")
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot", "reg": 0.1}, scoring="euclidean")
    trainer = AtrTrainer(
        model=model,
        args=training_args(root / "run", max_steps=8, logging_steps=2, eval_strategy="steps", eval_steps=4),
        train_dataset=feature_dataset(32),
        eval_dataset=feature_dataset(8, seed=1),
        processing_class=processor,
    )
    trainer.train()
    trainer.save_model(str(root / "model"))
    processor.save_pretrained(root / "model")
    DatasetDict({"test": labelled(16, seed=2)}).save_to_disk(str(root / "data"))
    return root


@pytest.mark.slow
def test_trained_model_card_has_training_curves(trained):
    card = (trained / "model" / "README.md").read_text()
    assert f"]({TRAINING_CURVES_FILE})" in card and (trained / "model" / TRAINING_CURVES_FILE).is_file()
    assert "Constant over the run (not drawn): `iot_transported_mass` = 1." in card


@pytest.mark.slow
def test_retrieval_report_of_a_trained_model(trained, tmp_path, capsys):
    report_dir = tmp_path / "report"
    argv = ["evaluate", "--model", str(trained / "model"), "--dataset", str(trained / "data"),
            "--report", str(report_dir), "--output", str(tmp_path / "metrics.json")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"Report written to {report_dir / 'report.html'} (figures beside it)" in printed
    assert sorted(path.name for path in report_dir.iterdir()) == [
        "rank_histogram.png",
        "recall_at_k.png",
        "report.html",
        "transport_plan.png",
    ]
    metrics = json.loads((tmp_path / "metrics.json").read_text())["metrics"]
    page = (report_dir / "report.html").read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 3
    assert f"<tr><td>t2a_R@1</td><td>{100 * metrics['t2a_R@1']:.2f}</td></tr>" in page


def test_zero_shot_report_of_a_trained_model(trained, tmp_path, capsys):
    report_dir = tmp_path / "zero_shot"
    argv = ["evaluate", "--model", str(trained / "model"), "--dataset", str(trained / "data"), "--zero-shot",
            "--template", "a {} sound", "--template", "the {class}", "--report", str(report_dir)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "Zero-shot classification on " in printed
        and "16 clips, 8 classes from the split's distinct labels (the dataset records no class list), templates "
        "['a {} sound', 'the {class}']"
        in printed
    )
    accuracy, chance = next(
        line for line in printed.splitlines() if line.strip().startswith("accuracy")
    ).split()[1:]
    assert 0.0 <= float(accuracy) <= 100.0 and chance == "12.50"
    assert "Too few clips" not in printed
    assert sorted(path.name for path in report_dir.iterdir()) == [
        "confusion_matrix.png",
        "per_class_accuracy.png",
        "report.html",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--zero-shot", "--languages", "eng", "fra"],
            r"--languages applies to retrieval, not to --zero-shot",
        ),
        (
            ["--zero-shot", "--relevance", "judged.csv", "--relevance-missing", "skip"],
            r"--relevance and --relevance-missing apply to retrieval, not to --zero-shot",
        ),
        (["--labels", "dog"], r"--labels applies to --zero-shot"),
        (
            ["--label-column", "kind", "--template", "a {}"],
            r"--label-column and --template apply to --zero-shot",
        ),
        (
            ["--zero-shot", "--hop-seconds", "0.5"],
            r"--window-seconds / --hop-seconds apply with --window-pooling",
        ),
        (
            ["--zero-shot", "--labels", "dog", "siren"],
            r"clip\(s\) have a 'label' that is not among the 2 labels",
        ),
        (["--zero-shot", "--label-column", "kind"], r"no 'kind' column"),
        (
            ["--split", "test,validation"],
            r"several splits \(--split test,validation\) apply to --zero-shot; retrieval evaluates one split",
        ),
        (["--split", "all"], r"several splits \(--split all\) apply to --zero-shot"),
        (["--zero-shot", "--split", ","], r"--split ',' names no split"),
        (
            ["--zero-shot", "--min-clips", "-3"],
            r"hf-atr evaluate: min_clips must be a whole number of clips, 0 or more",
        ),
        (["--min-clips", "3"], r"--min-clips applies to --zero-shot"),
        (
            ["--zero-shot", "--split", "test,nope"],
            r"--split: .*data has no split\(s\) \['nope'\]; its splits: \['test'\]",
        ),
    ],
)
def test_evaluate_options_that_do_not_fit_are_refused(trained, extra, message):
    with pytest.raises(SystemExit, match=message):
        main(["evaluate", "--model", str(trained / "model"), "--dataset", str(trained / "data"), *extra])


def test_a_corpus_read_by_its_loader_equals_the_saved_corpus(trained, tmp_path, capsys):
    """--dataset LOADER --data-dir DIR reads the corpus as `hf-atr train` does; the metrics and the corpus in the
    protocol are those of the same corpus loaded and saved first."""
    from hf_atr.data.audio_text_folder import load_audio_text_folder

    write_sound_folder(tmp_path / "corpus" / "test", clips=6, seed=3)
    load_audio_text_folder(tmp_path / "corpus").save_to_disk(str(tmp_path / "saved"))
    model = ["evaluate", "--model", str(trained / "model")]
    main([*model, "--dataset", "audiofolder", "--data-dir", str(tmp_path / "corpus"), "--output",
          str(tmp_path / "loaded.json")])  # fmt: skip
    main([*model, "--dataset", str(tmp_path / "saved"), "--output", str(tmp_path / "saved.json")])
    loaded, saved = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("loaded", "saved"))
    assert loaded["metrics"] == pytest.approx(saved["metrics"], abs=1e-9)
    assert loaded["protocol"]["clips"] == 6 and loaded["protocol"]["corpus"] == saved["protocol"]["corpus"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dataset", "clotho"], r"--dataset clotho reads the corpus in --data-dir DIR; give it\."),
        (["--dataset", "audiofolder", "--data-dir", "{corpus}", "--split", "validation"],
         r"hf-atr evaluate: .*corpus: no metadata rows for split\(s\) \['validation'\]\."),
        (["--dataset", "audiofolder", "--data-dir", "{corpus}/nowhere"], r"hf-atr evaluate: data_dir .*/corpus/nowhere is not a directory\."),
        (["--dataset", "{saved}", "--missing", "skip"],
         r"--missing applies to a corpus read by its loader \(--dataset audiocaps\|clotho"),
    ],
)  # fmt: skip
def test_loader_options_that_do_not_fit_are_refused(trained, tmp_path, extra, message):
    write_sound_folder(tmp_path / "corpus" / "test", clips=2)
    extra = [value.format(corpus=tmp_path / "corpus", saved=trained / "data") for value in extra]
    with pytest.raises(SystemExit, match=message):
        main(["evaluate", "--model", str(trained / "model"), *extra])


@pytest.fixture(scope="module")
def esc50_copy(tmp_path_factory):
    """A partial copy of ESC-50: the release's esc50.csv, audio for 11 clips of fold 2, 1 of fold 3, 4 of fold 4."""
    root = tmp_path_factory.mktemp("esc50") / "ESC-50-master"
    write_esc50_release(root, {2: 11, 3: 1, 4: 4})
    return root


def _zero_shot_on_esc50(trained, esc50_copy, output, *extra):
    argv = ["evaluate", "--model", str(trained / "model"), "--zero-shot", "--dataset", "esc50", "--data-dir",
            str(esc50_copy), "--missing", "skip", "--output", str(output), *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(output.read_text())


def test_a_single_clip_fold_is_scored_among_the_50_classes_and_flagged(trained, esc50_copy, tmp_path, capsys):
    result = _zero_shot_on_esc50(trained, esc50_copy, tmp_path / "fold3.json", "--split", "fold3")
    printed = capsys.readouterr().out
    assert (
        "Zero-shot classification on esc50 (fold3, 1 clips, 50 classes from the dataset's class list"
        in printed
    )
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines() if line.startswith("  ")}
    assert rows["clips"] == ["1"] and rows["accuracy"][1] == "2.00" and rows["mAP@10"][1] == "5.86"
    assert rows["class_to_audio_mAP@10"][1] == "—"
    assert (
        "Too few clips to measure 50 classes (fewer than 50, --min-clips): fold3 (1 clips); these figures are not a "
        "measurement." in printed
    )
    protocol = result["protocol"]
    assert protocol["classes"] == 50 and protocol["chance"]["accuracy"] == 0.02 and protocol["too_few_clips"]
    assert result["splits"]["fold3"]["too_few_clips"] and result["metrics"] == {
        name: result["splits"]["fold3"][name] for name in result["metrics"]
    }
    _zero_shot_on_esc50(trained, esc50_copy, tmp_path / "min.json", "--split", "fold3", "--min-clips", "1")
    assert "Too few clips" not in capsys.readouterr().out


@pytest.mark.slow
def test_several_folds_in_one_run_with_figures_per_fold(trained, esc50_copy, tmp_path, capsys):
    several = _zero_shot_on_esc50(trained, esc50_copy, tmp_path / "several.json", "--split", "fold2,fold4")
    printed = capsys.readouterr().out
    assert "esc50 (fold2+fold4, 15 clips, 50 classes" in printed
    assert re.search(r"^ +fold2 +fold4 +all +chance$", printed, re.MULTILINE)
    assert [(name, figures["clips"]) for name, figures in several["splits"].items()] == [
        ("fold2", 11), ("fold4", 4), ("all", 15)
    ]  # fmt: skip
    assert "fold2 (11 clips), fold4 (4 clips), all (15 clips)" in printed
    alone = _zero_shot_on_esc50(trained, esc50_copy, tmp_path / "fold4.json", "--split", "fold4")
    assert several["splits"]["fold4"] == pytest.approx(alone["splits"]["fold4"])
    every = _zero_shot_on_esc50(trained, esc50_copy, tmp_path / "all.json", "--split", "all")
    assert list(every["splits"]) == ["fold2", "fold3", "fold4", "all"]  # folds 1 and 5 have no audio here
    assert every["splits"]["all"]["clips"] == 16 and every["protocol"]["split"] == "fold2+fold3+fold4"


def test_a_split_that_esc50_does_not_have_is_refused(trained, esc50_copy):
    with pytest.raises(
        SystemExit, match=r"hf-atr evaluate: 'test' is not an ESC-50 split; its splits are \['fold1', 'fold2'"
    ):
        main(["evaluate", "--model", str(trained / "model"), "--zero-shot", "--dataset", "esc50", "--data-dir",
              str(esc50_copy)])  # fmt: skip
