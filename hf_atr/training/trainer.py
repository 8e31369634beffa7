"""AtrTrainer: transformers' Trainer with a pluggable retrieval objective and retrieval evaluation."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..evaluation.evaluator import RetrievalEvaluator
from ..objectives.registry import Objective, build_objective
from .collator import METADATA_KEYS, AtrDataCollator, CaptionPairDataset

logger = logging.get_logger(__name__)

OBJECTIVE_STATE_NAME = "objective.safetensors"
"""File holding the objective's buffers/parameters (e.g. DART's EMA reliabilities) inside a checkpoint."""


class NonFiniteLossError(FloatingPointError):
    """Raised when the objective returns a NaN or infinite loss."""


class _ObjectiveStepCallback(TrainerCallback):
    """Calls ``objective.on_optimizer_step(model)`` after every optimizer step (e.g. Mahalanobis PSD projection)."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective

    def on_optimizer_step(self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any):
        self.objective.on_optimizer_step(model)


class AtrTrainer(Trainer):
    """``transformers.Trainer`` for :class:`~hf_atr.AtrDualEncoderModel`.

    - ``compute_loss`` = model forward → objective (built from ``model.config.objective`` unless an
      ``objective`` is passed) → loss; the objective's logs are averaged between logging steps and
      appear in the trainer's logs.
    - Objective state (buffers/parameters) is saved as ``objective.safetensors`` in every checkpoint and
      restored by ``train(resume_from_checkpoint=...)``.
    - ``evaluate()`` encodes the evaluation set once and returns retrieval metrics
      (``eval_t2a_R@1``, ``eval_a2t_mAP@10``, ...), see :class:`~hf_atr.evaluation.RetrievalEvaluator`.

    Datasets are shared-schema rows with precomputed audio features. A training set of clips is
    trained on as a :class:`CaptionPairDataset` (one item per caption, so an epoch sees every
    caption once and resuming is exact); the default collator is :class:`AtrDataCollator`. ``remove_unused_columns`` is turned off (the collator needs
    ``captions`` and ``audio_id``), and the loss is divided by gradient-accumulation steps as usual
    (``model_accepts_loss_kwargs = False``, see STACK-NOTES.md).

    Args:
        objective: an :class:`~hf_atr.objectives.Objective`; default ``build_objective(model.config)``.
        train_languages: caption languages trained on, each caption of each language once per epoch
            (default English only); see :class:`CaptionPairDataset`.
        eval_languages: caption languages for ``evaluate()`` (default English only).
        eval_scoring: ``"head"`` (the model's scoring head) or ``"ot_plan"`` (m-LTM Eq. 5) for ``evaluate()``.
        Other arguments are those of ``transformers.Trainer``; ``processing_class`` must be the
        :class:`~hf_atr.AtrProcessor`.
    """

    def __init__(
        self,
        model: Any = None,
        args: TrainingArguments | None = None,
        *,
        objective: Objective | None = None,
        train_languages: list[str] | None = None,
        eval_languages: list[str] | None = None,
        eval_scoring: str = "head",
        data_collator: Any = None,
        processing_class: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        **kwargs: Any,
    ) -> None:
        if processing_class is None:
            raise ValueError("AtrTrainer needs `processing_class=AtrProcessor(...)` to tokenise captions.")
        if args is not None and args.remove_unused_columns:
            args.remove_unused_columns = False
        self.objective = objective if objective is not None else build_objective(model.config)
        if data_collator is None:
            data_collator = AtrDataCollator(processing_class)
        callbacks = [*(callbacks or []), _ObjectiveStepCallback(self.objective)]
        train_dataset = kwargs.pop("train_dataset", None)
        if train_dataset is not None and "captions" in getattr(train_dataset, "column_names", ()):
            train_dataset = CaptionPairDataset(train_dataset, languages=train_languages)
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            data_collator=data_collator,
            processing_class=processing_class,
            callbacks=callbacks,
            **kwargs,
        )
        self.model_accepts_loss_kwargs = False
        self.objective.to(self.args.device)
        self.eval_languages = eval_languages
        self.eval_scoring = eval_scoring
        self._objective_log_sums: dict[str, float] = defaultdict(float)
        self._objective_log_count = 0

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        metadata = {key: inputs.pop(key) for key in METADATA_KEYS if key in inputs}
        outputs = model(**inputs)
        objective_output = self.objective(
            outputs.audio_embeds,
            outputs.text_embeds,
            batch=metadata,
            model=self.accelerator.unwrap_model(model),
        )
        loss = objective_output.loss
        if not torch.isfinite(loss.detach()).all():
            raise NonFiniteLossError(
                f"Objective {self.objective.name!r} returned a non-finite loss ({loss.item()}) at step "
                f"{self.state.global_step}; its terms were {objective_output.logs}. Lower the learning rate, "
                "check the inputs of this batch, or raise the objective's entropic regularisation."
            )
        if model.training:
            for key, value in objective_output.logs.items():
                self._objective_log_sums[key] += float(value)
            self._objective_log_count += 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._objective_log_count:
            for key, total in self._objective_log_sums.items():
                logs[f"{self.objective.name}/{key}"] = round(total / self._objective_log_count, 6)
            self._objective_log_sums.clear()
            self._objective_log_count = 0
        super().log(logs, start_time)

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Retrieval metrics on ``eval_dataset`` (or the trainer's), prefixed with ``metric_key_prefix``."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("AtrTrainer.evaluate needs an eval_dataset.")
        evaluator = RetrievalEvaluator(
            dataset,
            self.processing_class,
            languages=self.eval_languages,
            batch_size=self.args.per_device_eval_batch_size,
            scoring=self.eval_scoring,
        )
        metrics = {
            f"{metric_key_prefix}_{key}": value
            for key, value in evaluator(self.accelerator.unwrap_model(self.model)).items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        }
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        state = {name: tensor.detach().cpu().contiguous() for name, tensor in self.objective.state_dict().items()}
        if state:
            checkpoint_dir = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            save_file(state, os.path.join(checkpoint_dir, OBJECTIVE_STATE_NAME))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        self._restore_weights(resume_from_checkpoint)
        state_file = os.path.join(resume_from_checkpoint, OBJECTIVE_STATE_NAME)
        if os.path.isfile(state_file):
            self.objective.load_state_dict(load_file(state_file, device=str(self.args.device)))
        elif self.objective.state_dict():
            raise FileNotFoundError(
                f"Checkpoint {resume_from_checkpoint} has no {OBJECTIVE_STATE_NAME}, but objective "
                f"{self.objective.name!r} has state {sorted(self.objective.state_dict())} to restore."
            )

    def _load_best_model(self) -> None:
        self._restore_weights(self.state.best_model_checkpoint)

    def _restore_weights(self, checkpoint_dir: str) -> None:
        """Load a checkpoint's weights through ``from_pretrained``.

        transformers 5 saves some backbones (e.g. AST) under legacy key names and converts them back only
        in ``from_pretrained``; the stock Trainer loads the raw keys with ``strict=False`` and so silently
        skips every renamed backbone weight on resume.
        """
        model = self.accelerator.unwrap_model(self.model)
        restored = type(model).from_pretrained(checkpoint_dir)
        model.load_state_dict(restored.state_dict())
