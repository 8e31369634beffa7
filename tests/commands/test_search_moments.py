"""``hf-atr search --moments``, called as the CLI calls it, on an index that ``hf-atr index`` built: one ranked list
of moments across files, what ``pipe.moments(query, top_k=K)`` returns; the query-file form; the messages."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli
from synthetic_audio import recording_with_event
from tiny_models import SAMPLING_RATE
from transformers import pipeline

from hf_atr.data.audio import encode_wav
from hf_atr.moments import MomentProposalConfig


@pytest.fixture(scope="module")
def moment_index(model_dir, tmp_path_factory):
    """A 30-s recording with a tone at 20.2 s and a 10-s one of noise, and their index."""
    directory = tmp_path_factory.mktemp("moments")
    (directory / "audio").mkdir()
    recording, _ = recording_with_event(30, 20.2, SAMPLING_RATE)
    noise, _ = recording_with_event(10, None, SAMPLING_RATE, seed=2)
    (directory / "audio" / "long take.wav").write_bytes(encode_wav(recording, SAMPLING_RATE, subtype="FLOAT"))
    (directory / "audio" / "noise.wav").write_bytes(encode_wav(noise, SAMPLING_RATE, subtype="FLOAT"))
    index = directory / "index"
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(directory / "audio"), "--out", str(index)]
    assert run_cli(argv) == 0
    return directory, index


def search(model_dir, index, *argv: str) -> list[str]:
    return ["search", "--model", str(model_dir), "--index", str(index), "--moments", *argv]


def test_moments_across_files_are_what_the_pipeline_finds(model_dir, moment_index, capsys):
    directory, index = moment_index
    capsys.readouterr()
    assert run_cli(search(model_dir, index, "--json", "--top-k", "6", "a dog barks")) == 0
    hits = json.loads(capsys.readouterr().out)
    pipe = pipeline("audio-text-retrieval", model=str(model_dir), index_dir=str(index))
    assert hits == json.loads(json.dumps(pipe.moments("a dog barks", top_k=6)))
    assert len(hits) == 6 and {hit["id"] for hit in hits} <= {"long take.wav", "noise.wav"}
    assert all(list(hit) == ["id", "score", "start", "end", "path"] for hit in hits)
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)

    assert (
        run_cli(search(model_dir, index, "--top-k", "2", "--proposer", "sliding_window", "a dog barks")) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    expected = pipe.moments("a dog barks", top_k=2, proposal=MomentProposalConfig(proposer="sliding_window"))
    assert lines == ["Moments of 'a dog barks':"] + [
        f"  {rank}. {hit['id']}  {hit['start']:.2f}-{hit['end']:.2f} s  score={hit['score']:.4f}"
        for rank, hit in enumerate(expected, start=1)
    ]


def test_a_query_file_prints_one_json_line_per_query_and_reports_the_bad_ones(
    model_dir, moment_index, tmp_path, capsys
):
    _, index = moment_index
    queries = tmp_path / "queries.txt"
    queries.write_text("a dog barks\nrain.wav\n")
    capsys.readouterr()
    assert run_cli(search(model_dir, index, "--queries", str(queries), "--top-k", "3")) == 1
    captured = capsys.readouterr()
    first, second = (json.loads(line) for line in captured.out.splitlines())
    assert first["query"] == "a dog barks" and len(first["hits"]) == 3
    assert second == {
        "query": "rain.wav",
        "error": "pipe.moments takes a text query, and 'rain.wav' names an audio file; describe the sound in "
        "words (the recording to search is the second argument).",
    }
    assert captured.err.endswith('hf-atr search: 1 of 2 queries failed (see their "error").\n')


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--audio", "query.wav"],
            "hf-atr search: --moments finds when a described sound happens; give a text query (or --queries FILE), "
            "not --audio.",
        ),
        (["--nms-iou", "2", "a dog"], "hf-atr search --moments: nms_iou must be an IoU in [0, 1], got 2.0."),
    ],
    ids=["by example", "nms"],
)
def test_a_moment_search_the_command_refuses_says_why(model_dir, moment_index, argv, message):
    _, index = moment_index
    with pytest.raises(SystemExit) as exit_info:
        run_cli(search(model_dir, index, *argv))
    assert str(exit_info.value) == message


def test_help_lists_the_moment_options(capsys):
    with pytest.raises(SystemExit):
        run_cli(["search", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert (
        "--moments find when the described sound happens" in shown
        and "sliding_window, also named baseline (the AMR" in shown
    )
