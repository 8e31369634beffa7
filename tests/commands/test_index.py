"""hf-atr index, called as the CLI calls it (and searched, to check what it wrote)."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from cli_runner import run_cli
from tiny_models import PE_AUDIO_SAMPLING_RATE, SAMPLING_RATE, random_waveforms, save_converted_pe_audio

from hf_atr.data.audio import encode_wav


@pytest.mark.parametrize(("command", "explains"), [("index", "Ids are the files' paths")])
def test_help_explains_the_command(command, explains, capsys):
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
    assert (
        lines[0] == "Query: 'a siren wails'  (index embeddings computed in float32)"
        and len(lines) == 4
        and lines[1].startswith("  1. ")
    )


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


def test_index_refuses_frame_seconds_with_pool_or_a_model_without_frames(model_dir, audio_dir, tmp_path):
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(tmp_path / "i")]
    with pytest.raises(SystemExit) as exit_info:
        run_cli([*argv, "--pool", "--frame-seconds", "0.2"])
    assert exit_info.value.code == (
        "hf-atr index: --pool makes one entry per file, spanning all of it, and --frame-seconds one entry per "
        "0.2 s of its frames; give one of them."
    )
    assert not (tmp_path / "i").exists()
    with pytest.raises(SystemExit) as exit_info:
        run_cli([*argv, "--frame-seconds", "0.2"])
    assert exit_info.value.code == (
        "hf-atr index --frame-seconds 0.2: frame_seconds needs a model with frame-level audio embeddings "
        "(config.audio_frame_rate), e.g. one converted from a PeAudioFrameLevelModel checkpoint; this model embeds "
        "whole windows only."
    )
    assert not (tmp_path / "i").exists()


def test_index_append_keeps_the_frame_resolution_of_the_index(tmp_path):
    model_dir = save_converted_pe_audio(tmp_path / "pe", frame_level=True)
    audio_dir = tmp_path / "field recordings"
    audio_dir.mkdir()
    clips = 0.1 * np.random.default_rng(3).standard_normal((2, PE_AUDIO_SAMPLING_RATE))  # 1 s each
    (audio_dir / "take 1.wav").write_bytes(encode_wav(clips[0], PE_AUDIO_SAMPLING_RATE))
    out = tmp_path / "index"
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(out)]
    assert run_cli([*argv, "--frame-seconds", "0.2"]) == 0
    (audio_dir / "take 2.wav").write_bytes(encode_wav(clips[1], PE_AUDIO_SAMPLING_RATE))
    for extra, asks, fix in [
        (["--frame-seconds", "0.4"], "entries of --frame-seconds 0.4", "pass --frame-seconds 0.2"),
        ([], "window entries", "pass --frame-seconds 0.2"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            run_cli([*argv, "--append", *extra])
        assert exit_info.value.code == (
            f"hf-atr index --append: the audio index in {out} holds entries of --frame-seconds 0.2, and this run "
            f"asks for {asks}: {fix} to add to it, or --overwrite to rebuild it."
        )
    assert run_cli([*argv, "--append", "--frame-seconds", "0.2"]) == 0
    index = json.loads((out / "audio_index.json").read_text())
    assert index["frame_seconds"] == 0.2 and sorted(set(index["ids"])) == ["take 1.wav", "take 2.wav"]


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


def test_index_encodes_on_the_device_given_and_names_a_bad_one(model_dir, audio_dir, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir)]
    assert run_cli([*argv, "--out", str(tmp_path / "default")]) == 0
    assert run_cli([*argv, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    default, on_cpu = (
        json.loads((tmp_path / name / "audio_index.json").read_text()) for name in ("default", "cpu")
    )
    assert on_cpu == default
    np.testing.assert_allclose(
        load_file(tmp_path / "cpu" / "audio_index.safetensors")["embeddings"],
        load_file(tmp_path / "default" / "audio_index.safetensors")["embeddings"],
        rtol=0,
        atol=1e-6,
    )
    with pytest.raises(SystemExit, match=r"^--device cuda:99: Device 'cuda:99' is not available here: "):
        run_cli([*argv, "--out", str(tmp_path / "gpu"), "--device", "cuda:99"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        SystemExit, match="^hf-atr index: --device is for one process; under accelerate launch or"
    ):
        run_cli([*argv, "--out", str(tmp_path / "gpu"), "--device", "cpu"])
