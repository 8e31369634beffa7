"""Real 2-process CPU (gloo) runs: they match a 1-process run with the same global batch, cache gradients
exactly, leave no trainable parameter without a gradient, and stream each rank's own shards."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import feature_dataset

from hf_atr.objectives.registry import available_objectives
from hf_atr.training.streaming import StreamingPairs

WORKER = Path(__file__).with_name("distributed_worker.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
"""A 2-process job on this machine; ``--standalone`` picks a free rendezvous port itself."""


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


OBJECTIVES_ON = {
    "cpu": [("contrastive", "cosine"), ("sigmoid", "cosine"), ("dart", "euclidean")],
    "cuda": [("dart", "euclidean")],
}
"""The objectives (with their scoring) each device trains with, one after the other in one job."""
RUNS = [
    *((objective, scoring, "cpu") for objective, scoring in OBJECTIVES_ON["cpu"]),
    *(
        pytest.param(objective, scoring, "cuda", marks=CUDA_PAIR)
        for objective, scoring in OBJECTIVES_ON["cuda"]
    ),
]


@pytest.fixture(scope="module")
def runs_on(tmp_path_factory):
    """``runs_on(device)``: the folders of one single-process run with a global batch of 16 and one 2-process
    torchrun job with 8 per process, each training every objective of :data:`OBJECTIVES_ON` ``[device]`` in turn;
    run once per device."""
    done = {}

    def runs(device: str) -> tuple[Path, Path]:
        if device not in done:
            folder = tmp_path_factory.mktemp(f"runs-{device}")
            objectives = [f"{objective}:{scoring}" for objective, scoring in OBJECTIVES_ON[device]]
            single, double = folder / "single", folder / "double"
            single.mkdir()
            double.mkdir()
            _run([sys.executable, str(WORKER), str(single), "16", device, *objectives], folder)
            _run([*TORCHRUN, str(WORKER), str(double), "8", device, *objectives], folder)
            done[device] = single, double
        return done[device]

    return runs


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "scoring", "device"), RUNS)
def test_two_processes_reproduce_one_process_with_the_same_global_batch(runs_on, objective, scoring, device):
    single, double = (folder / f"{objective}.json" for folder in runs_on(device))
    one, two = json.loads(single.read_text()), json.loads(double.read_text())
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-4, abs=1e-5)
    assert two["parameters"] == pytest.approx(one["parameters"], rel=1e-4, abs=1e-4)
    ranks = json.loads(double.with_suffix(".ranks.json").read_text())
    assert ranks[0] == ranks[1], "objective state differs between ranks"
    if objective == "dart":
        ema = "feature_transport.reliability_ema"
        assert two["objective_state"][ema] == pytest.approx(one["objective_state"][ema], rel=1e-3, abs=1e-6)


SCALE_WORKER = Path(__file__).with_name("scale_worker.py")


@pytest.mark.slow
def test_two_processes_cache_gradients_exactly_leave_no_unused_parameter_and_split_the_shards(tmp_path):
    """One 2-process gloo job (see scale_worker.py): for every objective, DDP with find_unused_parameters=False
    finds a gradient on every trainable parameter at every step, and gradient caching reaches the parameters of
    uncached training (float64, dropout off); a streamed run reads each rank's own shards."""
    _run([*TORCHRUN, str(SCALE_WORKER), str(tmp_path)], tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["missing"] == {name: [[], []] for name in available_objectives()}
    for name in available_objectives():
        for state in (
            "",
            ".objective",
        ):  # the parameters, and the objective's state (DART's EMA, its counter)
            whole = load_file(str(tmp_path / f"{name}-whole{state}.safetensors"))
            cached = load_file(str(tmp_path / f"{name}-cached{state}.safetensors"))
            assert cached.keys() == whole.keys()
            for key, expected in whole.items():
                torch.testing.assert_close(cached[key], expected, rtol=1e-5, atol=1e-5, msg=f"{name}: {key}")
    assert (
        int(load_file(str(tmp_path / "dart-cached.objective.safetensors"))["feature_transport.num_updates"])
        == 2
    )
    stream = StreamingPairs(feature_dataset(16).to_iterable_dataset(num_shards=4), shuffle_buffer_size=4)
    for rank, collated in enumerate(report["collated"]):
        assert len(collated) == 8  # two batches of four: one epoch of the rank's two shards
        own_shards = {item["audio_id"] for item in itertools.islice(iter(stream.for_process(rank, 2)), 8)}
        assert set(collated) == own_shards
    first, second = (set(collated) for collated in report["collated"])
    assert first.isdisjoint(second) and first | second == {f"clip{index}" for index in range(16)}
