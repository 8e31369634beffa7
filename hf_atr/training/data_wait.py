"""How long each training step waited for its batch, logged as ``data_wait``, with a warning when the wait lasts.

:class:`~hf_atr.AtrTrainer` times the Trainer's ``get_batch_samples`` (the ``next()`` on the train dataloader's
iterator for every micro-batch of an optimizer step: the wait for the workers' batches, or the collation itself
with ``dataloader_num_workers=0``) with :meth:`DataWaitMeter.waiting`; :class:`DataWaitCallback` ends the step at
``on_step_end`` (after the optimizer step, before logging, evaluation and checkpoints, which are not the data's
doing). A step lasts from the start of its wait to its end, so

    data_wait = (time waited for the batches) / (time of the steps)

over the steps since the last log, a fraction in ``[0, 1]``: 0 when the workers always have a batch ready, near 1
when the accelerator mostly waits. When more than :data:`DATA_WAIT_THRESHOLD` of each of
:data:`DATA_WAIT_PATIENCE` consecutive steps was spent waiting, the callback warns once, naming the flag to raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from transformers import TrainerCallback, TrainingArguments

from ..lazy import get_logger

logger = get_logger(__name__)

DATA_WAIT_LOG_KEY = "data_wait"
"""Key of the logged share of the step time spent waiting for batches."""
DATA_WAIT_THRESHOLD = 0.2
"""A step that waited more than this share of its time for its batch counts towards the warning."""
DATA_WAIT_PATIENCE = 5
"""Consecutive such steps before the warning: the first step of an epoch also waits for the workers to start."""


class DataWaitMeter:
    """Wait and step times of the training steps, read with an injectable clock.

    Args:
        clock: seconds as a float, monotonic (default ``time.perf_counter``; tests pass a clock of their own).
        threshold: see :data:`DATA_WAIT_THRESHOLD`.
        patience: see :data:`DATA_WAIT_PATIENCE`.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        threshold: float = DATA_WAIT_THRESHOLD,
        patience: int = DATA_WAIT_PATIENCE,
    ) -> None:
        if not 0 < threshold < 1 or patience < 1:
            raise ValueError(
                f"threshold must lie in (0, 1) and patience be >= 1, got {threshold} and {patience}."
            )
        self.clock = clock
        self.threshold = threshold
        self.patience = patience
        self.reset()

    def reset(self) -> None:
        """Forget every step (a new ``train()``)."""
        self._step_start: float | None = None
        self._step_wait = 0.0
        self._waited = 0.0
        self._stepped = 0.0
        self.consecutive_waiting_steps = 0
        self.last_share: float | None = None

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time a wait for batches; the first wait of a step starts it."""
        start = self.clock()
        if self._step_start is None:
            self._step_start = start
        try:
            yield
        finally:
            self._step_wait += self.clock() - start

    def step_ended(self) -> float | None:
        """End the current step; returns the share of it spent waiting (``None`` when no wait started it)."""
        if self._step_start is None:
            return None
        duration = self.clock() - self._step_start
        share = self._step_wait / duration if duration > 0 else 0.0
        self._waited += self._step_wait
        self._stepped += duration
        self._step_start, self._step_wait = None, 0.0
        self.consecutive_waiting_steps = self.consecutive_waiting_steps + 1 if share > self.threshold else 0
        self.last_share = share
        return share

    @property
    def sustained(self) -> bool:
        """Whether the last :attr:`patience` steps each waited more than :attr:`threshold` of their time."""
        return self.consecutive_waiting_steps >= self.patience

    def pop_share(self) -> float | None:
        """The share of the time of the steps ended since the last call spent waiting; ``None`` without steps."""
        if self._stepped <= 0:
            return None
        share = self._waited / self._stepped
        self._waited = self._stepped = 0.0
        return share


class DataWaitCallback(TrainerCallback):
    """Ends each step of a :class:`DataWaitMeter` and warns once when the steps keep waiting for their batches."""

    def __init__(self, meter: DataWaitMeter) -> None:
        self.meter = meter
        self.warned = False

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.meter.reset()

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.meter.step_ended()
        if self.meter.sustained and not self.warned:
            logger.warning(data_wait_warning(self.meter, args.dataloader_num_workers))
            self.warned = True


def data_wait_warning(meter: DataWaitMeter, workers: int) -> str:
    """The warning's text: how long the steps waited, and the flag to raise."""
    where = (
        "the batches are collated in the training process itself (0 workers)"
        if workers == 0
        else f"{workers} DataLoader worker{'s' if workers > 1 else ''} prepare the batches"
    )
    return (
        f"The last {meter.consecutive_waiting_steps} training steps each spent more than {meter.threshold:.0%} of "
        f"their time waiting for their batch ({meter.last_share:.0%} in the last one): {where}, and the model waits "
        f"for them. Raise --dataloader_num_workers (TrainingArguments.dataloader_num_workers) if cores are free "
        f"(docs/training-throughput.md). The share is logged as '{DATA_WAIT_LOG_KEY}'. Logged once."
    )


__all__ = [
    "DATA_WAIT_LOG_KEY",
    "DATA_WAIT_PATIENCE",
    "DATA_WAIT_THRESHOLD",
    "DataWaitCallback",
    "DataWaitMeter",
    "data_wait_warning",
]
