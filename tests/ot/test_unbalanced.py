"""Unbalanced entropic OT against POT, the full objective, autograd and gradcheck."""

from __future__ import annotations

import ot
import pytest
import torch
from ot_problems import random_problem, retrieval_cost, saved_tensor_bytes

from hf_atr.ot import unbalanced_sinkhorn_plan


def unbalanced_objective(plan, cost, reg, reg_marginal, a, b):
    """<P, C> + reg KL(P | a b^T) + reg_marginal (KL(P 1 | a) + KL(P^T 1 | b)), generalised KL."""

    def kl(x, y):
        return (x * (x / y).log() - x + y).sum()

    return (
        (plan * cost).sum()
        + reg * kl(plan, a[:, None] * b[None, :])
        + reg_marginal * (kl(plan.sum(1), a) + kl(plan.sum(0), b))
    )


@pytest.mark.parametrize("method", ["sinkhorn", "sinkhorn_translation_invariant"])
@pytest.mark.parametrize("reg, reg_marginal", [(0.1, 0.05), (0.03, 0.05), (0.01, 1.0)])
def test_unbalanced_plan_matches_pot(method, reg, reg_marginal):
    cost, a, b = random_problem(seed=4)
    b = 1.5 * b  # different total masses
    plan = unbalanced_sinkhorn_plan(cost, reg, reg_marginal, a, b, tol=1e-12, max_iter=50000)
    expected = ot.unbalanced.sinkhorn_unbalanced(
        a, b, cost, reg, reg_marginal, method=method, reg_type="kl", stopThr=1e-13, numItermax=50000
    )
    torch.testing.assert_close(plan, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(
        unbalanced_objective(plan, cost, reg, reg_marginal, a, b),
        unbalanced_objective(expected, cost, reg, reg_marginal, a, b),
    )


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, 1e-7)])
def test_unbalanced_plan_matches_pot_on_retrieval_problem(dtype, atol):
    cost = retrieval_cost(64, dtype)
    plan = unbalanced_sinkhorn_plan(cost, 0.03, 0.05, tol=1e-9)
    expected = ot.unbalanced.sinkhorn_unbalanced(
        torch.full((64,), 1 / 64, dtype=dtype), torch.full((64,), 1 / 64, dtype=dtype), cost, 0.03, 0.05,
        method="sinkhorn_translation_invariant", stopThr=1e-10,
    )  # fmt: skip
    assert plan.dtype == dtype
    torch.testing.assert_close(plan, expected, rtol=0, atol=atol)


def test_envelope_gradient_equals_autograd_of_full_objective():
    cost, a, b = random_problem(seed=5)
    reg, reg_marginal = 0.05, 0.1
    cost.requires_grad_()
    plan = unbalanced_sinkhorn_plan(
        cost, reg, reg_marginal, a, b, tol=1e-13, max_iter=50000, grad_mode="autograd"
    )
    unbalanced_objective(plan, cost, reg, reg_marginal, a, b).backward()
    full_gradient, cost.grad = cost.grad, None
    plan = unbalanced_sinkhorn_plan(cost, reg, reg_marginal, a, b, tol=1e-13, max_iter=50000)
    assert not plan.requires_grad
    (plan * cost).sum().backward()
    torch.testing.assert_close(cost.grad, full_gradient, rtol=0, atol=1e-9)


def test_unbalanced_autograd_mode_passes_gradcheck():
    cost, a, b = random_problem(3, 4, seed=6)
    weights = torch.rand(3, 4, dtype=torch.float64)

    def weighted_plan(cost, a, b):
        plan = unbalanced_sinkhorn_plan(cost, 0.2, 0.5, a, b, tol=0.0, max_iter=20, grad_mode="autograd")
        return (weights * plan).sum()

    assert torch.autograd.gradcheck(
        weighted_plan, (cost.requires_grad_(), a.requires_grad_(), b.requires_grad_())
    )


def test_unbalanced_float32_finite_at_tiny_reg_and_envelope_memory_constant():
    cost = retrieval_cost(128, torch.float32, seed=7).requires_grad_()
    plan = unbalanced_sinkhorn_plan(cost, 0.005, 0.05)
    assert torch.isfinite(plan).all()
    (plan * cost).sum().backward()
    assert torch.isfinite(cost.grad).all()

    def solve(max_iter: int) -> int:
        return saved_tensor_bytes(
            lambda: unbalanced_sinkhorn_plan(cost, 0.03, 0.05, tol=0.0, max_iter=max_iter)
        )

    assert solve(5) == solve(200) == 0


def test_unbalanced_rejects_bad_input():
    cost = torch.rand(3, 4)
    with pytest.raises(ValueError, match="`reg_marginal` must be a finite number > 0; got 0.0"):
        unbalanced_sinkhorn_plan(cost, 0.1, 0.0)
    with pytest.raises(ValueError, match="`reg` must be a finite number > 0; got -1.0"):
        unbalanced_sinkhorn_plan(cost, -1.0, 0.1)
    with pytest.raises(ValueError, match=r"marginal `b` must have shape \(4,\)"):
        unbalanced_sinkhorn_plan(cost, 0.1, 0.1, b=torch.ones(3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        unbalanced_sinkhorn_plan(torch.full((2, 2), float("nan")), 0.1, 0.1)
    with pytest.raises(ValueError, match="unknown `grad_mode` 'one_step'"):
        unbalanced_sinkhorn_plan(cost, 0.1, 0.1, grad_mode="one_step")


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-8), (torch.float32, 1e-4)])
def test_plan_of_tiny_mass_is_finite_and_equals_the_log_domain_iterations(dtype, rtol):
    """Costs of 11–12 at reg 0.03 (DART's feature cost at batch 4096: channel distances grow like √batch): the
    plan keeps about e^-87 of the mass. The scalings used to overflow (float32: NaN plan) or to be absorbed at
    every iteration without converging (float64: a plan 10^5 times too small)."""
    cost = 11.0 + torch.rand(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    reference = unbalanced_sinkhorn_plan(cost, 0.03, 0.05, tol=1e-12, max_iter=20000, grad_mode="autograd")
    plan = unbalanced_sinkhorn_plan(cost.to(dtype), 0.03, 0.05, tol=1e-9, max_iter=5000)
    assert torch.isfinite(plan).all() and 1e-39 < float(reference.sum()) < 1e-36
    torch.testing.assert_close(plan.double(), reference, rtol=0, atol=rtol * float(reference.max()))
