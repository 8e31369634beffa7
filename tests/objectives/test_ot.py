"""OT solvers against POT (the reference), closed forms, autograd and gradcheck."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ot
import pytest
import torch
from ot_problems import clustered_retrieval_cost

from hf_atr.objectives.ot import partial_sinkhorn_log_plan, sinkhorn_log_plan, unbalanced_sinkhorn_plan


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
    """-(1/k) sum_i log(k * plan_ii), DESIGN.md's IOT loss."""
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


# ------------------------------------------------------------------------------------------------
# Balanced
# ------------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize(("newton_steps", "tol"), [(30, 1e-9), (1, 1e-6)])
def test_newton_finish_matches_pot_and_falls_back_to_sinkhorn_when_it_stalls(
    monkeypatch, caplog, newton_steps, tol
):
    from hf_atr.objectives import ot as solvers

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

    from hf_atr.objectives import ot as solvers

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
    from hf_atr.objectives import ot as solvers

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
    from hf_atr.objectives import ot as solvers

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


# ------------------------------------------------------------------------------------------------
# Unbalanced
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# Partial
# ------------------------------------------------------------------------------------------------


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


def test_absorption_path_reaches_the_same_plans(monkeypatch):
    """Absorbing the scalings into the potentials (rare at the real threshold) changes no solution."""
    from hf_atr.objectives import ot as solvers

    cost, a, b = random_problem(seed=13)
    reference = {
        "balanced": sinkhorn_log_plan(cost, 0.02, a, b, tol=1e-11, max_iter=20000, grad_mode="none"),
        "partial": partial_sinkhorn_log_plan(
            cost, 0.05, 0.7, a, b, tol=1e-11, max_iter=20000, grad_mode="none"
        ),
        "unbalanced": unbalanced_sinkhorn_plan(cost, 0.02, 0.1, a, b, tol=1e-12, max_iter=20000).log(),
    }
    rebuilds = 0
    build_kernel = solvers._stabilised_kernel

    def counting_kernel(*args):
        nonlocal rebuilds
        rebuilds += 1
        return build_kernel(*args)

    monkeypatch.setattr(solvers, "_ABSORB_LOG_SCALING", 1e-3)
    monkeypatch.setattr(solvers, "_stabilised_kernel", counting_kernel)
    absorbed = {
        "balanced": sinkhorn_log_plan(cost, 0.02, a, b, tol=1e-11, max_iter=20000, grad_mode="none"),
        "partial": partial_sinkhorn_log_plan(
            cost, 0.05, 0.7, a, b, tol=1e-11, max_iter=20000, grad_mode="none"
        ),
        "unbalanced": unbalanced_sinkhorn_plan(cost, 0.02, 0.1, a, b, tol=1e-12, max_iter=20000).log(),
    }
    assert rebuilds > 6
    for name, log_plan in absorbed.items():
        torch.testing.assert_close(log_plan.exp(), reference[name].exp(), rtol=0, atol=1e-9, msg=name)
