"""The `evaluate` module's old path, ``hf_atr/evaluation/retrieval_metric``, still loads the same metric and warns."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import numpy as np
import pytest
from evaluate_cache import isolated_evaluate_cache

from hf_atr.metrics.retrieval import RETRIEVAL_METRIC_DIR, load_retrieval_metric

evaluate = pytest.importorskip("evaluate")

REPOSITORY = Path(__file__).resolve().parents[2]
OLD_PATH = "hf_atr/evaluation/retrieval_metric"


@pytest.fixture
def evaluate_cache(tmp_path):
    with isolated_evaluate_cache(tmp_path) as cache:
        yield cache


def test_the_old_path_loads_the_same_metric_with_a_deprecation_warning(evaluate_cache, monkeypatch):
    monkeypatch.chdir(REPOSITORY)  # the path as README wrote it, relative to a checkout
    with pytest.deprecated_call(match='evaluate.load\\("hf_atr/evaluation/retrieval_metric"\\) is deprecated.*'
                                      '"hf_atr/metrics/retrieval_metric"'):  # fmt: skip
        old = evaluate.load(OLD_PATH, cache_dir=str(evaluate_cache / "old"))
    current = load_retrieval_metric(cache_dir=str(evaluate_cache / "current"))
    assert (old.name, old.description, old.features) == (current.name, current.description, current.features)
    scores = np.random.default_rng(0).random((5, 4)).astype(np.float32)
    arguments = {"predictions": scores.tolist(), "references": [0, 1, 2, 3, 0], "ks": (1, 2)}
    assert old.compute(**arguments) == current.compute(**arguments)


def test_the_old_path_is_package_data_beside_the_new_one():
    pyproject = (REPOSITORY / "pyproject.toml").read_text()  # read as text: tomllib is Python 3.11+
    section = re.search(r"^\[tool\.setuptools\.package-data\]\nhf_atr = (\[.*?\])$", pyproject, re.M | re.S)
    patterns = ast.literal_eval(section.group(1))
    shipped = [
        path.relative_to(REPOSITORY / "hf_atr").as_posix()
        for folder in (REPOSITORY / OLD_PATH, RETRIEVAL_METRIC_DIR)
        for path in sorted(folder.iterdir())
        if path.suffix in {".py", ".md"}
    ]
    assert "evaluation/retrieval_metric/retrieval_metric.py" in shipped
    assert "evaluation/retrieval_metric/README.md" in shipped
    for path in shipped:
        assert any(fnmatch.fnmatch(path, pattern) for pattern in patterns), path
