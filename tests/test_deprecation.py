"""hf-atr's deprecations: shown to users by default, errors in hf-atr's own tests."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from hf_atr.deprecation import HfAtrDeprecationWarning
from hf_atr.metrics.retrieval import retrieval_metrics


def test_a_deprecated_alias_used_in_the_tests_fails_them():
    """pyproject.toml's filterwarnings: a test (or a module of hf-atr) still on a deprecated alias fails, unless it
    is the test of the alias and expects the warning with pytest.deprecated_call()."""
    with pytest.raises(
        HfAtrDeprecationWarning, match=r"`map_cutoff` is deprecated .* pass `map_cutoffs=\(c,\)`"
    ):
        retrieval_metrics(np.eye(3), [0, 1, 2], map_cutoff=2)
    with pytest.deprecated_call():
        assert "t2a_mAP@2" in retrieval_metrics(np.eye(3), [0, 1, 2], map_cutoff=2)


@pytest.mark.slow
def test_a_user_sees_the_deprecation_under_python_s_default_filters(tmp_path):
    """A FutureWarning: Python shows it whatever module makes the call (a DeprecationWarning only when the
    call is in ``__main__``)."""
    (tmp_path / "analysis.py").write_text(
        "import numpy as np\n"
        "from hf_atr.metrics.retrieval import retrieval_metrics\n"
        "metrics = retrieval_metrics(np.eye(3), [0, 1, 2], map_cutoff=2)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", "import analysis"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "analysis.py:3: HfAtrDeprecationWarning: `map_cutoff` is deprecated" in completed.stderr
