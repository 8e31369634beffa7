"""The default DataLoader worker count: from the usable cores (CPU affinity) shared by the machine's training
processes, each keeping one core for itself, at most eight."""

from __future__ import annotations

import pytest

from hf_atr.training.dataloader_workers import (
    DEFAULT_WORKERS_RULE,
    MAX_DEFAULT_WORKERS,
    chosen_dataloader_workers,
    default_dataloader_workers,
    local_processes,
    usable_cores,
)


@pytest.mark.parametrize(
    ("cores", "processes", "expected"),
    [(1, 1, 0), (2, 1, 1), (16, 1, 8), (64, 1, 8), (16, 4, 3), (3, 4, 0), (8, 0, 7)],
)
def test_each_process_keeps_a_core_and_at_most_eight_workers(cores, processes, expected):
    assert default_dataloader_workers(cores, processes) == expected
    assert MAX_DEFAULT_WORKERS == 8 and DEFAULT_WORKERS_RULE == "min(8, usable cores per process - 1)"


def test_usable_cores_follow_the_affinity_not_the_machine(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert usable_cores() == 3
    monkeypatch.delattr("os.sched_getaffinity", raising=False)  # a platform without affinity (macOS, Windows)
    assert usable_cores() == 64
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert usable_cores() == 1


def test_the_choice_records_the_cores_and_the_local_processes(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert local_processes() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_processes() == 4
    assert chosen_dataloader_workers() == {
        "dataloader_num_workers": 3,
        "chosen_by": "default: min(8, usable cores per process - 1)",
        "usable_cores": 16,
        "processes_on_the_machine": 4,
    }
