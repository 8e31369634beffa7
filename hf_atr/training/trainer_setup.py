"""What :class:`~hf_atr.AtrTrainer` decides once, before training: the objective parameters and DataLoader options
it checks or sets, the padding of captions under ``torch.compile``, the logit scales it freezes, whether DDP looks
for unused parameters, and the training data's provenance for the card."""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..data.schema import corpus_provenance
from ..objectives.registry import LOGIT_BIAS_NAME, LOGIT_SCALE_NAMES
from .callbacks import ModelCardCallback
from .collator import CaptionPairDataset, text_length_buckets
from .moment_crops import MomentCropDataset
from .multilingual import RandomLanguageDataset

logger = logging.get_logger(__name__)


def check_objective_parameters(objective: Any, *, optimizers_given: bool) -> None:
    """Refuse an objective with trainable parameters unless the optimizer is given (``optimizers=``): the
    Trainer's optimizer is built from the model's parameters and would never update the objective's.

    Raises:
        ValueError: trainable objective parameters without ``optimizers_given``.
    """
    trainable = [name for name, parameter in objective.named_parameters() if parameter.requires_grad]
    if trainable and not optimizers_given:
        raise ValueError(
            f"Objective {objective.name!r} has trainable parameters {trainable}, which the Trainer's "
            "optimizer (built from the model) would never update. Keep learnable quantities in the model "
            "(as the temperature lives in its scoring head), or pass `optimizers=(optimizer, scheduler)` "
            "covering them."
        )


def has_input_dependent_branches(model: Any) -> bool:
    """Whether some parameters are used only for some inputs, so DDP must look for unused ones every step.

    CLAP's fused audio tower runs its fusion layers only on batches that hold a clip longer than the window.
    """
    config = getattr(model, "config", None)
    return bool(getattr(getattr(config, "audio_config", None), "enable_fusion", False))


def check_dataloader_options(args: TrainingArguments, train_dataset: Any, device_features: bool) -> None:
    """Persistent workers keep their first copy of a map-style dataset, so per-epoch draws must not live there.

    Raises:
        ValueError: ``dataloader_persistent_workers`` with workers, for a training set that draws per epoch.
    """
    if not (args.dataloader_persistent_workers and args.dataloader_num_workers > 0):
        return
    if isinstance(train_dataset, (RandomLanguageDataset, MomentCropDataset)) or (
        device_features and isinstance(train_dataset, CaptionPairDataset)
    ):
        raise ValueError(
            "dataloader_persistent_workers=True keeps each worker's first copy of the training set, so the "
            f"epoch that {type(train_dataset).__name__}.set_epoch sets (per-epoch languages, random crops) would "
            "never reach the workers. Set dataloader_persistent_workers=False (the default), or stream the corpus "
            "(StreamingPairs items carry their epoch)."
        )


def pins_memory(args: TrainingArguments) -> bool:
    """Whether the DataLoaders pin memory: as ``args`` says when training on an accelerator, never on the CPU,
    where pinned (page-locked) memory speeds up no copy and torch's DataLoader warns about it at every epoch."""
    return args.dataloader_pin_memory and args.device.type != "cpu"


def pad_captions_to_buckets(data_collator: Any, tokenizer: Any) -> tuple[int, ...] | None:
    """Make the collator (or the clip collator inside it) pad captions to :func:`text_length_buckets` of its token
    limit, unless it already has buckets; returns the buckets set, or None when there was nothing to set."""
    for collator in (data_collator, getattr(data_collator, "clips", None)):
        if collator is not None and hasattr(collator, "text_length_buckets"):
            if collator.text_length_buckets is None:
                limit = getattr(collator, "max_length", None) or tokenizer.model_max_length
                collator.text_length_buckets = text_length_buckets(limit)
                return collator.text_length_buckets
            return None
    return None


def record_training_provenance(callbacks: list[TrainerCallback], train_dataset: Any) -> None:
    """Give the card callbacks that have none the provenance of the training clips (of a view's ``clips``)."""
    clips = getattr(train_dataset, "clips", train_dataset)
    provenance = corpus_provenance(clips) if hasattr(clips, "info") else None
    for callback in callbacks:
        if isinstance(callback, ModelCardCallback) and callback.training_provenance is None:
            callback.training_provenance = provenance


def freeze_unread_logit_scales(model: Any, objective: Any) -> list[str]:
    """``requires_grad=False`` on the scoring head's logit scales (and bias) ``objective``'s loss does not depend on,
    so that DDP without ``find_unused_parameters`` sees a gradient for every trainable parameter; returns their
    names."""
    head = getattr(model, "scoring_head", None)
    read = objective.logit_scales_read() | ({LOGIT_BIAS_NAME} if objective.logit_bias_read() else set())
    frozen = []
    for name in sorted((LOGIT_SCALE_NAMES | {LOGIT_BIAS_NAME}) - read):
        parameter = getattr(head, name, None)
        if isinstance(parameter, torch.nn.Parameter) and parameter.requires_grad:
            parameter.requires_grad_(False)
            frozen.append(name)
    if frozen:
        logger.info(f"Objective {objective.name!r} does not read {frozen}: frozen (no gradient, no update).")
    return frozen


__all__ = [
    "check_dataloader_options",
    "check_objective_parameters",
    "freeze_unread_logit_scales",
    "has_input_dependent_branches",
    "pad_captions_to_buckets",
    "pins_memory",
    "record_training_provenance",
]
