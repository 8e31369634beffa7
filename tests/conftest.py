"""Shared fixtures (factories live in tiny_models.py so tests can import them), the vector level in pytest's header
(vector_level.py), and what makes the suite safe to run in parallel workers (pytest-xdist; see tests/README.md)."""

from __future__ import annotations

import gc
import os
import tempfile
from typing import TYPE_CHECKING

import pytest
import torch
from vector_level import vector_level_line

if TYPE_CHECKING:
    from hf_atr import AtrDualEncoderModel, AtrProcessor

GRADIO_PORTS_PER_WORKER = 100
"""gradio scans this many ports up from ``GRADIO_SERVER_PORT`` (7860) for a page launched without a port; each
worker scans its own range, so that two workers never race for one port."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [vector_level_line()]


ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""The thread pools of torch (OpenMP), NumPy's OpenBLAS, MKL and faiss (OpenMP), each sized once, when its library
loads."""


def pytest_configure(config: pytest.Config) -> None:
    """Parallel workers (pytest-xdist) share the cores, so each works on one thread: more runnable threads than cores
    make torch's OpenMP threads spin, and every library's pool defaults to the core count. The controller sets
    :data:`ONE_THREAD` before it starts the workers, which inherit them (as do the processes a test starts); a
    worker also gets its own gradio port range and file cache (gradio reads both variables when the test modules
    import it, after this hook)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        if getattr(config.option, "numprocesses", None):
            for variable in ONE_THREAD:
                os.environ.setdefault(variable, "1")
        return
    index = int(worker.removeprefix("gw"))
    torch.set_num_threads(1)
    os.environ["GRADIO_SERVER_PORT"] = str(7860 + GRADIO_PORTS_PER_WORKER * index)
    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix=f"hf-atr-tests-gradio-{worker}-")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built (the imported libraries, the test modules: about a million objects) out of the
    garbage collector's reach. transformers' ``Trainer.train`` and accelerate's ``free_memory`` run ``gc.collect()``
    on every call, and a full collection walks every tracked object: 0.3 s or more per training run in a process
    that has imported the suite's libraries, and the suite trains a few hundred times. Objects created later, by the
    tests, are collected as usual."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that hold a ``slow`` test first, in their collected order, then the rest: parallel workers take
    whole files (``--dist loadfile``), and a long file started last would leave the other workers idle."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)


# tiny_models (transformers, datasets) is imported by the fixtures that use it, not with this file: a pytest run
# that collects no model test (tests/test_vector_level.py starts one) loads no model code.
@pytest.fixture
def processor() -> AtrProcessor:
    from tiny_models import make_processor

    return make_processor("ast")


@pytest.fixture
def model(processor) -> AtrDualEncoderModel:
    from tiny_models import make_model

    return make_model("ast", "bert", processor=processor)
