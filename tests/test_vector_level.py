"""The vector level in pytest's header: what is in force, read back in a fresh process where it is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from vector_level import VECTOR_LEVEL_VARIABLES

HELD_AT_SSE = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
}
"""``make test-min``'s level (the Makefile's ``VECTOR_LEVEL_MIN``)."""
TESTS = Path(__file__).parent


def _run(command: list[str], variables: dict[str, str]) -> str:
    """``command``'s output, run from the repository root with ``variables`` as the only vector-level ones."""
    environment = {name: value for name, value in os.environ.items() if name not in VECTOR_LEVEL_VARIABLES}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), environment.get("PYTHONPATH")]))
    result = subprocess.run(
        command,
        env={**environment, **variables},
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


@pytest.mark.slow
def test_held_at_sse_pytest_s_header_says_so():
    header = _run(
        [sys.executable, "-m", "pytest", "--collect-only", str(TESTS / "test_ranking_margin.py")], HELD_AT_SSE
    )
    assert (
        "vector level: torch CPU capability DEFAULT; "
        "ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2\n"
    ) in header


@pytest.mark.slow
def test_unheld_the_line_names_the_cpu_s_own_level():
    line = _run(
        [sys.executable, "-c", "from vector_level import vector_level_line; print(vector_level_line())"], {}
    )
    capability, variables = line.removeprefix("vector level: torch CPU capability ").split("; ")
    assert capability in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "SVE256", "SVE128"}, line
    assert variables == "ATEN_CPU_CAPABILITY=unset ONEDNN_MAX_CPU_ISA=unset MKL_ENABLE_INSTRUCTIONS=unset\n"
