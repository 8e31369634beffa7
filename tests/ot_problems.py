"""Shared OT test problems (imported by name: ``tests`` is on pytest's pythonpath)."""

from __future__ import annotations

import torch


def clustered_retrieval_cost(n: int) -> torch.Tensor:
    """(n, n) float32 cost 1 - cos of clustered, near-aligned unit embeddings, as ``benchmarks/ot_solvers.py``.

    A near-diagonal retrieval batch on which Sinkhorn alone crawls: 1,000-7,000 iterations to reach 1e-6.
    """
    generator = torch.Generator().manual_seed(0)
    audio = 1.5 * torch.randn(n, 64, generator=generator) + torch.randn(1, 64, generator=generator)
    audio = torch.nn.functional.normalize(audio, dim=1)
    text = torch.nn.functional.normalize(audio + 0.06 * torch.randn(n, 64, generator=generator), dim=1)
    return 1 - audio @ text.T
