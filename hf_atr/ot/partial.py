"""Entropic partial OT of a given total mass (m-LTM Eq. 12-13), by Bregman projections in the log domain.

:func:`partial_sinkhorn_log_plan` solves ``min_P <P, cost> + reg * sum P (log P - 1)`` subject to
``P 1 <= a``, ``P^T 1 <= b``, ``sum P = mass`` (Benamou et al. 2015) and returns ``log P``; POT's
``ot.partial.entropic_partial_wasserstein`` is the reference. Its default gradient is the exact implicit
gradient of the fixed point (adjoint system solved by BiCGStab).
"""

from __future__ import annotations

import math
from collections.abc import Callable

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

GRAD_MODES = ("one_step", "implicit", "autograd", "none")
"""Gradient modes of :func:`partial_sinkhorn_log_plan` (see :mod:`hf_atr.ot`)."""


def _partial_log_step(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    log_mass: torch.Tensor,
    beta: torch.Tensor,
    eta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round of the three KL (Bregman) projections of Benamou et al. (2015), in dual form.

    The plan is ``exp(log_kernel + alpha_i + beta_j + eta)``: projecting onto ``{P 1 <= a}`` clips the row
    potential at 0, onto ``{P^T 1 <= b}`` the column potential, and onto ``{sum P = mass}`` sets ``eta``.
    Exact coordinate ascent on the dual is Dykstra's algorithm that POT runs on the plan (same order).
    """
    alpha = (log_a - eta - torch.logsumexp(log_kernel + beta[None, :], dim=1)).clamp(max=0)
    column_lse = torch.logsumexp(log_kernel + alpha[:, None], dim=0)
    beta = (log_b - eta - column_lse).clamp(max=0)
    eta = log_mass - torch.logsumexp(beta + column_lse, dim=0)
    return alpha, beta, eta


def _partial_row_error(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    eta: torch.Tensor,
) -> torch.Tensor:
    """L2 norm of the change the row projection would make to the row sums (0 at the solution)."""
    row_lse = torch.logsumexp(log_kernel + beta[None, :], dim=1) + eta
    projected_alpha = (log_a - row_lse).clamp(max=0)
    return torch.linalg.vector_norm((row_lse + alpha).exp() - (row_lse + projected_alpha).exp())


@torch.no_grad()
def _partial_potentials(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    log_mass: torch.Tensor,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Converged potentials (alpha (n,), beta (m,), eta ()) of the partial problem, without autograd."""
    a, b, mass = log_a.exp(), log_b.exp(), log_mass.exp()
    # POT's initial plan: the Gibbs kernel scaled to total mass `mass`.
    eta = log_mass - torch.logsumexp(log_kernel.flatten(), dim=0)
    alpha, beta, eta = _partial_log_step(log_kernel, log_a, log_b, log_mass, torch.zeros_like(log_b), eta)
    # kernel = exp(log_kernel + alpha_i + beta_j + eta) is the current plan; scalings u, v, s multiply it.
    kernel = stabilised_kernel(log_kernel, alpha + eta, beta)
    row_cap, column_cap = (-alpha).exp(), (-beta).exp()  # keep alpha + log u <= 0, beta + log v <= 0
    u, v, s = torch.ones_like(a), torch.ones_like(b), torch.ones_like(mass)
    iterations = 1
    projected_u, error = _row_projection(kernel, a, u, v, s, row_cap)
    error = float(error)
    while True:
        if error < tol:
            break
        if iterations >= max_iter:
            warn_not_converged("partial_sinkhorn_log_plan", max_iter, tol, error)
            break
        previous = (u, v, s)
        u = projected_u
        kernel_t_u = kernel.T @ u
        v = torch.minimum(b / (s * kernel_t_u), column_cap)
        s = mass / (v @ kernel_t_u)
        iterations += 1
        # One read per iteration: the scalings' spread and the next error, computed as if they need no absorbing
        # (they seldom do); after an absorption the error is computed again.
        projected_u, error = _row_projection(kernel, a, u, v, s, row_cap)
        spread, error = torch.stack([scaling_spread(u, v, s.reshape(1)), error]).tolist()
        if not spread <= ABSORB_LOG_SCALING:
            if not math.isfinite(spread):
                u, v, s = previous
            alpha, beta, eta = _partial_log_step(
                log_kernel, log_a, log_b, log_mass, beta + v.log(), eta + s.log()
            )
            kernel = stabilised_kernel(log_kernel, alpha + eta, beta)
            row_cap, column_cap = (-alpha).exp(), (-beta).exp()
            u, v, s = torch.ones_like(a), torch.ones_like(b), torch.ones_like(mass)
            projected_u, error = _row_projection(kernel, a, u, v, s, row_cap)
            error = float(error)
    return alpha + u.log(), beta + v.log(), eta + s.log()


def _row_projection(
    kernel: torch.Tensor,
    a: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    s: torch.Tensor,
    row_cap: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The row scaling's next value ``(n,)`` (capped by ``row_cap``) and the stopping error, a 0-dim tensor: the
    L2 norm of the row-marginal change the projection makes (POT's criterion)."""
    kernel_v = kernel @ v
    projected_u = torch.minimum(a / (s * kernel_v), row_cap)
    return projected_u, torch.linalg.vector_norm(s * kernel_v * (u - projected_u))


def _solve_bicgstab(
    apply_system: Callable[[torch.Tensor], torch.Tensor],
    right_hand_side: torch.Tensor,
    max_iter: int,
    tol: float,
    solver: str,
) -> torch.Tensor:
    """Solve ``A x = right_hand_side`` for the non-symmetric operator ``apply_system`` by BiCGStab.

    Stops when ``||residual|| <= tol * ||right_hand_side||``. Far fewer operator applications than the
    fixed-point iteration ``x = b + (I - A) x``, which contracts as slowly as the Sinkhorn loop itself.
    """
    scale = float(torch.linalg.vector_norm(right_hand_side))
    if scale == 0.0:
        return right_hand_side
    threshold = max(tol, 1e-30) * scale
    solution = right_hand_side.clone()
    residual = right_hand_side - apply_system(solution)
    shadow = residual.clone()
    direction = torch.zeros_like(residual)
    image = torch.zeros_like(residual)
    rho = step = omega = 1.0
    # The residual's norm and its product with the shadow (the next rho) are read together, once per iteration.
    residual_norm, rho_next = torch.stack([torch.linalg.vector_norm(residual), shadow @ residual]).tolist()
    for _ in range(max_iter):
        if residual_norm <= threshold:
            return solution
        if rho_next == 0.0 or omega == 0.0:
            break
        direction = residual + (rho_next / rho) * (step / omega) * (direction - omega * image)
        image = apply_system(direction)
        step = rho_next / float(shadow @ image)
        solution = solution + step * direction
        half_residual = residual - step * image
        if float(torch.linalg.vector_norm(half_residual)) <= threshold:
            return solution
        half_image = apply_system(half_residual)
        image_residual, image_norm = torch.stack(
            [half_image @ half_residual, half_image @ half_image]
        ).tolist()
        omega = image_residual / max(image_norm, 1e-300)
        solution = solution + omega * half_residual
        residual = half_residual - omega * half_image
        rho = rho_next
        residual_norm, rho_next = torch.stack(
            [torch.linalg.vector_norm(residual), shadow @ residual]
        ).tolist()
        if not math.isfinite(residual_norm):
            break
    warn_not_converged(f"{solver} (implicit backward)", max_iter, tol, residual_norm / scale)
    return solution


def _implicit_partial_state(
    log_kernel: torch.Tensor,
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    log_mass: torch.Tensor,
    beta: torch.Tensor,
    eta: torch.Tensor,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The converged state (beta, eta) re-attached to the graph with its exact implicit gradient.

    The state is the fixed point ``z* = T(z*, cost)`` of one round of projections, so
    ``dz*/dcost = (I - dT/dz)^-1 dT/dcost`` (implicit function theorem). Autograd sees ``z = T(z*, cost)``;
    a hook replaces the gradient ``g`` arriving at ``z`` by ``w = g + (dT/dz)^T w``, solved by fixed-point
    iteration with vector-Jacobian products of one round (Bai et al. 2019's deep-equilibrium backward).
    Memory is that of one round, whatever the number of iterations.
    """
    m = beta.shape[0]

    def one_round(state: torch.Tensor, log_kernel: torch.Tensor) -> torch.Tensor:
        _, beta, eta = _partial_log_step(log_kernel, log_a, log_b, log_mass, state[:m], state[m])
        return torch.cat([beta, eta.reshape(1)])

    fixed_point = torch.cat([beta, eta.reshape(1)]).detach()
    state = one_round(fixed_point, log_kernel)
    if state.requires_grad:
        round_input = fixed_point.clone().requires_grad_()
        with torch.enable_grad():
            round_output = one_round(round_input, log_kernel.detach())

        def implicit_backward(gradient: torch.Tensor) -> torch.Tensor:
            def apply_system(vector: torch.Tensor) -> torch.Tensor:  # (I - dT/dz^T) vector
                (transported,) = torch.autograd.grad(round_output, round_input, vector, retain_graph=True)
                return vector - transported

            return _solve_bicgstab(apply_system, gradient, max_iter, tol, "partial_sinkhorn_log_plan")

        state.register_hook(implicit_backward)
    return state[:m], state[m]


def partial_sinkhorn_log_plan(
    cost: torch.Tensor,
    reg: float,
    mass: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    max_iter: int = DEFAULT_MAX_ITER,
    tol: float = DEFAULT_TOL,
    grad_mode: str = "implicit",
) -> torch.Tensor:
    """Log of the entropic partial OT plan of total mass ``mass`` (m-LTM Eq. 12-13).

    Solves ``min_P <P, cost> + reg * sum P (log P - 1)`` subject to ``P 1 <= a``, ``P^T 1 <= b``,
    ``sum P = mass`` by Bregman projections (Benamou et al. 2015) in the log domain -- the problem of POT's
    ``ot.partial.entropic_partial_wasserstein(a, b, cost, reg, m=mass)``, which returns ``exp`` of this
    function's output once both have converged (POT's default ``stopThr=1e-100`` runs all 1000 iterations).

    Args:
        cost: (n, m) ground cost, finite.
        reg: entropic regularisation ε > 0.
        mass: total transported mass s, in ``(0, min(sum a, sum b)]`` (m-LTM uses s = 0.95 for noisy pairs).
        a: (n,) positive source marginal (an upper bound on the row sums); uniform ``1/n`` when None.
        b: (m,) positive target marginal (an upper bound on the column sums); uniform ``1/m`` when None.
        max_iter: maximum number of rounds of the three projections.
        tol: stop when the row projection would change the row sums by less than ``tol`` (L2 norm).
        grad_mode: ``"implicit"`` (solve without autograd, exact implicit gradient; memory independent of
            the iteration count, backward stops at relative residual ``tol``), ``"one_step"`` (one
            differentiable round after a no-grad solve: cheap but inexact for partial OT),
            ``"autograd"`` (unrolled) or ``"none"`` (detached).

    Returns:
        (n, m) log plan ``log P``; finite wherever ``cost`` is.
    """
    solver = "partial_sinkhorn_log_plan"
    reg, a, b = checked_problem(solver, cost, reg, a, b, max_iter, tol, grad_mode, GRAD_MODES)
    mass = float(mass)
    largest_mass = min(torch.stack([a.detach().sum(), b.detach().sum()]).tolist())  # one read of the device
    if not (math.isfinite(mass) and 0 < mass <= largest_mass * (1 + 1e-5)):
        raise ValueError(
            f"{solver}: `mass` must lie in (0, min(sum(a), sum(b))] = (0, {largest_mass:.6g}]; got {mass}."
        )
    mass = min(mass, largest_mass)
    log_kernel = -cost / reg
    log_a, log_b = a.log(), b.log()
    log_mass = torch.tensor(math.log(mass), dtype=cost.dtype, device=cost.device)
    if grad_mode == "autograd":
        eta = log_mass - torch.logsumexp(log_kernel.flatten(), dim=0)
        alpha, beta, eta = _partial_log_step(log_kernel, log_a, log_b, log_mass, torch.zeros_like(log_b), eta)
        for iteration in range(2, max_iter + 1):
            with torch.no_grad():
                error = float(_partial_row_error(log_kernel, log_a, alpha, beta, eta))
            if error < tol:
                break
            alpha, beta, eta = _partial_log_step(log_kernel, log_a, log_b, log_mass, beta, eta)
            if iteration == max_iter:
                with torch.no_grad():
                    error = float(_partial_row_error(log_kernel, log_a, alpha, beta, eta))
                if error >= tol:
                    warn_not_converged(solver, max_iter, tol, error)
        return log_kernel + alpha[:, None] + beta[None, :] + eta
    alpha, beta, eta = _partial_potentials(
        log_kernel.detach(), log_a.detach(), log_b.detach(), log_mass, max_iter, tol
    )
    if grad_mode == "none":
        return (log_kernel.detach() + alpha[:, None] + beta[None, :] + eta).detach()
    if grad_mode == "implicit" and torch.is_grad_enabled():
        beta, eta = _implicit_partial_state(log_kernel, log_a, log_b, log_mass, beta, eta, max_iter, tol)
    # One differentiable round of projections from the converged column and mass potentials.
    alpha, beta, eta = _partial_log_step(log_kernel, log_a, log_b, log_mass, beta, eta)
    return log_kernel + alpha[:, None] + beta[None, :] + eta
