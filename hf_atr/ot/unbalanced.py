"""Unbalanced entropic OT with KL-relaxed marginals (DART Eq. 8-9), by log-domain unbalanced Sinkhorn.

:func:`unbalanced_sinkhorn_plan` solves ``min_P <P, cost> + reg * KL(P | a b^T) + reg_marginal * (KL(P 1 | a)
+ KL(P^T 1 | b))`` and returns ``P``; POT's ``ot.unbalanced.sinkhorn_unbalanced(..., reg_type="kl")`` is the
reference.
"""

from __future__ import annotations

import math

import torch

from .utils import (
    ABSORB_LOG_SCALING,
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    check_positive,
    checked_problem,
    stabilised_kernel,
    warn_not_converged,
)

GRAD_MODES = ("envelope", "autograd")
"""Gradient modes of :func:`unbalanced_sinkhorn_plan` (see :mod:`hf_atr.ot`)."""


def _unbalanced_log_step(
    log_kernel_ab: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    exponent: float,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One log-domain iteration of unbalanced Sinkhorn (Chizat et al. 2018; POT's row-then-column order).

    ``log_kernel_ab = -cost / reg + log a_i + log b_j``; the plan is ``exp(log_kernel_ab + alpha_i + beta_j)``
    and each KL-relaxed projection is the balanced one damped by ``exponent = tau / (tau + reg)``.
    """
    alpha = exponent * (log_a - torch.logsumexp(log_kernel_ab + beta[None, :], dim=1))
    beta = exponent * (log_b - torch.logsumexp(log_kernel_ab + alpha[:, None], dim=0))
    return alpha, beta


@torch.no_grad()
def _unbalanced_potentials(
    log_kernel_ab: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    exponent: float,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Converged log potentials of the unbalanced problem, without autograd.

    The stopping error is the largest change of a log potential over one iteration (the log of POT's
    relative scaling change).
    """
    alpha, beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, torch.zeros_like(log_b))
    kernel = stabilised_kernel(log_kernel_ab, alpha, beta)
    log_u, log_v = torch.zeros_like(log_a), torch.zeros_like(log_b)
    iterations, absorbed = 1, True
    new_log_u, new_log_v, error = _scaling_step(kernel, log_a, log_b, alpha, beta, exponent, log_u, log_v)
    error = float(error)
    while True:
        if not math.isfinite(error) or (absorbed and error > ABSORB_LOG_SCALING):
            # A plan whose mass is far below 1 (costs many times reg: the relaxed marginals let it destroy mass)
            # keeps the stabilised kernel far below 1 even right after absorbing, so the scalings leave float
            # range (float32) or jump past the absorption threshold at every iteration and never settle
            # (float64). The log domain has neither problem: finish there from the last finite potentials.
            return _unbalanced_log_potentials(
                log_kernel_ab, log_a, log_b, exponent, beta + log_v, iterations, max_iter, tol
            )
        absorbed = False
        log_u, log_v = new_log_u, new_log_v
        iterations += 1
        if error < tol:
            break
        if iterations >= max_iter:
            warn_not_converged("unbalanced_sinkhorn_plan", max_iter, tol, error)
            break
        # One read per iteration: the scalings' spread and the next step's error, computed as if they need no
        # absorbing (they seldom do); after an absorption the step is computed again.
        new_log_u, new_log_v, error = _scaling_step(kernel, log_a, log_b, alpha, beta, exponent, log_u, log_v)
        spread, error = torch.stack([torch.cat([log_u, log_v]).abs_().amax(), error]).tolist()
        if not spread <= ABSORB_LOG_SCALING:
            alpha, beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, beta + log_v)
            kernel = stabilised_kernel(log_kernel_ab, alpha, beta)
            log_u, log_v = torch.zeros_like(log_u), torch.zeros_like(log_v)
            absorbed = True
            new_log_u, new_log_v, error = _scaling_step(
                kernel, log_a, log_b, alpha, beta, exponent, log_u, log_v
            )
            error = float(error)
    return alpha + log_u, beta + log_v


def _scaling_step(
    kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    exponent: float,
    log_u: torch.Tensor,
    log_v: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One damped scaling iteration in the stabilised kernel: the new log scalings ``(n,)``, ``(m,)`` and the
    stopping error, a 0-dim tensor (the largest change of a log scaling)."""
    # With kernel = exp(log_kernel_ab + alpha_i + beta_j), the damped projection of the total row
    # potential alpha + log_u is exponent * (log a + alpha - log(kernel @ v)); same for columns.
    new_log_u = (log_a + alpha - (kernel @ log_v.exp()).log_()).mul_(exponent).sub_(alpha)
    new_log_v = (log_b + beta - (kernel.T @ new_log_u.exp()).log_()).mul_(exponent).sub_(beta)
    return (
        new_log_u,
        new_log_v,
        torch.maximum((new_log_u - log_u).abs().amax(), (new_log_v - log_v).abs().amax()),
    )


@torch.no_grad()
def _unbalanced_log_potentials(
    log_kernel_ab: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    exponent: float,
    beta: torch.Tensor,
    iterations: int,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log potentials by log-domain iterations from column potential ``beta``, ``iterations`` already spent."""
    alpha, beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, beta)
    while True:
        new_alpha, new_beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, beta)
        error = float(torch.maximum((new_alpha - alpha).abs().amax(), (new_beta - beta).abs().amax()))
        alpha, beta = new_alpha, new_beta
        iterations += 1
        if error < tol:
            return alpha, beta
        if iterations >= max_iter:
            warn_not_converged("unbalanced_sinkhorn_plan", max_iter, tol, error)
            return alpha, beta


def unbalanced_sinkhorn_plan(
    cost: torch.Tensor,
    reg: float,
    reg_marginal: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    max_iter: int = DEFAULT_MAX_ITER,
    tol: float = DEFAULT_TOL,
    grad_mode: str = "envelope",
) -> torch.Tensor:
    """Plan of entropic OT with KL-relaxed marginals (DART Eq. 8-9), by log-domain unbalanced Sinkhorn.

    Solves ``min_P <P, cost> + reg * KL(P | a b^T) + reg_marginal * (KL(P 1 | a) + KL(P^T 1 | b))`` with
    the generalised KL ``KL(x | y) = sum x log(x / y) - x + y`` -- POT's
    ``ot.unbalanced.sinkhorn_unbalanced(a, b, cost, reg, reg_marginal, reg_type="kl")`` (its default since
    POT 0.9.5), whatever its ``method``: "sinkhorn" and "sinkhorn_translation_invariant" reach the same plan.

    Args:
        cost: (n, m) ground cost, finite.
        reg: entropic regularisation ε > 0.
        reg_marginal: marginal relaxation τ > 0 (τ → ∞ recovers balanced OT).
        a: (n,) positive source measure (any total); uniform ``1/n`` when None.
        b: (m,) positive target measure (any total); uniform ``1/m`` when None.
        max_iter: maximum number of iterations.
        tol: stop when no log potential changes by more than ``tol`` over one iteration.
        grad_mode: ``"envelope"`` (plan detached: back-propagate ``<plan, cost>`` through ``cost`` only, which
            equals the gradient of the full objective above; memory independent of the iterations) or
            ``"autograd"`` (unrolled log-domain iterations). ``a`` and ``b`` receive gradients only in
            ``"autograd"`` mode.

    Returns:
        (n, m) transport plan ``P`` (entries below float range underflow to 0).
    """
    solver = "unbalanced_sinkhorn_plan"
    reg, a, b = checked_problem(solver, cost, reg, a, b, max_iter, tol, grad_mode, GRAD_MODES)
    reg_marginal = check_positive(solver, "reg_marginal", reg_marginal)
    exponent = reg_marginal / (reg_marginal + reg)
    if grad_mode == "envelope":
        with torch.no_grad():
            log_a, log_b = a.log(), b.log()
            log_kernel_ab = -cost / reg + log_a[:, None] + log_b[None, :]
            alpha, beta = _unbalanced_potentials(log_kernel_ab, log_a, log_b, exponent, max_iter, tol)
            return (log_kernel_ab + alpha[:, None] + beta[None, :]).exp_()
    log_a, log_b = a.log(), b.log()
    log_kernel_ab = -cost / reg + log_a[:, None] + log_b[None, :]
    alpha, beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, torch.zeros_like(log_b))
    for iteration in range(2, max_iter + 1):
        new_alpha, new_beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, beta)
        with torch.no_grad():
            error = float(torch.maximum((new_alpha - alpha).abs().amax(), (new_beta - beta).abs().amax()))
        alpha, beta = new_alpha, new_beta
        if error < tol:
            break
        if iteration == max_iter:
            warn_not_converged(solver, max_iter, tol, error)
    return (log_kernel_ab + alpha[:, None] + beta[None, :]).exp()
