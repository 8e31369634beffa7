"""hf-atr index / search / evaluate, called as the CLI calls them."""

from __future__ import annotations

import argparse
import json
import os
import stat

import pytest
from datasets import Dataset, DatasetDict
from synthetic_audio import recording_with_event
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


@pytest.mark.parametrize("flag", ["--save-every", "--batch-size"])
def test_index_refuses_a_save_every_or_batch_size_below_one(model_dir, audio_dir, tmp_path, flag):
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(tmp_path / "i")]
    with pytest.raises(SystemExit, match=rf"^{flag} must be at least 1, got 0\.$"):
        run_cli([*argv, flag, "0"])
    assert not (tmp_path / "i").exists()


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


@pytest.fixture(scope="module")
def saved_split(tmp_path_factory):
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
    directory = tmp_path_factory.mktemp("saved")
    DatasetDict({"validation": split}).save_to_disk(str(directory / "data"))
    return directory / "data"


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


def bad_and_good_files(directory):
    directory.mkdir(exist_ok=True)
    for name, waveform in zip(["a.wav", "b.wav"], random_waveforms(2, seed=5)):
        (directory / name).write_bytes(encode_wav(waveform, SAMPLING_RATE))
    (directory / "._a.wav").write_bytes((directory / "a.wav").read_bytes()[:200])
    (directory / "empty.wav").write_bytes(b"")
    (directory / "readme.wav").write_text("renamed text")


def test_index_skips_unreadable_files_and_appends_only_new_ones(model_dir, tmp_path, capsys):
    audio, out = tmp_path / "my audio", tmp_path / "index"
    bad_and_good_files(audio)
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio), "--out", str(out)]
    assert run_cli(argv) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(
        f"Indexed 2 audio file(s) from {audio} into {out}: the index holds 2 file(s) in 2 entries; skipped 3 "
        f"file(s) that cannot be decoded (3 listed in {out / 'skipped.tsv'});"
    )
    assert (out / "skipped.tsv").read_text().splitlines() == [
        "path\treason",
        f"{audio / '._a.wav'}\tAppleDouble",
        f"{audio / 'empty.wav'}\tthe audio file is empty (0 bytes).",
        f"{audio / 'readme.wav'}\tthe audio is unreadable or corrupt (Format not recognised).",
    ]
    with pytest.raises(
        SystemExit, match="already holds an index; pass --append to add the files not yet in it"
    ):
        run_cli(argv)
    (audio / "empty.wav").write_bytes(encode_wav(random_waveforms(1, seed=9)[0], SAMPLING_RATE))  # fixed
    assert run_cli([*argv, "--append"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert "Indexed 1 audio file(s)" in summary and "the index holds 3 file(s)" in summary
    assert "skipped 2 file(s)" in summary and "2 already in the index" in summary
    assert "empty.wav" not in (out / "skipped.tsv").read_text()
    assert run_cli([*argv, "--overwrite", "--pool"]) == 0


def test_index_strict_stops_at_the_first_unreadable_file_and_keeps_the_rest(model_dir, tmp_path):
    audio, out = tmp_path / "audio", tmp_path / "index"
    bad_and_good_files(audio)
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio), "--out", str(out), "--strict",
            "--save-every", "1"]  # fmt: skip
    message = (
        rf"hf-atr index: stopped: {audio / 'empty.wav'}: the audio file is empty \(0 bytes\)\. \(--strict\)\. "
        rf"The 2 file\(s\) indexed so far are saved in {out}; repair or remove that file \(or leave out --strict to "
        rf"skip such files and list them in {out / 'skipped.tsv'}\), then run again with --append to add the rest\."
    )
    with pytest.raises(SystemExit, match=message):
        run_cli(argv)
    assert sorted(set(json.loads((out / "audio_index.json").read_text())["ids"])) == ["a.wav", "b.wav"]


@pytest.fixture(scope="module")
def recordings_index(model_dir, tmp_path_factory):
    """A folder with a 30-s recording holding one tone at 20.2 s, and its index."""
    directory = tmp_path_factory.mktemp("recordings")
    recording, query = recording_with_event(30, 20.2, SAMPLING_RATE)
    (directory / "audio").mkdir()
    (directory / "audio" / "long take.wav").write_bytes(encode_wav(recording, SAMPLING_RATE, subtype="FLOAT"))
    noise, _ = recording_with_event(10, None, SAMPLING_RATE, seed=2)
    (directory / "audio" / "noise.wav").write_bytes(encode_wav(noise, SAMPLING_RATE, subtype="FLOAT"))
    (directory / "query.wav").write_bytes(encode_wav(query, SAMPLING_RATE, subtype="FLOAT"))
    index = directory / "index"
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(directory / "audio"), "--out", str(index)]
    assert run_cli(argv) == 0
    return directory, index


def test_search_returns_files_with_their_span_as_json_and_by_example(model_dir, recordings_index, capsys):
    directory, index = recordings_index
    capsys.readouterr()
    assert run_cli(["search", "--model", str(model_dir), "--index", str(index), "--json", "a dog barks"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {hit["id"] for hit in hits} == {"long take.wav", "noise.wav"}
    assert all(
        {"id", "score", "start", "end", "path"} == set(hit) and hit["end"] > hit["start"] for hit in hits
    )
    assert run_cli(["search", "--model", str(model_dir), "--index", str(index), "--audio",
                    str(directory / "query.wav"), "--top-k", "1"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Sounds like: {directory / 'query.wav'}"
    name, span, _ = lines[1].split("  ")[1:4]
    start, end = (float(value) for value in span.removesuffix(" s").split("-"))
    assert name == "1. long take.wav" and start <= 20.2 and end >= 20.7


def test_batch_queries_print_json_lines_and_report_the_bad_ones(
    model_dir, recordings_index, tmp_path, capsys
):
    _, index = recordings_index
    queries = tmp_path / "queries.txt"
    queries.write_text("a dog barks\n\nrain on a roof\nmissing take.wav\n")
    capsys.readouterr()
    assert (
        run_cli(["search", "--model", str(model_dir), "--index", str(index), "--queries", str(queries)]) == 1
    )
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["query"] for line in lines] == ["a dog barks", "rain on a roof", "missing take.wav"]
    assert len(lines[0]["hits"]) == 2 and "start" in lines[0]["hits"][0]
    assert lines[2]["error"].startswith(
        "The query 'missing take.wav' looks like an audio file path, but there is no"
    )
    assert 'hf-atr search: 1 of 3 queries failed (see their "error").' in captured.err
    with pytest.raises(SystemExit, match="give exactly one of a query, --audio FILE or --queries FILE"):
        run_cli(["search", "--model", str(model_dir), "--index", str(index)])


def test_a_missing_model_or_index_is_named(model_dir, tmp_path):
    with pytest.raises(SystemExit, match=f"--model {tmp_path / 'nothing'}: no such directory."):
        run_cli(["search", "--model", str(tmp_path / "nothing"), "--index", str(tmp_path), "a dog"])
    with pytest.raises(SystemExit, match="holds no saved model \\(no config.json\\)"):
        run_cli(["search", "--model", str(tmp_path), "--index", str(tmp_path), "a dog"])
    with pytest.raises(SystemExit, match="No audio_index.json or text_index.json in"):
        run_cli(["search", "--model", str(model_dir), "--index", str(tmp_path), "a dog"])
    with pytest.raises(
        SystemExit, match=rf"--index {tmp_path / 'nothing'}: no such directory; build the index first"
    ):
        run_cli(["search", "--model", str(model_dir), "--index", str(tmp_path / "nothing"), "a dog"])


def test_caption_index_from_a_file_answers_audio_queries(model_dir, audio_dir, tmp_path, capsys):
    captions = tmp_path / "captions.csv"
    captions.write_text(
        "file_name,caption_1,caption_2\ndog.wav,a dog barks,a dog growls\nsiren.wav,a siren wails,\n"
    )
    out = tmp_path / "index"
    assert run_cli(["index", "--model", str(model_dir), "--captions", str(captions), "--out", str(out)]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .splitlines()[-1]
        .startswith(f"Indexed 3 caption(s) into {out} (3 in the caption index)")
    )
    assert (
        run_cli(
            ["search", "--model", str(model_dir), "--index", str(out), "--json", str(audio_dir / "dog.wav")]
        )
        == 0
    )
    hits = json.loads(capsys.readouterr().out)
    assert {hit["id"] for hit in hits} == {"dog.wav#0", "dog.wav#1", "siren.wav#0"} and "caption" in hits[0]


def test_an_index_without_the_entries_a_query_searches_gets_the_command_that_adds_them(
    model_dir, audio_dir, recordings_index, tmp_path, capsys
):
    """The pipeline's message names Python calls (`pipe.index(...)`); the command line names the command."""
    recordings, audio_only = recordings_index
    captions_only = tmp_path / "captions index"
    (tmp_path / "captions.txt").write_text("a dog barks\na siren wails\n")
    argv = ["index", "--model", str(model_dir), "--captions", str(tmp_path / "captions.txt")]
    assert run_cli([*argv, "--out", str(captions_only)]) == 0
    search = ["search", "--model", str(model_dir), "--index"]
    add_audio = (
        f"hf-atr search: --index {captions_only} holds no audio files to search: add them with "
        f"`hf-atr index --model {model_dir} --audio-dir DIR --out '{captions_only}' --append`."
    )
    for query in (["a dog barks"], ["--audio", str(recordings / "query.wav")]):
        with pytest.raises(SystemExit) as exit_info:
            run_cli([*search, str(captions_only), *query])
        assert str(exit_info.value) == add_audio
    clip = str(audio_dir / "dog.wav")
    add_captions = (
        f"{clip} is an audio file, which searches captions, and --index {audio_only} holds none: add them with "
        f"`hf-atr index --model {model_dir} --captions FILE --out {audio_only} --append`, or find the audio files "
        f"that sound like it with `hf-atr search --model {model_dir} --index {audio_only} --audio {clip}`."
    )
    with pytest.raises(SystemExit) as exit_info:
        run_cli([*search, str(audio_only), clip])
    assert str(exit_info.value) == f"hf-atr search: {add_captions}"
    queries = tmp_path / "queries.txt"
    queries.write_text(f"a dog barks\n{clip}\n")
    capsys.readouterr()
    assert run_cli([*search, str(audio_only), "--queries", str(queries)]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "hits" in lines[0] and lines[1] == {"query": clip, "error": add_captions}
    # The advice, followed, answers the query.
    add = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(captions_only)]
    assert run_cli([*add, "--append"]) == 0
    capsys.readouterr()
    assert run_cli([*search, str(captions_only), "--json", "a dog barks"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3


def test_an_empty_index_or_one_of_another_model_gets_the_command_that_rebuilds_it(model_dir, tmp_path):
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / "notes.wav").write_text("not audio")
    empty = tmp_path / "empty index"
    assert (
        run_cli(["index", "--model", str(model_dir), "--audio-dir", str(unreadable), "--out", str(empty)])
        == 0
    )
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["search", "--model", str(model_dir), "--index", str(empty), "a dog barks"])
    assert str(exit_info.value) == (
        f"hf-atr search: --index {empty} holds no audio files to search: add them with "
        f"`hf-atr index --model {model_dir} --audio-dir DIR --out '{empty}' --append`."
    )

    other = tmp_path / "other model"
    processor = make_processor()
    make_model(processor=processor, seed=1).save_pretrained(other)
    processor.save_pretrained(other)
    index = tmp_path / "index"
    (tmp_path / "captions.txt").write_text("a dog barks\n")
    argv = [
        "index",
        "--model",
        str(model_dir),
        "--captions",
        str(tmp_path / "captions.txt"),
        "--out",
        str(index),
    ]
    assert run_cli(argv) == 0
    problem = (
        f"Index {index / 'text_index.safetensors'} was built with a model of fingerprint "
        rf"[0-9a-f]{{16}}, but this model's fingerprint is [0-9a-f]{{16}} \(other architecture or weights\). "
        rf"Rebuild it for this model with `hf-atr index --model '{other}' --captions FILE --out {index} "
        r"--overwrite`, or use the model that built it\.$"
    )
    with pytest.raises(SystemExit, match=f"^hf-atr: {problem}"):
        run_cli(["search", "--model", str(other), "--index", str(index), str(tmp_path / "captions.txt")])
    with pytest.raises(SystemExit, match=f"^hf-atr index --append: {problem}"):
        run_cli(["index", "--model", str(other), "--captions", str(tmp_path / "captions.txt"), "--out",
                 str(index), "--append"])  # fmt: skip


def test_a_command_prints_no_weight_loading_bar_and_keeps_the_hub_s_download_bars(
    model_dir, recordings_index, capsys
):
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers import AutoModel
    from transformers.utils import logging

    from hf_atr.cli import main

    logging.enable_progress_bar()  # as in a fresh process (an earlier command in this one turned it off)
    capsys.readouterr()
    AutoModel.from_pretrained(model_dir)
    assert "Loading weights" in capsys.readouterr().err  # what every command printed
    hub_bars_disabled = are_progress_bars_disabled()
    assert (
        main(["search", "--model", str(model_dir), "--index", str(recordings_index[1]), "a dog barks"]) == 0
    )
    captured = capsys.readouterr()
    assert captured.out.startswith("Query: 'a dog barks'") and captured.err == ""
    assert are_progress_bars_disabled() == hub_bars_disabled  # a first download from the Hub shows its bar


def test_a_caption_file_in_another_encoding_is_read_with_encoding(model_dir, tmp_path, capsys):
    captions = tmp_path / "captions.csv"
    captions.write_bytes("file_name,caption\ncafe.wav,Chatter in a café\n".encode("cp1252"))
    argv = ["index", "--model", str(model_dir), "--captions", str(captions), "--out", str(tmp_path / "index")]
    with pytest.raises(
        SystemExit,
        match=rf"hf-atr index --captions: {captions}, line 2: not valid utf-8 .*'cp1252' it reads 'cafe\.wav,Chatter in a café'",
    ):
        run_cli(argv)
    assert run_cli([*argv, "--encoding", "cp1252"]) == 0
    assert json.loads((tmp_path / "index" / "text_index.json").read_text())["captions"] == [
        "Chatter in a café"
    ]
    with pytest.raises(SystemExit, match="encoding='latin-9x' is not a text encoding Python knows"):
        run_cli([*argv, "--overwrite", "--encoding", "latin-9x"])


def test_index_a_saved_dataset(model_dir, saved_split, tmp_path, capsys):
    out = tmp_path / "index"
    argv = [
        "index",
        "--model",
        str(model_dir),
        "--dataset",
        str(saved_split),
        "--split",
        "validation",
        "--out",
        str(out),
    ]
    assert run_cli(argv) == 0
    entries = json.loads((out / "text_index.json").read_text())
    assert len(entries["ids"]) == 8 and entries["ids"][:2] == ["clip0#0", "clip0#1"]
    assert "the index holds 4 file(s)" in capsys.readouterr().out


def test_index_files_get_the_permissions_of_any_new_file(model_dir, audio_dir, tmp_path):
    previous = os.umask(0o027)
    try:
        assert (
            run_cli(
                [
                    "index",
                    "--model",
                    str(model_dir),
                    "--audio-dir",
                    str(audio_dir),
                    "--out",
                    str(tmp_path / "i"),
                ]
            )
            == 0
        )
    finally:
        os.umask(previous)
    assert {oct(stat.S_IMODE(path.stat().st_mode)) for path in (tmp_path / "i").iterdir()} == {oct(0o640)}


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
