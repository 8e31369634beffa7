"""``isolated_evaluate_cache``: `evaluate` loading modules from a cache of the test's own, and leaving nothing behind.

`evaluate` reads HF_HOME when it is imported, so its already-computed cache paths are pointed at the folder too. It
puts its modules cache on ``sys.path`` and imports each loaded module as ``evaluate_modules.…`` from there; that
entry, or a package of that name left imported from another test's folder, would hide the modules a later test
loads from its own cache (``No module named 'evaluate_modules.metrics…'``), so both are undone on exit.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _evaluate_modules() -> dict:
    return {name: module for name, module in sys.modules.items() if name.split(".")[0] == "evaluate_modules"}


@contextlib.contextmanager
def isolated_evaluate_cache(cache: Path) -> Iterator[Path]:
    """`evaluate`'s caches under ``cache`` while the block runs; ``sys.path`` and the imported ``evaluate_modules``
    packages as they were, after it."""
    evaluate = pytest.importorskip("evaluate")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("HF_HOME", str(cache))
        monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", cache / "modules")
        monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", cache / "metrics")
        monkeypatch.setattr(evaluate.config, "HF_EVALUATE_CACHE", cache / "evaluate")
        monkeypatch.setattr(sys, "path", list(sys.path))
        before = _evaluate_modules()
        for name in before:
            del sys.modules[name]
        try:
            yield cache
        finally:
            for name in _evaluate_modules():
                del sys.modules[name]
            sys.modules.update(before)
