"""The objective's logs in the trainer's logs: summed on the device at every step, read once per logging step.

An objective returns its terms (``logs``: floats or 0-dim tensors) with its loss. :class:`ObjectiveLogSums` adds
them on the device, so that a step reads nothing back, and :meth:`ObjectiveLogSums.averages` reads every term's sum
and the step count in one transfer at a logging step, as ``<objective>/<term>`` averaged over the steps since the
last one. With ``skip_non_finite`` a skipped step adds nothing and is not counted
(:mod:`~hf_atr.training.non_finite`).
"""

from __future__ import annotations

from typing import Any

import torch


class ObjectiveLogSums:
    """The sums of an objective's logs since the last logging step, on the device.

    Args:
        skip_non_finite: leave out the steps that are not finite (:meth:`add`'s ``finite``).
    """

    def __init__(self, skip_non_finite: bool) -> None:
        self.skip_non_finite = skip_non_finite
        self.sums: dict[str, torch.Tensor] = {}
        self.count: torch.Tensor | int = 0

    def add(self, logs: dict[str, Any], finite: torch.Tensor, like: torch.Tensor) -> None:
        """Add a step's ``logs`` (floats made 0-dim float64 tensors on ``like``'s device); with
        ``skip_non_finite``, a step whose ``finite`` (0-dim bool) is false adds nothing and is not counted."""
        for key, value in logs.items():
            if not isinstance(value, torch.Tensor):
                value = torch.full((), float(value), dtype=torch.float64, device=like.device)
            value = value.detach()
            if self.skip_non_finite:
                value = torch.where(finite, value, torch.zeros((), dtype=value.dtype, device=value.device))
            total = self.sums.get(key)
            self.sums[key] = value if total is None else total + value
        self.count = self.count + (finite.long() if self.skip_non_finite else 1)

    def averages(self, objective_name: str) -> dict[str, float]:
        """``{"<objective_name>/<term>": average}`` over the steps added since the last call (one read for all
        terms; empty when no step was counted), and start the next period."""
        if not self.sums:
            return {}
        names = list(self.sums)
        totals = torch.stack([self.sums[name].to(torch.float64) for name in names])
        count = torch.as_tensor(self.count, dtype=torch.float64, device=totals.device)
        *totals_read, count_read = torch.cat([totals, count.reshape(1)]).tolist()
        self.sums.clear()
        self.count = 0
        if count_read <= 0:
            return {}
        return {
            f"{objective_name}/{name}": round(total / count_read, 6)
            for name, total in zip(names, totals_read)
        }


__all__ = ["ObjectiveLogSums"]
