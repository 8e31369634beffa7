"""Partial entropic OT against POT, autograd, gradcheck and its implicit gradient."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from ot_problems import iot_loss, random_problem, retrieval_cost, saved_tensor_bytes

from hf_atr.ot import partial_sinkhorn_log_plan


@pytest.mark.parametrize("reg, mass", [(0.5, 0.5), (0.1, 0.9), (0.05, 0.95)])
def test_partial_plan_matches_pot(reg, mass):
    cost, a, b = random_problem(seed=8)
    b = 1.2 * b
    log_plan = partial_sinkhorn_log_plan(cost, reg, mass, a, b, tol=1e-13, max_iter=50000, grad_mode="none")
    expected = ot.partial.entropic_partial_wasserstein(
        a.numpy(), b.numpy(), cost.numpy(), reg, m=mass, stopThr=1e-15, numItermax=50000
    )
    np.testing.assert_allclose(log_plan.exp().numpy(), expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(log_plan.exp().sum(), torch.tensor(mass, dtype=torch.float64))


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-9), (torch.float32, 1e-6)])
def test_partial_plan_matches_pot_log_solver_on_retrieval_problem(dtype, atol):
    cost = retrieval_cost(32, dtype)
    uniform = torch.full((32,), 1 / 32, dtype=dtype)
    log_plan = partial_sinkhorn_log_plan(cost, 0.05, 0.9, tol=1e-9, max_iter=5000)
    expected = ot.partial.entropic_partial_wasserstein(
        uniform, uniform, cost, 0.05, m=torch.tensor(0.9, dtype=dtype), method="sinkhorn_log", stopThr=1e-10,
        numItermax=5000,
    )  # fmt: skip
    assert log_plan.dtype == dtype
    torch.testing.assert_close(log_plan.exp(), expected, rtol=0, atol=atol)


def test_partial_modes_agree_and_satisfy_constraints():
    cost, a, b = random_problem(seed=9)
    plans = {
        mode: partial_sinkhorn_log_plan(cost, 0.1, 0.8, a, b, tol=1e-10, max_iter=20000, grad_mode=mode).exp()
        for mode in ("implicit", "one_step", "autograd", "none")
    }
    for plan in plans.values():
        torch.testing.assert_close(plan, plans["autograd"], rtol=0, atol=1e-9)
        assert bool((plan.sum(1) <= a + 1e-9).all()) and bool((plan.sum(0) <= b + 1e-9).all())
        torch.testing.assert_close(plan.sum(), torch.tensor(0.8, dtype=torch.float64))


@pytest.mark.parametrize("reg, mass", [(0.2, 0.8), (0.1, 0.9)])
def test_partial_implicit_gradient_matches_autograd(reg, mass):
    cost = retrieval_cost(16, seed=12).requires_grad_()
    iot_loss(
        partial_sinkhorn_log_plan(cost, reg, mass, tol=1e-13, max_iter=100000, grad_mode="autograd")
    ).backward()
    autograd_gradient, cost.grad = cost.grad, None
    iot_loss(partial_sinkhorn_log_plan(cost, reg, mass, tol=1e-9, max_iter=20000)).backward()
    relative_error = (cost.grad - autograd_gradient).norm() / autograd_gradient.norm()
    assert relative_error < 1e-6


def test_partial_autograd_mode_passes_gradcheck():
    cost, a, b = random_problem(3, 4, seed=10)
    weights = torch.rand(3, 4, dtype=torch.float64)

    def weighted_log_plan(cost):
        log_plan = partial_sinkhorn_log_plan(cost, 0.3, 0.7, a, b, tol=0.0, max_iter=20, grad_mode="autograd")
        return (weights * log_plan).sum()

    assert torch.autograd.gradcheck(weighted_log_plan, (cost.requires_grad_(),))


def test_partial_float32_finite_at_tiny_reg_and_memory_constant():
    cost = retrieval_cost(128, torch.float32, seed=11).requires_grad_()
    log_plan = partial_sinkhorn_log_plan(cost, 0.005, 0.95, max_iter=300)
    loss = iot_loss(log_plan)
    loss.backward()
    assert torch.isfinite(log_plan).all() and torch.isfinite(loss) and torch.isfinite(cost.grad).all()

    def solve(max_iter: int) -> int:
        return saved_tensor_bytes(
            lambda: partial_sinkhorn_log_plan(cost, 0.02, 0.95, tol=0.0, max_iter=max_iter)
        )

    assert solve(10) == solve(200)


def test_partial_rejects_bad_mass():
    cost = torch.rand(3, 4)
    with pytest.raises(
        ValueError, match=r"`mass` must lie in \(0, min\(sum\(a\), sum\(b\)\)\] = \(0, 1\]; got 1.5"
    ):
        partial_sinkhorn_log_plan(cost, 0.1, 1.5)
    with pytest.raises(ValueError, match="got 0.0"):
        partial_sinkhorn_log_plan(cost, 0.1, 0.0)
    with pytest.raises(ValueError, match=r"= \(0, 0.5\]; got 0.8"):
        partial_sinkhorn_log_plan(cost, 0.1, 0.8, a=torch.full((3,), 0.5 / 3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        partial_sinkhorn_log_plan(torch.tensor([[float("nan")]]), 0.1, 0.5)
