"""Entropic optimal-transport solvers for the OT objectives (m-LTM inverse OT, DART UWD).

Pure functions over torch tensors, device-agnostic (CPU or CUDA) and float32-safe:

- :func:`sinkhorn_log_plan`: balanced entropic OT (m-LTM Eq. 6-7, DART Eq. 4), returns the log plan.
- :func:`unbalanced_sinkhorn_plan`: entropic OT with KL-relaxed marginals (DART Eq. 8-9), returns the plan.
- :func:`partial_sinkhorn_log_plan`: entropic partial OT of total mass ``mass`` (m-LTM Eq. 12-13, Bregman
  projections of Benamou et al. 2015), returns the log plan.

POT is the reference implementation in the tests: ``ot.sinkhorn(..., method="sinkhorn_log")``,
``ot.unbalanced.sinkhorn_unbalanced(..., reg_type="kl")`` and ``ot.partial.entropic_partial_wasserstein``
solve the same problems and reach the same plans.

How the solvers work. A plan is ``exp(-cost / reg + alpha_i + beta_j (+ eta))`` for dual potentials kept in
the log domain, so the log plan is exact even where the plan itself underflows (at ``reg = 0.005`` the
diagonal of a retrieval plan is ``exp(-135)``, below float32's range). The iterations themselves run on a
*stabilised kernel* ``exp(log_kernel + alpha_i + beta_j)`` (Schmitzer 2019): the current plan, which carries
every row's and column's mass, multiplied by scaling vectors with matrix-vector products, ten times cheaper
than a log-sum-exp pass. Whenever a scaling drifts beyond ``exp(±_ABSORB_LOG_SCALING)`` it is absorbed
into the potentials, an exact log-domain iteration is taken and the kernel is rebuilt, so no scaling can
overflow and no row of the kernel is ever empty. Sinkhorn converges linearly, and on near-diagonal
retrieval costs slowly (thousands of iterations, in POT as well); when the balanced solve (``m <= 2048``
columns) has not reached ``tol`` after ``2 m`` iterations it is finished by Newton's method on the
semi-dual in float64 (3-5 steps of ``O(n m^2 + m^3)``; Sinkhorn resumes if Newton stalls).

Gradients (``grad_mode``):

- ``"one_step"`` (balanced default): solve without autograd, then take one differentiable log-domain
  iteration from the converged potentials. Memory does not grow with the iteration count. For the
  balanced IOT loss with uniform marginals it matches the exact implicit gradient closely (the loss is, up
  to the cost's diagonal, the dual objective, whose potential-derivative vanishes at the optimum); it is
  *not* accurate in general: for the partial IOT loss it is 50-70 % off.
- ``"implicit"`` (partial default): solve without autograd, then back-propagate the exact implicit
  gradient of the fixed point (adjoint linear system solved by BiCGStab with vector-Jacobian products of
  one round). Memory of one round.
- ``"envelope"`` (unbalanced default): the plan is returned detached; the gradient of ``<P, C>`` through
  ``C`` equals the gradient of the full unbalanced objective by the envelope theorem.
- ``"autograd"``: back-propagation through every log-domain iteration (memory grows with the iterations;
  the reference for the other modes).
- ``"none"``: detached output.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Scalings are absorbed into the log potentials once |log scaling| exceeds this; together with the
# kernel floor below it keeps every product in the matrix-vector updates a normal float32 number.
_ABSORB_LOG_SCALING = 10.0
# Stabilised-kernel entries are floored at exp(-75): such entries weigh < 1e-30 of any row or column
# mass (they never move a marginal), and with scalings >= exp(-10) no product falls below float32's
# smallest normal number exp(-87.3) -- denormals are up to 100x slower on CPUs.
_KERNEL_LOG_FLOOR = -75.0

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

_BALANCED_GRAD_MODES = ("one_step", "autograd", "none")
_UNBALANCED_GRAD_MODES = ("envelope", "autograd")
_PARTIAL_GRAD_MODES = ("one_step", "implicit", "autograd", "none")


# --------------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------------


def _check_cost(solver: str, cost: torch.Tensor) -> None:
    if not isinstance(cost, torch.Tensor) or cost.dim() != 2 or not cost.is_floating_point():
        raise ValueError(
            f"{solver}: `cost` must be a 2-D floating-point tensor (n, m); got "
            f"{type(cost).__name__}{tuple(cost.shape) if isinstance(cost, torch.Tensor) else ''}"
            f"{' of dtype ' + str(cost.dtype) if isinstance(cost, torch.Tensor) else ''}."
        )
    if cost.shape[0] == 0 or cost.shape[1] == 0:
        raise ValueError(f"{solver}: `cost` must be non-empty; got shape {tuple(cost.shape)}.")
    if not bool(torch.isfinite(cost.detach()).all()):
        raise ValueError(
            f"{solver}: `cost` contains NaN or infinite entries; check the embeddings that produced it."
        )


def _check_positive_float(solver: str, name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{solver}: `{name}` must be a finite number > 0; got {value}.")
    return value


def _check_iterations(solver: str, max_iter: int, tol: float) -> None:
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"{solver}: `max_iter` must be an integer >= 1; got {max_iter!r}.")
    if not (math.isfinite(float(tol)) and tol >= 0):
        raise ValueError(f"{solver}: `tol` must be a finite number >= 0; got {tol!r}.")


def _check_grad_mode(solver: str, grad_mode: str, allowed: tuple[str, ...]) -> None:
    if grad_mode not in allowed:
        raise ValueError(f"{solver}: unknown `grad_mode` {grad_mode!r}; choose one of {list(allowed)}.")


def _marginal(
    solver: str, name: str, weights: torch.Tensor | None, size: int, cost: torch.Tensor
) -> torch.Tensor:
    """Return the marginal ``name`` as a (size,) tensor on cost's device and dtype (uniform when None)."""
    if weights is None:
        return torch.full((size,), 1.0 / size, dtype=cost.dtype, device=cost.device)
    weights = torch.as_tensor(weights)
    if weights.shape != (size,):
        raise ValueError(
            f"{solver}: marginal `{name}` must have shape ({size},) to match `cost` of shape "
            f"{tuple(cost.shape)}; got {tuple(weights.shape)}."
        )
    weights = weights.to(dtype=cost.dtype, device=cost.device)
    if not bool((torch.isfinite(weights.detach()) & (weights.detach() > 0)).all()):
        raise ValueError(
            f"{solver}: marginal `{name}` must be finite and strictly positive; drop zero-mass points "
            "from the problem instead."
        )
    return weights


def _same_total(total_a: float, total_b: float) -> bool:
    return abs(total_a - total_b) <= 1e-4 * max(total_a, total_b)


def _warn_not_converged(solver: str, max_iter: int, tol: float, error: float) -> None:
    logger.warning_once(
        f"{solver} did not reach tol={tol:g} within max_iter={max_iter} (error {error:.2e}); "
        "increase `max_iter` or `reg`."
    )


def _stabilised_kernel(
    log_kernel: torch.Tensor, row_potential: torch.Tensor, col_potential: torch.Tensor
) -> torch.Tensor:
    """``exp(log_kernel + row_potential_i + col_potential_j)``, floored at ``exp(_KERNEL_LOG_FLOOR)``."""
    logits = log_kernel + row_potential[:, None] + col_potential[None, :]
    return logits.clamp_(min=_KERNEL_LOG_FLOOR).exp_()


def _scaling_spread(*scalings: torch.Tensor) -> torch.Tensor:
    """Largest |log scaling| over the given scaling vectors (NaN or inf when one is not finite)."""
    return torch.cat(scalings).log_().abs_().amax()


# --------------------------------------------------------------------------------------------------
# Balanced entropic OT
# --------------------------------------------------------------------------------------------------


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
    kernel = _stabilised_kernel(log_kernel, alpha, beta)
    u, v = torch.ones_like(a), torch.ones_like(b)
    iterations = 1
    newton_after = (
        _NEWTON_AFTER_ITERATIONS_PER_COLUMN * b.shape[0] if b.shape[0] <= _NEWTON_MAX_COLUMNS else None
    )
    while True:
        kernel_t_u = kernel.T @ u
        # The column marginal of the current plan comes for free from the next column update.
        error = float(torch.dist(v * kernel_t_u, b))
        if error < tol:
            break
        if iterations >= max_iter:
            _warn_not_converged("sinkhorn_log_plan", max_iter, tol, error)
            break
        if iterations == newton_after:
            solved = _balanced_newton(log_kernel, log_a, log_b, beta + v.log(), tol)
            if solved is not None:
                return solved
        u_previous, v_previous = u, v
        v = b / kernel_t_u
        u = a / (kernel @ v)
        iterations += 1
        spread = float(_scaling_spread(u, v))
        if not spread <= _ABSORB_LOG_SCALING:
            if not math.isfinite(spread):
                u, v = u_previous, v_previous
            alpha, beta = _balanced_log_step(log_kernel, log_a, log_b, alpha + u.log())
            kernel = _stabilised_kernel(log_kernel, alpha, beta)
            u, v = torch.ones_like(a), torch.ones_like(b)
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
            _warn_not_converged("sinkhorn_log_plan", max_iter, tol, error)
    return alpha, beta


def sinkhorn_log_plan(
    cost: torch.Tensor,
    reg: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    max_iter: int = 1000,
    tol: float = 1e-6,
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
    _check_cost(solver, cost)
    reg = _check_positive_float(solver, "reg", reg)
    _check_iterations(solver, max_iter, tol)
    _check_grad_mode(solver, grad_mode, _BALANCED_GRAD_MODES)
    a = _marginal(solver, "a", a, cost.shape[0], cost)
    b = _marginal(solver, "b", b, cost.shape[1], cost)
    total_a, total_b = float(a.detach().sum()), float(b.detach().sum())
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


# --------------------------------------------------------------------------------------------------
# Unbalanced entropic OT
# --------------------------------------------------------------------------------------------------


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
    kernel = _stabilised_kernel(log_kernel_ab, alpha, beta)
    log_u, log_v = torch.zeros_like(log_a), torch.zeros_like(log_b)
    iterations = 1
    while True:
        # With kernel = exp(log_kernel_ab + alpha_i + beta_j), the damped projection of the total row
        # potential alpha + log_u is exponent * (log a + alpha - log(kernel @ v)); same for columns.
        new_log_u = (log_a + alpha - (kernel @ log_v.exp()).log_()).mul_(exponent).sub_(alpha)
        new_log_v = (log_b + beta - (kernel.T @ new_log_u.exp()).log_()).mul_(exponent).sub_(beta)
        error = float(torch.maximum((new_log_u - log_u).abs().amax(), (new_log_v - log_v).abs().amax()))
        log_u, log_v = new_log_u, new_log_v
        iterations += 1
        if error < tol:
            break
        if iterations >= max_iter:
            _warn_not_converged("unbalanced_sinkhorn_plan", max_iter, tol, error)
            break
        spread = float(torch.cat([log_u, log_v]).abs_().amax())
        if not spread <= _ABSORB_LOG_SCALING:
            alpha, beta = _unbalanced_log_step(log_kernel_ab, log_a, log_b, exponent, beta + log_v)
            kernel = _stabilised_kernel(log_kernel_ab, alpha, beta)
            log_u, log_v = torch.zeros_like(log_u), torch.zeros_like(log_v)
    return alpha + log_u, beta + log_v


def unbalanced_sinkhorn_plan(
    cost: torch.Tensor,
    reg: float,
    reg_marginal: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    max_iter: int = 1000,
    tol: float = 1e-6,
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
    _check_cost(solver, cost)
    reg = _check_positive_float(solver, "reg", reg)
    reg_marginal = _check_positive_float(solver, "reg_marginal", reg_marginal)
    _check_iterations(solver, max_iter, tol)
    _check_grad_mode(solver, grad_mode, _UNBALANCED_GRAD_MODES)
    a = _marginal(solver, "a", a, cost.shape[0], cost)
    b = _marginal(solver, "b", b, cost.shape[1], cost)
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
            _warn_not_converged(solver, max_iter, tol, error)
    return (log_kernel_ab + alpha[:, None] + beta[None, :]).exp()


# --------------------------------------------------------------------------------------------------
# Partial entropic OT
# --------------------------------------------------------------------------------------------------


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
    kernel = _stabilised_kernel(log_kernel, alpha + eta, beta)
    row_cap, column_cap = (-alpha).exp(), (-beta).exp()  # keep alpha + log u <= 0, beta + log v <= 0
    u, v, s = torch.ones_like(a), torch.ones_like(b), torch.ones_like(mass)
    iterations = 1
    while True:
        kernel_v = kernel @ v
        projected_u = torch.minimum(a / (s * kernel_v), row_cap)
        error = float(torch.linalg.vector_norm(s * kernel_v * (u - projected_u)))
        if error < tol:
            break
        if iterations >= max_iter:
            _warn_not_converged("partial_sinkhorn_log_plan", max_iter, tol, error)
            break
        previous = (u, v, s)
        u = projected_u
        kernel_t_u = kernel.T @ u
        v = torch.minimum(b / (s * kernel_t_u), column_cap)
        s = mass / (v @ kernel_t_u)
        iterations += 1
        spread = float(_scaling_spread(u, v, s.reshape(1)))
        if not spread <= _ABSORB_LOG_SCALING:
            if not math.isfinite(spread):
                u, v, s = previous
            alpha, beta, eta = _partial_log_step(
                log_kernel, log_a, log_b, log_mass, beta + v.log(), eta + s.log()
            )
            kernel = _stabilised_kernel(log_kernel, alpha + eta, beta)
            row_cap, column_cap = (-alpha).exp(), (-beta).exp()
            u, v, s = torch.ones_like(a), torch.ones_like(b), torch.ones_like(mass)
    return alpha + u.log(), beta + v.log(), eta + s.log()


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
    residual_norm = float(torch.linalg.vector_norm(residual))
    for _ in range(max_iter):
        if residual_norm <= threshold:
            return solution
        rho_next = float(shadow @ residual)
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
        omega = float(half_image @ half_residual) / max(float(half_image @ half_image), 1e-300)
        solution = solution + omega * half_residual
        residual = half_residual - omega * half_image
        residual_norm = float(torch.linalg.vector_norm(residual))
        rho = rho_next
        if not math.isfinite(residual_norm):
            break
    _warn_not_converged(f"{solver} (implicit backward)", max_iter, tol, residual_norm / scale)
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
    max_iter: int = 1000,
    tol: float = 1e-6,
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
    _check_cost(solver, cost)
    reg = _check_positive_float(solver, "reg", reg)
    _check_iterations(solver, max_iter, tol)
    _check_grad_mode(solver, grad_mode, _PARTIAL_GRAD_MODES)
    a = _marginal(solver, "a", a, cost.shape[0], cost)
    b = _marginal(solver, "b", b, cost.shape[1], cost)
    mass = float(mass)
    largest_mass = min(float(a.detach().sum()), float(b.detach().sum()))
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
                    _warn_not_converged(solver, max_iter, tol, error)
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
