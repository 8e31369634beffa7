"""Shared fixtures (factories live in tiny_models.py so tests can import them), the vector level in pytest's header
(vector_level.py), and what makes the suite safe to run in parallel workers (pytest-xdist; see tests/README.md)."""

from __future__ import annotations

import gc
import os
import tempfile

import pytest
import torch
from tiny_models import make_model, make_processor
from vector_level import vector_level_line

from hf_atr import AtrDualEncoderModel, AtrProcessor

GRADIO_PORTS_PER_WORKER = 100
"""gradio scans this many ports up from ``GRADIO_SERVER_PORT`` (7860) for a page launched without a port; each
worker scans its own range, so that two workers never race for one port."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [vector_level_line()]


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: one torch thread (the workers share the cores; more threads than cores make torch's
    OpenMP threads spin), the same for the processes a test starts, and the worker's own gradio port range and
    file cache. Runs before the test modules import gradio, which reads both variables on import."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    index = int(worker.removeprefix("gw"))
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
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


@pytest.fixture
def processor() -> AtrProcessor:
    return make_processor("ast")


@pytest.fixture
def model(processor) -> AtrDualEncoderModel:
    return make_model("ast", "bert", processor=processor)
