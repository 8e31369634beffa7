"""``hf-atr train`` under torchrun: 2 CPU processes (gloo) give the model 1 process gives with the same global
batch, and write it once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import write_sound_folder


def _run(command: list[str], cwd) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.slow
def test_two_processes_train_the_model_one_process_trains(tmp_path, towers):
    audio_tower, text_tower = towers
    write_sound_folder(tmp_path / "sounds", clips=20)
    common = [
        "train", "--audio_model", str(audio_tower), "--text_model", str(text_tower), "--projection_dim", "8",
        "--dataset", "audiofolder", "--data_dir", "sounds", "--test_size", "4", "--max_steps", "3",
        "--learning_rate", "1e-3", "--features_cache_dir", "features", "--use_cpu", "--report_to", "none",
        "--save_steps", "3", "--logging_steps", "1",
    ]  # fmt: skip
    _run([sys.executable, "-m", "hf_atr.cli", *common, "--output_dir", "one", "--per_device_train_batch_size", "8"],
         tmp_path)  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    _run([*torchrun, "-m", "hf_atr.cli", *common, "--output_dir", "two", "--per_device_train_batch_size", "4"],
         tmp_path)  # fmt: skip
    one, two = (
        load_file(tmp_path / "one/model/model.safetensors"),
        load_file(tmp_path / "two/model/model.safetensors"),
    )
    assert one.keys() == two.keys()
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    losses = {
        run: [entry["loss"] for entry in json.loads((tmp_path / run / "checkpoint-3/trainer_state.json").read_text())[
            "log_history"] if "loss" in entry]
        for run in ("one", "two")
    }  # fmt: skip
    assert len(losses["one"]) == 3 and losses["two"] == pytest.approx(losses["one"], rel=1e-4)
    metrics_one = json.loads((tmp_path / "one/metrics.json").read_text())
    metrics_two = json.loads((tmp_path / "two/metrics.json").read_text())
    assert metrics_two["training"]["train_loss"] == pytest.approx(
        metrics_one["training"]["train_loss"], rel=1e-4
    )
    assert metrics_two["metrics"] == pytest.approx(metrics_one["metrics"], abs=1e-6)
    assert sorted(path.name for path in (tmp_path / "two").iterdir()) == [
        "checkpoint-3", "metrics.json", "model", "test_split",
    ]  # fmt: skip
    # the training split's features, one file shared by every run (the evaluator reads the test audio itself)
    assert [path.name[:6] for path in (tmp_path / "features").glob("*.arrow")] == ["train-"]
