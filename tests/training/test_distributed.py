"""A real 2-process CPU (gloo) run matches a 1-process run with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("distributed_worker.py")


def _run(command: list[str], tmp_path: Path) -> None:
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    result = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]


CUDA_PAIR = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices for NCCL")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "scoring", "device"),
    [
        ("contrastive", "cosine", "cpu"),
        ("dart", "euclidean", "cpu"),
        pytest.param("dart", "euclidean", "cuda", marks=CUDA_PAIR),
    ],
)
def test_two_processes_reproduce_one_process_with_the_same_global_batch(tmp_path, objective, scoring, device):
    single, double = tmp_path / "single.json", tmp_path / "double.json"
    _run([sys.executable, str(WORKER), str(single), "16", objective, scoring, device], tmp_path)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    _run([*torchrun, str(WORKER), str(double), "8", objective, scoring, device], tmp_path)
    one, two = json.loads(single.read_text()), json.loads(double.read_text())
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-4, abs=1e-5)
    assert two["parameters"] == pytest.approx(one["parameters"], rel=1e-4, abs=1e-4)
    ranks = json.loads(double.with_suffix(".ranks.json").read_text())
    assert ranks[0] == ranks[1], "objective state differs between ranks"
    if objective == "dart":
        ema = "feature_transport.reliability_ema"
        assert two["objective_state"][ema] == pytest.approx(one["objective_state"][ema], rel=1e-3, abs=1e-6)
