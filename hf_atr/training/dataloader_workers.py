"""How many DataLoader workers prepare the training batches when none is asked for: from the cores this process
may run on (its CPU affinity) shared by the training processes of the machine, each keeping one for itself.

``hf-atr train`` uses it when ``--dataloader_num_workers`` is unset; the record of the choice goes to
``metrics.json`` (``data_loading``) and the model card.
"""

from __future__ import annotations

import os
from typing import Any

MAX_DEFAULT_WORKERS = 8
"""The most DataLoader workers chosen by default. On a 16-core H100 machine, 8 workers fed AtrTrainer faster than
15 (precomputed features: 278 against 322 ms per step of 256 pairs; raw audio on the device: 352 against 343 ms):
more workers contend with the training process for cores and memory bandwidth."""
DEFAULT_WORKERS_RULE = f"min({MAX_DEFAULT_WORKERS}, usable cores per process - 1)"
"""The default count, in words (the help of ``--dataloader_num_workers`` and the record of the choice)."""


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a container's or ``taskset``'s limit, unlike
    ``os.cpu_count``), or ``os.cpu_count()`` where the platform has no affinity."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_processes() -> int:
    """The training processes on this machine: ``LOCAL_WORLD_SIZE`` (set by torchrun and accelerate), else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def default_dataloader_workers(cores: int, processes: int = 1) -> int:
    """``min(MAX_DEFAULT_WORKERS, cores // processes - 1)``, at least 0: each training process keeps one of its
    share of the cores for itself and gives the rest to its DataLoader workers.

    Args:
        cores: the usable cores of the machine (:func:`usable_cores`).
        processes: training processes on the machine (:func:`local_processes`).
    """
    return max(0, min(MAX_DEFAULT_WORKERS, cores // max(1, processes) - 1))


def chosen_dataloader_workers() -> dict[str, Any]:
    """The default worker count of this process and how it was chosen: ``{"dataloader_num_workers",
    "chosen_by", "usable_cores", "processes_on_the_machine"}`` (the record written to ``metrics.json``)."""
    cores, processes = usable_cores(), local_processes()
    return {
        "dataloader_num_workers": default_dataloader_workers(cores, processes),
        "chosen_by": f"default: {DEFAULT_WORKERS_RULE}",
        "usable_cores": cores,
        "processes_on_the_machine": processes,
    }


__all__ = [
    "DEFAULT_WORKERS_RULE",
    "MAX_DEFAULT_WORKERS",
    "chosen_dataloader_workers",
    "default_dataloader_workers",
    "local_processes",
    "usable_cores",
]
