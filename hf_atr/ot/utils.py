"""What the solver families share: defaults, argument checks, and the stabilised kernel of the log domain.

Every check raises a :class:`ValueError` that starts with the name of the solver or objective it guards
(``owner``), so that an error deep in an objective still says who rejected which value. The objectives
that expose solver options (``iot``, ``iot_partial``, ``dart``) check them here too, with the same rules.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

DEFAULT_MAX_ITER = 1000
"""Default iteration cap of every solver (and of the objectives built on them)."""
DEFAULT_TOL = 1e-6
"""Default stopping tolerance of every solver (each family defines its own error, see its docstring)."""

ABSORB_LOG_SCALING = 10.0
"""Scalings are absorbed into the log potentials once |log scaling| exceeds this; together with the kernel
floor it keeps every product in the matrix-vector updates a normal float32 number."""
KERNEL_LOG_FLOOR = -75.0
"""Stabilised-kernel entries are floored at exp(-75): such entries weigh < 1e-30 of any row or column mass
(they never move a marginal), and with scalings >= exp(-10) no product falls below float32's smallest normal
number exp(-87.3) -- denormals are up to 100x slower on CPUs."""


def check_cost(owner: str, cost: torch.Tensor) -> None:
    """Raise unless ``cost`` is a non-empty, finite, floating-point ``(n, m)`` tensor."""
    if not isinstance(cost, torch.Tensor) or cost.dim() != 2 or not cost.is_floating_point():
        raise ValueError(
            f"{owner}: `cost` must be a 2-D floating-point tensor (n, m); got "
            f"{type(cost).__name__}{tuple(cost.shape) if isinstance(cost, torch.Tensor) else ''}"
            f"{' of dtype ' + str(cost.dtype) if isinstance(cost, torch.Tensor) else ''}."
        )
    if cost.shape[0] == 0 or cost.shape[1] == 0:
        raise ValueError(f"{owner}: `cost` must be non-empty; got shape {tuple(cost.shape)}.")
    if not bool(torch.isfinite(cost.detach()).all()):
        raise ValueError(
            f"{owner}: `cost` contains NaN or infinite entries; check the embeddings that produced it."
        )


def check_positive(owner: str, name: str, value: object) -> float:
    """``value`` as a float; raise unless it is a real number (not a bool), finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, Real) or not (0 < value < math.inf):
        raise ValueError(f"{owner}: `{name}` must be a finite number > 0; got {value!r}.")
    return float(value)


def check_solver_options(owner: str, max_iter: object, tol: object) -> None:
    """Raise unless ``max_iter`` is an integer >= 1 and ``tol`` a finite number >= 0 (0: run all iterations)."""
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"{owner}: `max_iter` must be an integer >= 1; got {max_iter!r}.")
    if isinstance(tol, bool) or not isinstance(tol, Real) or not (0 <= tol < math.inf):
        raise ValueError(f"{owner}: `tol` must be a finite number >= 0; got {tol!r}.")


def check_grad_mode(owner: str, grad_mode: str, allowed: tuple[str, ...]) -> None:
    """Raise unless ``grad_mode`` is one of ``allowed``."""
    if grad_mode not in allowed:
        raise ValueError(f"{owner}: unknown `grad_mode` {grad_mode!r}; choose one of {list(allowed)}.")


def marginal(
    owner: str, name: str, weights: torch.Tensor | None, size: int, cost: torch.Tensor
) -> torch.Tensor:
    """The marginal ``name`` as a ``(size,)`` tensor on cost's device and dtype (uniform ``1/size`` when None)."""
    if weights is None:
        return torch.full((size,), 1.0 / size, dtype=cost.dtype, device=cost.device)
    weights = torch.as_tensor(weights)
    if weights.shape != (size,):
        raise ValueError(
            f"{owner}: marginal `{name}` must have shape ({size},) to match `cost` of shape "
            f"{tuple(cost.shape)}; got {tuple(weights.shape)}."
        )
    weights = weights.to(dtype=cost.dtype, device=cost.device)
    if not bool((torch.isfinite(weights.detach()) & (weights.detach() > 0)).all()):
        raise ValueError(
            f"{owner}: marginal `{name}` must be finite and strictly positive; drop zero-mass points "
            "from the problem instead."
        )
    return weights


def checked_problem(
    owner: str,
    cost: torch.Tensor,
    reg: object,
    a: torch.Tensor | None,
    b: torch.Tensor | None,
    max_iter: object,
    tol: object,
    grad_mode: str,
    grad_modes: tuple[str, ...],
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Check the arguments every solver takes; return ``reg`` as a float and the marginals ``a`` ``(n,)``,
    ``b`` ``(m,)`` on cost's device and dtype (uniform when None)."""
    check_cost(owner, cost)
    reg = check_positive(owner, "reg", reg)
    check_solver_options(owner, max_iter, tol)
    check_grad_mode(owner, grad_mode, grad_modes)
    return reg, marginal(owner, "a", a, cost.shape[0], cost), marginal(owner, "b", b, cost.shape[1], cost)


def warn_not_converged(owner: str, max_iter: int, tol: float, error: float) -> None:
    """Log (once per message) that a solve stopped at ``max_iter`` with ``error`` above ``tol``."""
    logger.warning_once(
        f"{owner} did not reach tol={tol:g} within max_iter={max_iter} (error {error:.2e}); "
        "increase `max_iter` or `reg`."
    )


def stabilised_kernel(
    log_kernel: torch.Tensor, row_potential: torch.Tensor, col_potential: torch.Tensor
) -> torch.Tensor:
    """``exp(log_kernel + row_potential_i + col_potential_j)`` ``(n, m)``, floored at ``exp(KERNEL_LOG_FLOOR)``."""
    logits = log_kernel + row_potential[:, None] + col_potential[None, :]
    return logits.clamp_(min=KERNEL_LOG_FLOOR).exp_()


def scaling_spread(*scalings: torch.Tensor) -> torch.Tensor:
    """Largest |log scaling| over the given scaling vectors (NaN or inf when one is not finite)."""
    return torch.cat(scalings).log_().abs_().amax()
