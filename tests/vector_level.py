"""The vector level the suite's numerics run at, printed in pytest's header (tests/conftest.py).

``make test`` runs at the CPU's own level (AVX-512 or AVX2); ``make test-min`` holds torch's kernels, oneDNN and
MKL at SSE level. Two numeric paths then run in CI, and a red run's header says which one failed.
"""

from __future__ import annotations

import os

import torch

VECTOR_LEVEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
"""What holds the vector units down: torch's own kernels, oneDNN's (convolutions, some matmuls), MKL's (BLAS, on
Intel CPUs; AMD CPUs ignore it)."""


def vector_level_line() -> str:
    """One line: torch's CPU capability in force and each variable of :data:`VECTOR_LEVEL_VARIABLES` (or unset)."""
    variables = " ".join(f"{name}={os.environ.get(name, 'unset')}" for name in VECTOR_LEVEL_VARIABLES)
    return f"vector level: torch CPU capability {torch.backends.cpu.get_cpu_capability()}; {variables}"
