"""The non-finite policy of training: what a NaN/inf embedding or loss does to a step.

Each step's check runs on the device (:func:`finite_or_zero`, a small code per step) and nobody reads it then: the
codes are read together at the next logging step, before a checkpoint is written, before the final model is saved,
or after :data:`UNCHECKED_STEPS_LIMIT` steps, whichever comes first, so that no checkpoint holds the weights of a
non-finite step. A non-finite step raises :class:`NonFiniteLossError` naming the step and the tensor, or, with
``skip_non_finite``, is skipped: its loss is zeroed and its gradients set to zero on the device
(:func:`zero_gradients_unless`), and it is counted and named in a warning when the codes are read.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

UNCHECKED_STEPS_LIMIT = 256
"""Training steps whose non-finite codes may wait for a logging step or checkpoint; past this many (long runs that
rarely log), they are read at once: one read per this many steps, and a bounded list of small device tensors."""
NON_FINITE_TENSORS = ("audio_embeds", "text_embeds", "loss")
"""What a step's non-finite code names: code ``i + 1`` for ``NON_FINITE_TENSORS[i]``, 0 for a finite step."""


class NonFiniteLossError(FloatingPointError):
    """Raised when an embedding or the objective's loss holds NaN or infinity."""


def finite_or_zero(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tensor with its NaN/inf entries replaced by 0, 0-dim bool: whether all entries were finite)``, on the
    tensor's device, read by nobody: the step goes on and the host learns of the problem later.

    Finite tensors pass through unchanged (values and gradient), so a finite step computes what it did before;
    for a non-finite one, the objective sees finite embeddings, so that an OT solver (whose host-side checks
    raise on a non-finite cost) never sees NaN.
    """
    finite = torch.isfinite(tensor.detach())
    return torch.where(
        finite, tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device)
    ), finite.all()


def zero_gradients_unless(model: Any, finite: torch.Tensor) -> None:
    """Set every gradient of ``model`` to zero unless ``finite`` (a 0-dim bool on the device): a skipped step,
    decided without reading the flag back (the gradients of a non-finite step may hold NaN, which a product with 0
    would keep)."""
    keep = finite.logical_not()
    for parameter in model.parameters():
        if parameter.grad is not None:
            parameter.grad.masked_fill_(keep, 0.0)


class NonFiniteSteps:
    """The codes of the steps not read yet, and what a non-finite one does (module docstring).

    Args:
        skip: skip non-finite steps (``AtrTrainer(skip_non_finite=True)``) instead of raising.
    """

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self.skipped = 0
        """Steps skipped so far (read when the codes are read)."""
        self.unchecked: list[tuple[int, torch.Tensor, dict[str, Any]]] = []
        self.step_finite: torch.Tensor | None = None
        """With ``skip``: whether every micro-batch of the current optimizer step was finite (0-dim bool)."""

    def record(
        self,
        step: int,
        audio_finite: torch.Tensor,
        text_finite: torch.Tensor,
        loss: torch.Tensor,
        logs: dict[str, Any],
        objective_name: str,
    ) -> torch.Tensor:
        """Keep step ``step``'s code (from the 0-dim bools of its embeddings and its loss) with the objective's
        ``logs``; returns whether the step is finite (0-dim bool on the device)."""
        loss_finite = torch.isfinite(loss.detach())
        code = torch.where(~audio_finite, 1, torch.where(~text_finite, 2, torch.where(~loss_finite, 3, 0)))
        self.unchecked.append((step, code, logs))
        if len(self.unchecked) >= UNCHECKED_STEPS_LIMIT:
            self.check(objective_name, step)
        return code == 0

    def guard(self, loss: torch.Tensor, finite: torch.Tensor) -> torch.Tensor:
        """The loss to back-propagate: as it is, or with ``skip`` zero for a non-finite step (whose gradients
        :meth:`after_backward` then zeroes)."""
        if not self.skip:
            return loss
        self.step_finite = finite if self.step_finite is None else self.step_finite & finite
        return torch.where(finite, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))

    def after_backward(self, model: Any) -> None:
        """With ``skip``, zero the gradients of ``model`` unless every micro-batch since the last call was finite."""
        if self.step_finite is not None:
            zero_gradients_unless(model, self.step_finite)
            self.step_finite = None

    def check(self, objective_name: str, global_step: int) -> None:
        """Read the codes of the steps since the last check (one read for all of them): raise
        :class:`NonFiniteLossError` for the first non-finite step, or with ``skip`` count the skipped steps and
        name them in a warning."""
        unchecked, self.unchecked = self.unchecked, []
        if not unchecked:
            return
        codes = torch.stack([code for _, code, _ in unchecked]).tolist()
        problems = [(step, code, logs) for (step, _, logs), code in zip(unchecked, codes) if code]
        if not problems:
            return
        step, code, logs = problems[0]
        problem = NON_FINITE_TENSORS[code - 1]
        terms = f"; its terms were {read_logs(logs)}" if problem == "loss" else ""
        message = f"Non-finite {problem} at step {step} (objective {objective_name!r}{terms})."
        if not self.skip:
            raise NonFiniteLossError(
                f"{message} Lower the learning rate, check this batch's inputs, raise the objective's entropic "
                "regularisation, or pass skip_non_finite=True to AtrTrainer to skip such steps. (The check is read "
                f"at logging steps and before checkpoints; read at step {global_step}, no checkpoint was "
                "written since.)"
            )
        self.skipped += len(problems)
        steps = sorted({step for step, _, _ in problems})
        logger.warning(
            f"{message} Skipped {len(problems)} step(s) since the last log, at step(s) {steps} "
            f"({self.skipped} so far)."
        )


def read_logs(logs: dict[str, Any]) -> dict[str, float]:
    """An objective's logs as floats (read from the device)."""
    return {key: float(value) for key, value in logs.items()}


__all__ = [
    "NON_FINITE_TENSORS",
    "UNCHECKED_STEPS_LIMIT",
    "NonFiniteLossError",
    "NonFiniteSteps",
    "finite_or_zero",
    "read_logs",
    "zero_gradients_unless",
]
