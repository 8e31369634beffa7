"""The callbacks :class:`~hf_atr.AtrTrainer` adds itself: parameter projection after each optimizer step, the
training set's epoch at each epoch's start, and the first compiled step's time."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from transformers import TrainerCallback, TrainingArguments
from transformers.utils import logging

logger = logging.get_logger(__name__)


class CompileTimeCallback(TrainerCallback):
    """Logs, once, how long the first training step took under ``torch.compile`` (compilation included)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.reported = False

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any):
        if not self.reported and self.started is None:
            self.started = time.perf_counter()

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any):
        if self.reported or self.started is None:
            return
        if args.device.type == "cuda":
            torch.cuda.synchronize(args.device)  # once: the step's kernels, not only their launch
        logger.warning(
            f"torch.compile ({args.torch_compile_backend}): the first training step took "
            f"{time.perf_counter() - self.started:.1f} s, compilation included; the next steps reuse the compiled "
            "graphs (a new caption-length bucket or batch shape compiles once more)."
        )
        self.reported = True


class ParameterProjectionCallback(TrainerCallback):
    """Calls ``model.project_parameters_()`` after every optimizer step, whatever the objective.

    The model owns its constraints (the Mahalanobis matrix stays PSD, m-LTM §3.2); the trainer only says when.
    """

    def on_optimizer_step(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ):
        model.project_parameters_()


class DatasetEpochCallback(TrainerCallback):
    """Calls the training set's ``set_epoch(epoch)`` at the start of every epoch, before its iterator is created.

    The per-epoch draws of a map-style training set (random crops, caption languages) live in ``set_epoch``.
    accelerate's ``DataLoaderShard.set_epoch`` does not reach it in every release hf-atr supports: 1.3 gives the
    epoch to the sampler only, when the sampler takes one (the Trainer's seeded sampler does), and never to the
    dataset. Streaming corpora carry their epoch in each item and are left to the DataLoader.
    """

    def on_epoch_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any):
        dataset = getattr(kwargs.get("train_dataloader"), "dataset", None)
        if hasattr(dataset, "set_epoch") and not isinstance(dataset, torch.utils.data.IterableDataset):
            # state.epoch is the progress so far: the epoch that begins (a resumed run may be inside it).
            dataset.set_epoch(math.floor(state.epoch + 1e-6))


__all__ = ["CompileTimeCallback", "DatasetEpochCallback", "ParameterProjectionCallback"]
