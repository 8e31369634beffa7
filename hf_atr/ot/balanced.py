"""Balanced entropic OT (m-LTM Eq. 6-7, DART Eq. 4): log-domain Sinkhorn finished by Newton's method.

:func:`sinkhorn_log_plan` solves ``min_P <P, cost> + reg * sum P (log P - 1)`` subject to ``P 1 = a``,
``P^T 1 = b`` and returns ``log P``; POT's ``ot.sinkhorn(..., method="sinkhorn_log")`` is the reference.
Sinkhorn converges linearly, and on near-diagonal retrieval costs slowly (thousands of iterations, in POT as
well); when the solve (``m <= 2048`` columns) has not reached ``tol`` after ``2 m`` iterations it is finished
by Newton's method on the semi-dual in float64 (3-5 steps of ``O(n m^2 + m^3)``; Sinkhorn resumes if Newton
stalls).
"""

from __future__ import annotations

import math

import torch

from .utils import (
    ABSORB_LOG_SCALING,
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    checked_problem,
    scaling_spread,
    stabilised_kernel,
    warn_not_converged,
)

# Balanced OT switches from Sinkhorn to Newton's method on the semi-dual after this many Sinkhorn
# iterations per column without reaching the tolerance. A Newton step costs O(n m^2 + m^3), about as
# much as m Sinkhorn iterations on a CPU; near-diagonal retrieval costs need thousands of Sinkhorn
# iterations (POT as well) but converge in 3-5 Newton steps.
_NEWTON_AFTER_ITERATIONS_PER_COLUMN = 2
# Beyond this many columns the (m, m) float64 Newton system (32 MiB at 2048) costs more than it saves.
_NEWTON_MAX_COLUMNS = 2048
_NEWTON_MAX_STEPS = 30
_NEWTON_ARMIJO = 1e-4
_NEWTON_PATIENCE = 3

GRAD_MODES = ("one_step", "autograd", "none")
"""Gradient modes of :func:`sinkhorn_log_plan` (see :mod:`hf_atr.ot`)."""


def _same_total(total_a: float, total_b: float) -> bool:
    return abs(total_a - total_b) <= 1e-4 * max(total_a, total_b)


def _balanced_log_step(
    log_kernel: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One log-domain Sinkhorn iteration (column then row projection, as POT's ``sinkhorn_log``)."""
    beta = log_b - torch.logsumexp(log_kernel + alpha[:, None], dim=0)
    alpha = log_a - torch.logsumexp(log_kernel + beta[None, :], dim=1)
    return alpha, beta


def _balanced_column_error(
    log_kernel: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    column_mass = torch.logsumexp(log_kernel + alpha[:, None], dim=0).add_(beta).exp_()
    return torch.linalg.vector_norm(column_mass - b)


def _semi_dual(
    log_kernel: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Semi-dual value ``Φ(β) = ⟨b, β⟩ + ⟨a, α(β)⟩`` and the row potential ``α(β)`` that makes rows exact."""
    alpha = log_a - torch.logsumexp(log_kernel + beta[None, :], dim=1)
    return log_b.exp() @ beta + log_a.exp() @ alpha, alpha


@torch.no_grad()
def _balanced_newton(
    log_kernel: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor, beta: torch.Tensor, tol: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Log potentials ``(alpha (n,), beta (m,))`` by Newton's method on the semi-dual, or None if it stalls.

    The balanced problem's dual, with the row potential eliminated (rows exact), is the concave
    ``Φ(β) = ⟨b, β⟩ + Σ_i a_i α_i(β)``, ``α_i(β) = log a_i − logsumexp_j(K_ij + β_j)`` (``K = −C/ε``); its
    gradient is ``b − Pᵀ1`` (the column-marginal error Sinkhorn stops on) and ``−∇²Φ = diag(Pᵀ1) − Pᵀ
    diag(1/a) P``, positive semi-definite with the constant vector as null space (the potentials' gauge),
    removed by adding ``mean(diag) 11ᵀ / m``. Steps are damped by Armijo backtracking on ``Φ``; everything
    runs in float64. Returns None when no step increases ``Φ`` (a numerically singular system) or the
    error has not improved for 3 steps while above ``tol``, so the caller falls back to Sinkhorn.
    """
    dtype = log_kernel.dtype
    log_kernel, log_a, log_b, beta = (tensor.double() for tensor in (log_kernel, log_a, log_b, beta))
    a, b = log_a.exp(), log_b.exp()
    value, alpha = _semi_dual(log_kernel, log_a, log_b, beta)
    best_error, steps_without_progress = math.inf, 0
    for _ in range(_NEWTON_MAX_STEPS):
        plan = (log_kernel + alpha[:, None] + beta[None, :]).exp()
        column_mass = plan.sum(0)
        gradient = b - column_mass
        error = float(torch.linalg.vector_norm(gradient))
        if error < tol:
            return alpha.to(dtype), beta.to(dtype)
        # Damped steps far from the optimum may not shrink the error; at round-off level nothing does.
        steps_without_progress = 0 if error < best_error else steps_without_progress + 1
        if steps_without_progress == _NEWTON_PATIENCE:
            return None
        best_error = min(best_error, error)
        system = torch.diag(column_mass) - plan.T @ (plan / a[:, None])
        system += system.diagonal().mean() / system.shape[0]
        direction, info = torch.linalg.solve_ex(system, gradient)
        if int(info) != 0 or not bool(torch.isfinite(direction).all()):
            return None
        slope, step = float(gradient @ direction), 1.0
        while step > 1e-10:
            candidate_value, candidate_alpha = _semi_dual(log_kernel, log_a, log_b, beta + step * direction)
            if float(candidate_value) >= float(value) + _NEWTON_ARMIJO * step * slope:
                break
            step *= 0.5
        else:
            return None
        beta, alpha, value = beta + step * direction, candidate_alpha, candidate_value
    return None


@torch.no_grad()
def _balanced_potentials(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Converged log potentials (alpha (n,), beta (m,)) of the balanced problem, without autograd.

    The stopping error is POT's: the L2 norm of the column-marginal violation after a row projection.
    Sinkhorn iterations first; if they have not reached ``tol`` after ``2 m`` iterations (and ``max_iter``
    allows more, and ``m <= 2048``), :func:`_balanced_newton` finishes the solve, and Sinkhorn resumes if
    Newton stalls.
    """
    a, b = log_a.exp(), log_b.exp()
    alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, torch.zeros_like(log_a))
    kernel = stabilised_kernel(log_kernel, alpha, beta)
    u, v = torch.ones_like(a), torch.ones_like(b)
    iterations = 1
    newton_after = (
        _NEWTON_AFTER_ITERATIONS_PER_COLUMN * b.shape[0] if b.shape[0] <= _NEWTON_MAX_COLUMNS else None
    )
    # The column marginal of the current plan comes for free from the next column update.
    kernel_t_u = kernel.T @ u
    error = float(torch.dist(v * kernel_t_u, b))
    while True:
        if error < tol:
            break
        if iterations >= max_iter:
            warn_not_converged("sinkhorn_log_plan", max_iter, tol, error)
            break
        if iterations == newton_after:
            solved = _balanced_newton(log_kernel, log_a, log_b, beta + v.log(), tol)
            if solved is not None:
                return solved
        u_previous, v_previous = u, v
        v = b / kernel_t_u
        u = a / (kernel @ v)
        iterations += 1
        # One read per iteration: the scalings' spread and the next error, computed as if they need no absorbing
        # (they seldom do); after an absorption the error is computed again.
        kernel_t_u = kernel.T @ u
        spread, error = torch.stack([scaling_spread(u, v), torch.dist(v * kernel_t_u, b)]).tolist()
        if not spread <= ABSORB_LOG_SCALING:
            if not math.isfinite(spread):
                u, v = u_previous, v_previous
            alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, alpha + u.log())
            kernel = stabilised_kernel(log_kernel, alpha, beta)
            u, v = torch.ones_like(a), torch.ones_like(b)
            kernel_t_u = kernel.T @ u
            error = float(torch.dist(v * kernel_t_u, b))
    return alpha + u.log(), beta + v.log()


def _balanced_log_iterations(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable log-domain Sinkhorn loop (the ``"autograd"`` mode)."""
    b = log_b.detach().exp()
    alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, torch.zeros_like(log_a))
    for _ in range(max_iter - 1):
        with torch.no_grad():
            error = float(_balanced_column_error(log_kernel, alpha, beta, b))
        if error < tol:
            break
        alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, alpha)
    else:
        with torch.no_grad():
            error = float(_balanced_column_error(log_kernel, alpha, beta, b))
        if error >= tol:
            warn_not_converged("sinkhorn_log_plan", max_iter, tol, error)
    return alpha, beta


def sinkhorn_log_plan(
    cost: torch.Tensor,
    reg: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    max_iter: int = DEFAULT_MAX_ITER,
    tol: float = DEFAULT_TOL,
    grad_mode: str = "one_step",
) -> torch.Tensor:
    """Log of the balanced entropic OT plan (m-LTM Eq. 6-7, DART Eq. 4), by log-domain Sinkhorn.

    Solves ``min_P <P, cost> + reg * sum P (log P - 1)`` subject to ``P 1 = a``, ``P^T 1 = b`` -- the
    problem of POT's ``ot.sinkhorn(a, b, cost, reg, method="sinkhorn_log")``, which returns ``exp`` of
    this function's output.

    Args:
        cost: (n, m) ground cost, finite.
        reg: entropic regularisation ε > 0.
        a: (n,) positive source marginal; uniform ``1/n`` when None.
        b: (m,) positive target marginal with the same total as ``a``; uniform ``1/m`` when None.
        max_iter: maximum number of Sinkhorn iterations (one row and one column projection each); the
            Newton finish (at most 30 steps, not in ``"autograd"`` mode) is not counted.
        tol: stop when the L2 norm of the column-marginal violation ``||P^T 1 - b||`` falls below it
            (rows are exact after each iteration), POT's criterion.
        grad_mode: ``"one_step"`` (solve without autograd, then one differentiable iteration: memory
            independent of the iteration count), ``"autograd"`` (unrolled) or ``"none"`` (detached).

    Returns:
        (n, m) log plan ``log P``; finite wherever ``cost`` is, even where ``P`` underflows.
    """
    solver = "sinkhorn_log_plan"
    uniform = a is None and b is None  # both of total mass 1: nothing to compare (and no read of the device)
    reg, a, b = checked_problem(solver, cost, reg, a, b, max_iter, tol, grad_mode, GRAD_MODES)
    if not uniform:
        total_a, total_b = torch.stack([a.detach().sum(), b.detach().sum()]).tolist()
        if not _same_total(total_a, total_b):
            raise ValueError(
                f"{solver}: marginals must have the same total mass for balanced OT; got sum(a)={total_a:.6g}, "
                f"sum(b)={total_b:.6g}. Use partial_sinkhorn_log_plan or unbalanced_sinkhorn_plan otherwise."
            )
    log_kernel = -cost / reg
    log_a, log_b = a.log(), b.log()
    if grad_mode == "autograd":
        alpha, beta = _balanced_log_iterations(log_kernel, log_a, log_b, max_iter, tol)
        return log_kernel + alpha[:, None] + beta[None, :]
    alpha, beta = _balanced_potentials(log_kernel.detach(), log_a.detach(), log_b.detach(), max_iter, tol)
    if grad_mode == "none":
        return (log_kernel.detach() + alpha[:, None] + beta[None, :]).detach()
    # One differentiable iteration from the converged row potential (rows exact, as POT's output).
    alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, alpha)
    return log_kernel + alpha[:, None] + beta[None, :]
