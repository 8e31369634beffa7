"""Balanced entropic OT against POT (the reference), closed forms, autograd and gradcheck."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ot
import pytest
import torch
from ot_problems import clustered_retrieval_cost, iot_loss, random_problem, retrieval_cost, saved_tensor_bytes

from hf_atr.ot import sinkhorn_log_plan


@pytest.mark.parametrize("reg", [0.5, 0.05, 0.01])
def test_balanced_plan_matches_pot_on_random_problem(reg):
    cost, a, b = random_problem()
    log_plan = sinkhorn_log_plan(cost, reg, a, b, tol=1e-12, max_iter=20000, grad_mode="none")
    expected = ot.sinkhorn(a, b, cost, reg, method="sinkhorn_log", stopThr=1e-12, numItermax=20000)
    torch.testing.assert_close(log_plan.exp(), expected, rtol=0, atol=1e-10)
    assert not log_plan.requires_grad


@pytest.mark.parametrize("dtype, tol, atol", [(torch.float64, 1e-9, 1e-9), (torch.float32, 1e-6, 1e-6)])
@pytest.mark.parametrize("reg", [0.05, 0.005])
def test_balanced_plan_matches_pot_on_retrieval_problem(dtype, tol, atol, reg):
    cost = retrieval_cost(64, dtype)
    uniform = torch.full((64,), 1 / 64, dtype=dtype)
    log_plan = sinkhorn_log_plan(cost, reg, tol=tol, max_iter=5000)
    expected = ot.sinkhorn(uniform, uniform, cost, reg, method="sinkhorn_log", stopThr=tol, numItermax=5000)
    assert log_plan.dtype == dtype
    torch.testing.assert_close(log_plan.exp(), expected, rtol=0, atol=atol)
    # POT's OT value <P, C> agrees too.
    torch.testing.assert_close((log_plan.exp() * cost).sum(), (expected * cost).sum(), rtol=1e-5, atol=0)


def test_balanced_modes_agree_and_reach_tolerance():
    cost, a, b = random_problem(seed=1)
    plans = {
        mode: sinkhorn_log_plan(cost, 0.05, a, b, tol=1e-9, grad_mode=mode).exp()
        for mode in ("one_step", "autograd", "none")
    }
    for plan in plans.values():
        torch.testing.assert_close(plan, plans["autograd"], rtol=0, atol=1e-9)
        assert float(torch.linalg.vector_norm(plan.sum(0) - b)) < 1e-8
        torch.testing.assert_close(plan.sum(1), a, rtol=0, atol=1e-8)


@pytest.mark.parametrize("reg", [0.1, 0.05])
def test_one_step_iot_gradient_matches_exact_implicit_gradient(reg):
    cost = retrieval_cost(32).requires_grad_()
    iot_loss(sinkhorn_log_plan(cost, reg, tol=1e-12, max_iter=50000, grad_mode="autograd")).backward()
    autograd_gradient, cost.grad = cost.grad, None
    iot_loss(sinkhorn_log_plan(cost, reg, tol=1e-8, grad_mode="one_step")).backward()
    one_step_gradient = cost.grad
    # Closed form of the exact gradient for uniform marginals: (I / k - P) / reg (envelope theorem).
    plan = sinkhorn_log_plan(cost.detach(), reg, tol=1e-13, max_iter=50000, grad_mode="none").exp()
    closed_form = (torch.eye(32, dtype=torch.float64) / 32 - plan) / reg
    torch.testing.assert_close(autograd_gradient, closed_form, rtol=0, atol=1e-8 * closed_form.abs().max())
    relative_error = (one_step_gradient - closed_form).norm() / closed_form.norm()
    assert relative_error < 1e-4


def test_autograd_mode_passes_gradcheck():
    cost, a, b = random_problem(3, 4, seed=2)
    weights = torch.rand(3, 4, dtype=torch.float64)

    def weighted_log_plan(cost, a, b):
        log_plan = sinkhorn_log_plan(cost, 0.3, a, b, tol=0.0, max_iter=30, grad_mode="autograd")
        return (weights * log_plan).sum()

    inputs = (cost.requires_grad_(), a.requires_grad_(), b.requires_grad_())
    assert torch.autograd.gradcheck(weighted_log_plan, inputs)


@pytest.mark.parametrize("grad_mode, n", [("one_step", 64), ("one_step", 256), ("autograd", 64)])
def test_float32_log_plan_and_gradient_finite_at_tiny_reg(grad_mode, n):
    cost = retrieval_cost(n, torch.float32, seed=3).requires_grad_()
    log_plan = sinkhorn_log_plan(cost, 0.005, max_iter=200, grad_mode=grad_mode)
    loss = iot_loss(log_plan)
    loss.backward()
    assert torch.isfinite(log_plan).all()
    assert torch.isfinite(loss)
    assert torch.isfinite(cost.grad).all()
    # The log plan is meaningful where the plan underflows: rows still carry their mass.
    torch.testing.assert_close(log_plan.logsumexp(1).exp(), torch.full((n,), 1 / n), rtol=1e-4, atol=0)
    assert float(log_plan.detach().min()) < -104  # exp() of it underflows to 0 in float32


def test_one_step_memory_does_not_grow_with_iterations():
    cost = retrieval_cost(48).requires_grad_()

    def solve(max_iter: int, grad_mode: str) -> int:
        return saved_tensor_bytes(
            lambda: sinkhorn_log_plan(cost, 0.02, tol=0.0, max_iter=max_iter, grad_mode=grad_mode)
        )

    assert solve(10, "one_step") == solve(300, "one_step")
    assert solve(300, "autograd") > 10 * solve(10, "one_step")


def test_balanced_rejects_bad_input():
    cost = torch.rand(3, 4)
    with pytest.raises(ValueError, match="NaN or infinite"):
        sinkhorn_log_plan(torch.tensor([[0.0, float("inf")], [1.0, 0.0]]), 0.1)
    with pytest.raises(ValueError, match="`reg` must be a finite number > 0; got -0.1"):
        sinkhorn_log_plan(cost, -0.1)
    with pytest.raises(ValueError, match=r"marginal `a` must have shape \(3,\)"):
        sinkhorn_log_plan(cost, 0.1, a=torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="strictly positive"):
        sinkhorn_log_plan(cost, 0.1, a=torch.tensor([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match="same total mass"):
        sinkhorn_log_plan(cost, 0.1, a=torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="2-D floating-point tensor"):
        sinkhorn_log_plan(torch.ones(3, 4, dtype=torch.long), 0.1)
    with pytest.raises(ValueError, match="unknown `grad_mode` 'envelope'"):
        sinkhorn_log_plan(cost, 0.1, grad_mode="envelope")
    with pytest.raises(ValueError, match="`max_iter` must be an integer >= 1"):
        sinkhorn_log_plan(cost, 0.1, max_iter=0)
    with pytest.raises(ValueError, match="`tol` must be a finite number >= 0"):
        sinkhorn_log_plan(cost, 0.1, tol=-1.0)


@pytest.mark.slow
@pytest.mark.parametrize(("newton_steps", "tol"), [(30, 1e-9), (1, 1e-6)])
def test_newton_finish_matches_pot_and_falls_back_to_sinkhorn_when_it_stalls(
    monkeypatch, caplog, newton_steps, tol
):
    from hf_atr.ot import balanced as solvers

    cost = clustered_retrieval_cost(32).double()  # Sinkhorn alone needs ~7,000 iterations
    uniform = np.full(32, 1 / 32)
    expected = ot.sinkhorn(
        uniform, uniform, cost.numpy(), 0.05, method="sinkhorn", stopThr=1e-9, numItermax=100_000
    )
    outcomes = []
    newton = solvers._balanced_newton

    def recording_newton(*args):
        outcomes.append(newton(*args))
        return outcomes[-1]

    monkeypatch.setattr(solvers, "_balanced_newton", recording_newton)
    monkeypatch.setattr(solvers, "_NEWTON_MAX_STEPS", newton_steps)
    with caplog.at_level("WARNING"):
        plan = sinkhorn_log_plan(cost, 0.05, tol=tol, max_iter=20_000, grad_mode="none").exp()
    assert len(outcomes) == 1  # called once, after 2 x 32 Sinkhorn iterations
    assert (outcomes[0] is None) == (newton_steps == 1)  # one step cannot reach tol: Sinkhorn resumes
    assert "did not reach" not in caplog.text
    assert float(torch.linalg.vector_norm(plan.sum(0) - 1 / 32)) < tol
    torch.testing.assert_close(
        plan.sum(1), torch.full((32,), 1 / 32, dtype=torch.float64), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(plan, torch.from_numpy(expected), rtol=0, atol=10 * tol)


def test_newton_keeps_going_through_damped_steps_that_do_not_halve_the_error():
    from safetensors.torch import load_file

    from hf_atr.ot import balanced as solvers

    # A Sinkhorn state from training (iot, batch 8, after 16 iterations) where the first damped Newton steps
    # shrink the error by less than half; an early version gave up there and Sinkhorn then hit max_iter.
    state = load_file(str(Path(__file__).with_name("fixtures") / "newton_damped_start.safetensors"))
    log_kernel, beta = state["log_kernel"].double(), state["beta"].double()
    log_uniform = torch.full((8,), -np.log(8), dtype=torch.float64)
    solved = solvers._balanced_newton(log_kernel, log_uniform, log_uniform, beta, 1e-9)
    assert solved is not None
    alpha, beta = solved
    plan = (log_kernel + alpha[:, None] + beta[None, :]).exp()
    assert float(torch.linalg.vector_norm(plan.sum(0) - 1 / 8)) < 1e-9
    torch.testing.assert_close(plan.sum(1), torch.full((8,), 1 / 8, dtype=torch.float64), rtol=0, atol=1e-12)
    expected = ot.sinkhorn(
        np.full(8, 1 / 8),
        np.full(8, 1 / 8),
        -log_kernel.numpy(),
        1.0,
        method="sinkhorn_log",
        stopThr=1e-11,
        numItermax=1_000_000,
    )
    torch.testing.assert_close(plan, torch.from_numpy(expected), rtol=0, atol=1e-9)


def test_newton_returns_valid_potentials_or_none_on_a_near_singular_system():
    from hf_atr.ot import balanced as solvers

    # Two disconnected blocks (the kernel underflows to 0 between them in float64): the semi-dual's
    # Hessian has a second null direction beyond the gauge. Depending on LAPACK's rounding the solve
    # either stalls (None: the caller falls back to Sinkhorn) or converges; it must never return
    # potentials whose plan misses the marginals.
    cost = torch.tensor(
        [[0.0, 0.0, 1e5, 1e5], [0.0, 1.0, 1e5, 1e5], [1e5, 1e5, 0.0, 1.0], [1e5, 1e5, 0.0, 0.0]]
    )
    log_kernel = (-cost / 0.01).double()
    log_uniform = torch.full((4,), -np.log(4), dtype=torch.float64)
    beta = torch.tensor([0.0, 0.0, 3.0, 3.0], dtype=torch.float64)
    solved = solvers._balanced_newton(log_kernel, log_uniform, log_uniform, beta, 1e-9)
    if solved is not None:
        alpha, beta = solved
        plan = (log_kernel + alpha[:, None] + beta[None, :]).exp()
        torch.testing.assert_close(plan.sum(0), log_uniform.exp(), rtol=0, atol=1e-9)
        torch.testing.assert_close(plan.sum(1), log_uniform.exp(), rtol=0, atol=1e-9)


def test_newton_returns_none_when_the_tolerance_is_out_of_reach():
    from hf_atr.ot import balanced as solvers

    # At round-off level no step shrinks the error, so an unreachable tolerance must end in None.
    log_kernel = (-retrieval_cost(8) / 0.05).double()
    log_uniform = torch.full((8,), -np.log(8), dtype=torch.float64)
    assert (
        solvers._balanced_newton(
            log_kernel, log_uniform, log_uniform, torch.zeros(8, dtype=torch.float64), 0.0
        )
        is None
    )


def test_balanced_warns_when_not_converged(caplog):
    cost = retrieval_cost(32)
    with caplog.at_level("WARNING"):
        sinkhorn_log_plan(cost, 0.01, tol=1e-30, max_iter=3)
    assert "did not reach tol=1e-30 within max_iter=3" in caplog.text
