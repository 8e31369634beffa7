"""Indexing under 2 CPU processes (torchrun, gloo) builds the index one process builds, skipped files included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from synthetic_audio import recording_with_event
from tiny_models import SAMPLING_RATE, make_model, make_processor

from hf_atr.data.audio import encode_wav

WORKER = Path(__file__).with_name("index_worker.py")


def _run(command: list[str], cwd: Path) -> str:
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_two_processes_build_the_index_one_process_builds(tmp_path):
    processor = make_processor()
    make_model(processor=processor).save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    audio = tmp_path / "audio"
    audio.mkdir()
    for index, seconds in enumerate([6, 1, 3, 0.5, 9, 2, 4]):
        recording, _ = recording_with_event(
            seconds, seconds / 4 if seconds >= 2 else None, SAMPLING_RATE, seed=index
        )
        (audio / f"take {index}.wav").write_bytes(encode_wav(recording, SAMPLING_RATE))
    (audio / "._take 0.wav").write_bytes(b"\x00\x05\x16\x07")
    (audio / "broken.wav").write_text("not audio")
    runs = {}
    for name, launcher in (
        ("one", [sys.executable]),
        ("two", [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]),
    ):
        out = tmp_path / name
        out.mkdir()
        stdout = _run([*launcher, str(WORKER), str(tmp_path / "model"), str(audio), str(out)], tmp_path)
        runs[name] = out
        summary = [line for line in stdout.splitlines() if line.startswith("Indexed")]
        assert len(summary) == 1  # one process reports
        assert "the index holds 7 file(s)" in summary[0] and "skipped 2 file(s)" in summary[0]
    one, two = runs["one"], runs["two"]
    single = json.loads((one / "pipe_rank0.json").read_text())
    assert len(single["ids"]) > 7 and single["skipped"][0][1] == "AppleDouble"  # long takes in windows
    for rank in (0, 1):  # every process holds the whole index
        shared = json.loads((two / f"pipe_rank{rank}.json").read_text())
        assert {key: shared[key] for key in ("ids", "spans", "root", "skipped")} == {
            key: single[key] for key in ("ids", "spans", "root", "skipped")
        }
        # Batches of other sizes round the last bit of some products differently.
        np.testing.assert_allclose(shared["embeddings"], single["embeddings"], rtol=0, atol=1e-6)
    for name in ("audio_index.json", "skipped.tsv"):
        assert (two / "cli" / name).read_text() == (one / "cli" / name).read_text()
    np.testing.assert_allclose(
        load_file(two / "cli" / "audio_index.safetensors")["embeddings"],
        load_file(one / "cli" / "audio_index.safetensors")["embeddings"],
        rtol=0,
        atol=1e-6,
    )
