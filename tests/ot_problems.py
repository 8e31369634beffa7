"""Shared OT test problems (imported by name: ``tests`` is on pytest's pythonpath)."""

from __future__ import annotations

import numpy as np
import ot
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


def retrieval_cost(n: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    """1 - cos between near-aligned audio/text embeddings: a retrieval-like, near-diagonal cost (n, n)."""
    generator = torch.Generator().manual_seed(seed)
    audio = torch.randn(n, 64, generator=generator, dtype=torch.float64) + torch.randn(
        1, 64, generator=generator, dtype=torch.float64
    )
    audio = torch.nn.functional.normalize(audio, dim=1)
    text = torch.nn.functional.normalize(
        audio + 0.06 * torch.randn(n, 64, generator=generator, dtype=torch.float64), dim=1
    )
    return (1 - audio @ text.T).to(dtype)


def random_problem(n: int = 7, m: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (n, m) cost in [0, 1) with random positive marginals of total 1 (float64)."""
    generator = torch.Generator().manual_seed(seed)
    cost = torch.rand(n, m, generator=generator, dtype=torch.float64)
    a = torch.rand(n, generator=generator, dtype=torch.float64) + 0.2
    b = torch.rand(m, generator=generator, dtype=torch.float64) + 0.2
    return cost, a / a.sum(), b / b.sum()


def iot_loss(log_plan: torch.Tensor) -> torch.Tensor:
    """IOT loss, uniform marginals 1/k: -(1/k) sum_i log(k * plan_ii) (KL to the diagonal up to a constant)."""
    k = log_plan.shape[0]
    return -(log_plan.diagonal() + np.log(k)).mean()


def saved_tensor_bytes(function) -> int:
    """Bytes autograd stores for backward while ``function()`` runs."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function()
    return total


def pot_log_plan(cost: np.ndarray, reg: float) -> np.ndarray:
    """log of POT's entropic plan with uniform marginals (m-LTM Eq. 3), the reference for the evaluators' OT scoring."""
    n_text, n_audio = cost.shape
    plan = ot.sinkhorn(
        np.full(n_text, 1 / n_text),
        np.full(n_audio, 1 / n_audio),
        cost,
        reg,
        method="sinkhorn_log",
        stopThr=1e-10,
        numItermax=100000,
    )
    return np.log(plan)
