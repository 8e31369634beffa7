"""AtrTrainer: transformers' Trainer with a pluggable retrieval objective and retrieval evaluation."""

from __future__ import annotations

import gc
import math
import os
from collections import defaultdict
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..data.schema import corpus_provenance
from ..evaluation.evaluator import RetrievalEvaluator
from ..file_permissions import apply_umask
from ..model_card import ModelCardCallback, card_data
from ..objectives.registry import Objective, build_objective
from .collator import METADATA_KEYS, AtrDataCollator, CaptionPairDataset
from .distributed import gather_batch_metadata, gather_rows, is_distributed
from .multilingual import MULTILINGUAL_METADATA_KEYS, group_caption_embeds

logger = logging.get_logger(__name__)

OBJECTIVE_STATE_NAME = "objective.safetensors"
"""File holding the objective's buffers/parameters (e.g. DART's EMA reliabilities) inside a checkpoint."""


class NonFiniteLossError(FloatingPointError):
    """Raised when the objective returns a NaN or infinite loss."""


class _ParameterProjectionCallback(TrainerCallback):
    """Calls ``model.project_parameters_()`` after every optimizer step, whatever the objective.

    The model owns its constraints (the Mahalanobis matrix stays PSD, m-LTM §3.2); the trainer only says when.
    """

    def on_optimizer_step(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ):
        model.project_parameters_()


def _record_training_provenance(callbacks: list[TrainerCallback], train_dataset: Any) -> None:
    """Give the card callbacks that have none the provenance of the training clips (of a view's ``clips``)."""
    clips = getattr(train_dataset, "clips", train_dataset)
    provenance = corpus_provenance(clips) if hasattr(clips, "info") else None
    for callback in callbacks:
        if isinstance(callback, ModelCardCallback) and callback.training_provenance is None:
            callback.training_provenance = provenance


class AtrTrainer(Trainer):
    """``transformers.Trainer`` for :class:`~hf_atr.AtrDualEncoderModel`.

    - After every optimizer step the model projects its constrained parameters
      (:meth:`~hf_atr.AtrDualEncoderModel.project_parameters_`: the Mahalanobis matrix onto the PSD cone).
    - ``compute_loss`` = model forward → (under several processes) gather the embeddings of every
      rank with gradient, so the objective sees the global batch → objective (built from
      ``model.config.objective`` unless an ``objective`` is passed) → loss; the objective's logs are
      averaged between logging steps and appear in the trainer's logs. A NaN/inf embedding or loss
      raises :class:`NonFiniteLossError` naming the step and the tensor (or skips the step).
    - Objective state (buffers/parameters) is saved as ``objective.safetensors`` in every checkpoint and
      restored by ``train(resume_from_checkpoint=...)``.
    - A :class:`~hf_atr.ModelCardCallback` (added unless one is passed) records hyperparameters, the
      training data's provenance (``corpus_provenance`` of the training clips, with the filters they went
      through) and the last evaluation with its protocol for the card that ``save_model`` writes.
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
        skip_non_finite: when an embedding or the loss is NaN/inf, skip the step (zero gradient, counted in
            the logs as ``skipped_non_finite_steps``) instead of raising :class:`NonFiniteLossError`.
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
        skip_non_finite: bool = False,
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
        trainable = [name for name, parameter in self.objective.named_parameters() if parameter.requires_grad]
        if trainable and "optimizers" not in kwargs:
            raise ValueError(
                f"Objective {self.objective.name!r} has trainable parameters {trainable}, which the Trainer's "
                "optimizer (built from the model) would never update. Keep learnable quantities in the model "
                "(as the temperature lives in its scoring head), or pass `optimizers=(optimizer, scheduler)` "
                "covering them."
            )
        if data_collator is None:
            data_collator = AtrDataCollator(processing_class)
        callbacks = [*(callbacks or []), _ParameterProjectionCallback()]
        if not any(isinstance(callback, ModelCardCallback) for callback in callbacks):
            callbacks.append(ModelCardCallback())
        train_dataset = kwargs.pop("train_dataset", None)
        _record_training_provenance(callbacks, train_dataset)
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
        self.skip_non_finite = skip_non_finite
        self.skipped_non_finite_steps = 0
        self._objective_log_sums: dict[str, float] = defaultdict(float)
        self._objective_log_count = 0

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        metadata = {
            key: inputs.pop(key) for key in (*METADATA_KEYS, *MULTILINGUAL_METADATA_KEYS) if key in inputs
        }
        outputs = model(**inputs)
        audio_embeds = outputs.audio_embeds
        text_embeds = group_caption_embeds(outputs.text_embeds, audio_embeds.shape[0], metadata)
        if is_distributed():
            audio_embeds, text_embeds = gather_rows(audio_embeds), gather_rows(text_embeds)
            metadata = gather_batch_metadata(metadata)
        problem = self._non_finite(audio_embeds=audio_embeds, text_embeds=text_embeds)
        objective_output = None
        if problem is None:
            objective_output = self.objective(
                audio_embeds, text_embeds, batch=metadata, model=self.accelerator.unwrap_model(model)
            )
            problem = self._non_finite(loss=objective_output.loss)
        if problem is not None:
            loss = self._handle_non_finite(model, problem, objective_output)
        else:
            loss = objective_output.loss
            if model.training:
                for key, value in objective_output.logs.items():
                    self._objective_log_sums[key] += float(value)
                self._objective_log_count += 1
        return (loss, outputs) if return_outputs else loss

    @staticmethod
    def _non_finite(**tensors: torch.Tensor) -> str | None:
        """The name of the first tensor holding NaN/inf, or None."""
        for name, tensor in tensors.items():
            if not torch.isfinite(tensor.detach()).all():
                return name
        return None

    def _handle_non_finite(self, model: Any, problem: str, objective_output: Any) -> torch.Tensor:
        """Raise :class:`NonFiniteLossError`, or with ``skip_non_finite`` return a zero loss and count the skip."""
        terms = "" if objective_output is None else f"; its terms were {objective_output.logs}"
        message = f"Non-finite {problem} at step {self.state.global_step} (objective {self.objective.name!r}{terms})."
        if not self.skip_non_finite:
            raise NonFiniteLossError(
                f"{message} Lower the learning rate, check this batch's inputs, raise the objective's entropic "
                "regularisation, or pass skip_non_finite=True to AtrTrainer to skip such steps."
            )
        self.skipped_non_finite_steps += 1
        logger.warning(f"{message} Step skipped ({self.skipped_non_finite_steps} so far).")
        # A zero that still reaches every parameter, so backward and DDP's gradient reduction proceed.
        return sum(parameter.sum() for parameter in model.parameters() if parameter.requires_grad) * 0.0

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self.skip_non_finite:
            logs["skipped_non_finite_steps"] = self.skipped_non_finite_steps
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
        model = self.accelerator.unwrap_model(self.model)
        metrics = {
            f"{metric_key_prefix}_{key}": value
            for key, value in evaluator(model).items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        }
        card_data(model)["eval_protocol"] = evaluator.protocol  # the card callback stores the metrics
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        state = {
            name: tensor.detach().cpu().contiguous() for name, tensor in self.objective.state_dict().items()
        }
        if state:
            checkpoint_dir = os.path.join(
                self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}"
            )
            state_file = os.path.join(checkpoint_dir, OBJECTIVE_STATE_NAME)
            save_file(state, state_file)
            apply_umask(state_file)  # safetensors writes 0o600 (hf_atr.file_permissions)

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

    def end(self) -> None:
        """Release the distributed wrapper, then destroy the process group (``Trainer.end``).

        Call once at the end of a multi-process script, after ``train``/``evaluate``/``save_model``.
        The DDP wrapper's reducer holds the process group and is freed by pybind11 with the GIL held; if
        it is the last holder, the gloo group's destructor joins worker threads that may need the GIL to
        free the tensors of the last collective, and the rank hangs (pytorch#56297). Freed at interpreter
        shutdown instead, the same threads abort the rank ("terminate called without an active
        exception"). Dropping the wrapper first leaves the group to ``destroy_process_group``, whose
        destructor releases the GIL.
        """
        self.model_wrapped = self.model
        self.accelerator.free_memory()
        gc.collect()  # free_memory collects before it drops its own references
        super().end()

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
