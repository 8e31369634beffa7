"""hf-atr index / search / evaluate, called as the CLI calls them."""

from __future__ import annotations

import argparse
import json

import pytest
from datasets import Dataset, DatasetDict
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms

from hf_atr.cli import add_evaluate_parser, add_index_parser, add_search_parser
from hf_atr.data.audio import encode_wav


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hf-atr")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_parser in (add_index_parser, add_search_parser, add_evaluate_parser):
        add_parser(commands)
    args = parser.parse_args(argv)
    return args.handler(args)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    processor = make_processor()
    make_model(processor=processor).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("audio")
    (directory / "birds").mkdir()
    for name, waveform in zip(["dog.wav", "birds/morning.flac", "siren.wav"], random_waveforms(3)):
        subtype = "PCM_16" if name.endswith("flac") else "FLOAT"
        (directory / name).write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype=subtype))
    (directory / "notes.txt").write_text("not audio")
    return directory


@pytest.mark.parametrize(
    ("command", "explains"),
    [("index", "Ids are the files' paths"), ("search", "A text query returns"), ("evaluate", "`synthcaps`")],
)
def test_help_explains_each_command(command, explains, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli([command, "--help"])
    assert exit_info.value.code == 0
    assert explains in " ".join(capsys.readouterr().out.split())


def test_index_then_search(model_dir, audio_dir, tmp_path, capsys):
    index_dir = tmp_path / "index"
    assert (
        run_cli(["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(index_dir)])
        == 0
    )
    assert "Indexed 3 audio file(s)" in capsys.readouterr().out
    assert sorted(path.name for path in index_dir.iterdir()) == [
        "audio_index.json",
        "audio_index.safetensors",
    ]

    assert run_cli(["search", "--model", str(model_dir), "--index", str(index_dir), "--top-k", "2", "--json",
                    "a dog barks"]) == 0  # fmt: skip
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2 and {hit["id"] for hit in hits} <= {"dog.wav", "birds/morning.flac", "siren.wav"}
    assert hits[0]["score"] >= hits[1]["score"]

    assert run_cli(["search", "--model", str(model_dir), "--index", str(index_dir), "a siren wails"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Query: 'a siren wails'" and len(lines) == 4 and lines[1].startswith("  1. ")


def test_index_of_a_folder_without_audio_fails_clearly(model_dir, tmp_path):
    with pytest.raises(SystemExit, match="No audio files"):
        run_cli(
            ["index", "--model", str(model_dir), "--audio-dir", str(tmp_path), "--out", str(tmp_path / "i")]
        )


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


@pytest.fixture
def saved_split(tmp_path):
    """Four clips that all carry the same two captions, saved as the validation split of a DatasetDict."""
    waveforms = random_waveforms(4, seed=2)
    split = Dataset.from_dict(
        {
            "audio_id": [f"clip{i}" for i in range(4)],
            "audio": [
                {"bytes": encode_wav(w, SAMPLING_RATE, subtype="FLOAT"), "path": None} for w in waveforms
            ],
            "captions": [["a dog barks", "birds sing"]] * 4,
        }
    )
    DatasetDict({"validation": split}).save_to_disk(str(tmp_path / "data"))
    return tmp_path / "data"


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
    with pytest.raises(SystemExit, match=r"no split 'test'; splits: \['validation'\]"):
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
