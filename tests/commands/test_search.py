"""hf-atr search, called as the CLI calls it, on indexes that hf-atr index built."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_cli
from synthetic_audio import recording_with_event
from tiny_models import SAMPLING_RATE, make_model, make_processor

from hf_atr.data.audio import encode_wav


@pytest.mark.parametrize(("command", "explains"), [("search", "A text query returns")])
def test_help_explains_the_command(command, explains, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli([command, "--help"])
    assert exit_info.value.code == 0
    assert explains in " ".join(capsys.readouterr().out.split())


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
    assert lines[0] == f"Sounds like: {directory / 'query.wav'}  (index embeddings computed in float32)"
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


def test_device_search_gives_the_hits_of_faiss_and_bad_devices_are_named(model_dir, recordings_index, capsys):
    directory, index = recordings_index
    search = ["search", "--model", str(model_dir), "--index", str(index), "--json"]
    results = {}
    for placement in ([], ["--device", "cpu"], ["--device", "cpu", "--search-dtype", "float16"]):
        capsys.readouterr()
        assert run_cli([*search, *placement, "--audio", str(directory / "query.wav")]) == 0
        results[" ".join(placement)] = json.loads(capsys.readouterr().out)
    faiss_hits = results[""]
    for placement, hits in results.items():
        assert [(hit["id"], hit["start"]) for hit in hits] == [
            (hit["id"], hit["start"]) for hit in faiss_hits
        ]
        tolerance = 2e-3 if "float16" in placement else 1e-5
        np.testing.assert_allclose(
            [hit["score"] for hit in hits], [hit["score"] for hit in faiss_hits], rtol=0, atol=tolerance
        )
    with pytest.raises(
        SystemExit, match=r"^--device cuda:99: Device 'cuda:99' is not available here: .+\. Give a"
    ):
        run_cli([*search, "--device", "cuda:99", "a dog barks"])
    with pytest.raises(
        SystemExit, match="^hf-atr search: --search-dtype applies to --device search; give --device"
    ):
        run_cli([*search, "--search-dtype", "float16", "a dog barks"])
