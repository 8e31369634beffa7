"""AtrTrainer: transformers' Trainer wired to a pluggable retrieval objective, on-device features, gradient
caching, streamed corpora and any evaluator. The class says when each part runs; the objective's loss over the
gathered embeddings is here, the rest in one module each: ``non_finite``, ``objective_logs``, ``cached_step``,
``streaming`` (the stream loader), ``device_inputs``, ``data_wait``, ``objective_checkpoints``,
``trainer_evaluation``, ``trainer_setup`` and ``trainer_callbacks`` of :mod:`hf_atr.training`.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
from datasets import IterableDataset as StreamedDataset
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..deprecation import moved_names
from ..distributed import gather_batch_metadata, gather_rows, is_distributed
from ..evaluation.evaluator import RetrievalEvaluator
from ..model_card.facts import card_data
from ..objectives.batch import group_caption_embeds, pop_batch_metadata
from ..objectives.registry import Objective, build_objective
from . import non_finite
from .cached_step import cached_training_step
from .callbacks import ModelCardCallback
from .collator import CaptionPairDataset
from .data_wait import DATA_WAIT_LOG_KEY, DataWaitCallback, DataWaitMeter
from .device_inputs import DeviceAudioInputs, training_collator
from .grad_cache import check_chunk_size
from .objective_checkpoints import load_objective_state, save_objective_state
from .objective_logs import ObjectiveLogSums
from .streaming import StreamingPairs, trainer_stream_loader
from .trainer_callbacks import CompileTimeCallback, DatasetEpochCallback, ParameterProjectionCallback
from .trainer_evaluation import (
    choose_best_model_metric,
    evaluate_all,
    evaluation_sets,
    evaluator_list,
    evaluator_names,
)
from .trainer_setup import (
    check_dataloader_options,
    check_objective_parameters,
    freeze_unread_logit_scales,
    has_input_dependent_branches,
    pad_captions_to_buckets,
    pins_memory,
    record_training_provenance,
)

logger = logging.get_logger(__name__)

MOVED_NAMES = {
    "AUDIO_FEATURE_SOURCES": "hf_atr.training.device_inputs",
    "NON_FINITE_TENSORS": "hf_atr.training.non_finite",
    "NonFiniteLossError": "hf_atr.training.non_finite",
    "OBJECTIVE_STATE_NAME": "hf_atr.training.objective_checkpoints",
    "UNCHECKED_STEPS_LIMIT": "hf_atr.training.non_finite",
    "finite_or_zero": "hf_atr.training.non_finite",
}
"""Names that moved out of this module -> their home; the old path warns."""
__getattr__ = moved_names(__name__, MOVED_NAMES)


class AtrTrainer(Trainer):
    """``transformers.Trainer`` for :class:`~hf_atr.AtrDualEncoderModel`.

    - After every optimizer step the model projects its constrained parameters
      (:meth:`~hf_atr.AtrDualEncoderModel.project_parameters_`: the Mahalanobis matrix onto the PSD cone).
    - ``compute_loss`` = model forward → (under several processes) gather the embeddings of every
      rank with gradient, so the objective sees the global batch → objective (built from
      ``model.config.objective`` unless an ``objective`` is passed) → loss; the objective's logs are
      summed on the device and averaged between logging steps in the trainer's logs. A NaN/inf embedding or
      loss raises :class:`~hf_atr.training.non_finite.NonFiniteLossError` (or skips the step), checked on the
      device and read before any checkpoint (:mod:`~hf_atr.training.non_finite`).
    - Objective state (buffers/parameters) is saved in every checkpoint and restored by
      ``train(resume_from_checkpoint=...)`` (:mod:`~hf_atr.training.objective_checkpoints`).
    - A :class:`~hf_atr.ModelCardCallback` (added unless one is passed) records hyperparameters, the
      training data's provenance (``corpus_provenance`` of the training clips, with the filters they went
      through) and the last evaluation with its protocol for the card that ``save_model`` writes.
    - Every logging step logs ``data_wait``, the share of the step time spent waiting for batches, and a
      warning names ``--dataloader_num_workers`` when the steps keep waiting (:mod:`~hf_atr.training.data_wait`).
    - ``TrainingArguments(torch_compile=True)`` compiles the model (transformers does, through accelerate);
      the collators then pad captions to a few fixed lengths
      (:func:`~hf_atr.training.collator.text_length_buckets`), so that each compiles once, and the first step's
      time, compilation included, is logged once. Saved weights are the module's own (no ``_orig_mod.``
      prefix). Dropout draws its random numbers differently under compilation, so a compiled run with dropout is
      not the eager run's twin.
    - ``evaluate()`` (and ``eval_strategy``) runs ``evaluator``, any evaluator or a list of them
      (:mod:`~hf_atr.training.trainer_evaluation`: ``eval_<metric>``, or ``eval_<name>_<metric>`` with several),
      or by default retrieval on ``eval_dataset`` (``eval_t2a_R@1``, ``eval_a2t_mAP@10``, ...,
      :class:`~hf_atr.evaluation.RetrievalEvaluator`). ``load_best_model_at_end`` picks the best checkpoint by the
      (first) evaluator's ``primary_metric`` and ``greater_is_better`` unless ``metric_for_best_model`` names
      another metric.

    Datasets are shared-schema rows. A map-style training set of clips is trained on as a
    :class:`CaptionPairDataset` (one item per caption, so an epoch sees every caption once and resuming is exact);
    a streamed one (a ``datasets.IterableDataset``, e.g. WebDataset or parquet shards read with
    :func:`~hf_atr.data.shards.load_audio_text_shards`) as :class:`~hf_atr.training.streaming.StreamingPairs`
    (pass one to choose its caption mode and shuffle buffer), with ``max_steps`` giving the length of training:
    each process reads its own shards, each DataLoader worker its own part of them, and resuming skips the consumed
    items before they are decoded. The default collator is :class:`AtrDataCollator`; ``remove_unused_columns``
    is turned off (the collator needs ``captions`` and ``audio_id``), and the loss is divided by
    gradient-accumulation steps as usual (``model_accepts_loss_kwargs = False``: transformers' Trainer skips
    that division when the batch has ``labels`` and ``forward`` takes ``**kwargs``).
    ``dataloader_pin_memory`` holds on an accelerator only: on the CPU it is turned off.

    Scale:

    - A :class:`~hf_atr.training.waveform_collator.WaveformCollator` (``audio_features="device"`` builds one):
      the DataLoader workers decode, resample and crop the clips (long ones at a random offset drawn per (seed,
      epoch, clip)), and the log-mel features are computed on the training device inside the step
      (:mod:`~hf_atr.training.device_inputs`).
    - ``embedding_chunk_size=N``: gradient caching (:mod:`~hf_atr.training.cached_step`): the encoders see ``N``
      clips at a time, the objective the whole (global) batch, and the update equals the uncached one (with
      LayerNorm backbones; with BatchNorm ones, statistics are per chunk); memory no longer grows with the batch
      through the encoders' activations. Stateful objectives update once per step.
    - Under several processes DDP runs with ``find_unused_parameters=False`` (unless ``TrainingArguments`` says
      otherwise): the model freezes the modules its configuration never reads (a tower's pooler when it pools
      itself) and the trainer freezes the scoring head's logit scales the objective does not read
      (:meth:`~hf_atr.objectives.Objective.logit_scales_read`), so every trainable parameter gets a gradient.

    Args:
        objective: an :class:`~hf_atr.objectives.Objective`; default ``build_objective(model.config)``.
        train_languages: caption languages trained on, each caption of each language once per epoch
            (default English only); see :class:`CaptionPairDataset`.
        evaluator: what ``evaluate()`` runs: an evaluator (called with the model, returning its metrics, naming
            its ``primary_metric``: :class:`~hf_atr.evaluation.RetrievalEvaluator`,
            :class:`~hf_atr.evaluation.ZeroShotEvaluator`, :class:`~hf_atr.evaluation.MomentEvaluator`, ...) or a
            list of them, instead of ``eval_dataset``; ``trainer.eval_dataset`` then holds ``{name: dataset}`` of
            the evaluators.
        eval_languages: caption languages of the default retrieval evaluation (default English only).
        eval_scoring: ``"head"`` (the model's scoring head) or ``"ot_plan"`` (m-LTM Eq. 5) for the default
            retrieval evaluation.
        skip_non_finite: when an embedding or the loss is NaN/inf, skip the step (zero gradient, counted in
            the logs as ``skipped_non_finite_steps``) instead of raising :class:`NonFiniteLossError`. Decided on
            the device: the step's loss is zeroed and its gradients are set to zero after the backward (with
            gradient accumulation, those of the earlier micro-batches of the same optimizer step too); the count
            and a warning naming the steps come at the next logging step.
        audio_features: the default collator when ``data_collator`` is ``None``: ``"device"`` a
            ``WaveformCollator``, ``"collator"`` (or ``None``) an ``AtrDataCollator``. The collator decides where the
            features are computed: on the device when it prepares waveforms (a ``WaveformCollator``, or a
            ``MultilingualCollator`` with ``waveforms``), by itself otherwise
            (:func:`~hf_atr.training.device_inputs.training_collator`).
        embedding_chunk_size: clips per encoder chunk for gradient caching; ``None`` (default) encodes the batch
            at once.
        Other arguments are those of ``transformers.Trainer``; ``processing_class`` must be the
        :class:`~hf_atr.AtrProcessor`.
    """

    def __init__(
        self,
        model: Any = None,
        args: TrainingArguments | None = None,
        *,
        objective: Objective | None = None,
        evaluator: Any = None,
        train_languages: list[str] | None = None,
        eval_languages: list[str] | None = None,
        eval_scoring: str = "head",
        skip_non_finite: bool = False,
        audio_features: str | None = None,
        embedding_chunk_size: int | None = None,
        data_collator: Any = None,
        processing_class: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        **kwargs: Any,
    ) -> None:
        if processing_class is None:
            raise ValueError("AtrTrainer needs `processing_class=AtrProcessor(...)` to tokenise captions.")
        if embedding_chunk_size is not None:
            check_chunk_size(embedding_chunk_size)
        if args is None:
            args = TrainingArguments(output_dir="tmp_trainer")
        if args.remove_unused_columns:
            args.remove_unused_columns = False
        self.objective = objective if objective is not None else build_objective(model.config)
        check_objective_parameters(self.objective, optimizers_given="optimizers" in kwargs)
        freeze_unread_logit_scales(model, self.objective)
        if args.ddp_find_unused_parameters is None:
            args.ddp_find_unused_parameters = has_input_dependent_branches(model)
        data_collator = training_collator(
            data_collator, processing_class, audio_features=audio_features, seed=args.seed
        )
        self.device_inputs = DeviceAudioInputs(data_collator)
        self.data_wait = DataWaitMeter()
        callbacks = [
            *(callbacks or []),
            ParameterProjectionCallback(),
            DatasetEpochCallback(),
            DataWaitCallback(self.data_wait),
        ]
        if args.torch_compile:
            callbacks.append(CompileTimeCallback())
            buckets = pad_captions_to_buckets(data_collator, processing_class.tokenizer)
            if buckets:
                logger.info(
                    f"torch.compile: captions are padded to one of the lengths {list(buckets)}, so that the "
                    "compiled model sees a few caption lengths, not one per batch."
                )
        if not any(isinstance(callback, ModelCardCallback) for callback in callbacks):
            callbacks.append(ModelCardCallback())
        self.evaluators = evaluator_list(evaluator)
        self.evaluator_names = evaluator_names(self.evaluators)
        if self.evaluators:
            kwargs["eval_dataset"] = evaluation_sets(self.evaluators, kwargs.get("eval_dataset"))
        choose_best_model_metric(args, self.evaluators, self.evaluator_names)
        train_dataset = kwargs.pop("train_dataset", None)
        record_training_provenance(callbacks, train_dataset)
        if isinstance(train_dataset, StreamedDataset):
            train_dataset = StreamingPairs(train_dataset, languages=train_languages, seed=args.seed)
        elif train_dataset is not None and "captions" in getattr(train_dataset, "column_names", ()):
            train_dataset = CaptionPairDataset(train_dataset, languages=train_languages)
        check_dataloader_options(args, train_dataset, self.device_inputs.features is not None)
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            data_collator=data_collator,
            processing_class=processing_class,
            callbacks=callbacks,
            **kwargs,
        )
        if embedding_chunk_size is not None and (self.is_deepspeed_enabled or self.is_fsdp_enabled):
            raise ValueError(
                "embedding_chunk_size (gradient caching) runs with DDP or one process, not DeepSpeed/FSDP."
            )
        self.model_accepts_loss_kwargs = False
        self.args.dataloader_pin_memory = pins_memory(self.args)
        waveforms = self.device_inputs.waveform_collator
        if waveforms is not None and waveforms.int16_batches is None:
            # On the CPU int16 saves no copy and moves the scaling from the workers into the training process.
            waveforms.int16_batches = self.args.device.type != "cpu"
        self.objective.to(self.args.device)
        self.eval_languages = eval_languages
        self.eval_scoring = eval_scoring
        self.skip_non_finite = skip_non_finite
        self.embedding_chunk_size = embedding_chunk_size
        self.non_finite_steps = non_finite.NonFiniteSteps(skip_non_finite)
        self.objective_logs = ObjectiveLogSums(skip_non_finite)
        self._process_stream: StreamingPairs | None = None

    @property
    def skipped_non_finite_steps(self) -> int:
        """Steps skipped as non-finite so far (``skip_non_finite``; counted when the checks are read)."""
        return self.non_finite_steps.skipped

    @property
    def device_features(self) -> Any:
        """The batched feature extractor run on the training device (the collator's ``features``), or ``None``
        when the collator prepares the audio inputs itself (:mod:`~hf_atr.training.device_inputs`)."""
        return self.device_inputs.features

    def _device_audio_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The model inputs of a batch: waveforms featurised on the training device when the collator made them."""
        return self.device_inputs(inputs, self.args.device, self.model.training)

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        metadata = pop_batch_metadata(inputs)
        outputs = model(**self._device_audio_inputs(inputs))
        loss = self._objective_loss(model, outputs.audio_embeds, outputs.text_embeds, metadata)
        return (loss, outputs) if return_outputs else loss

    def _objective_loss(
        self, model: Any, audio_embeds: torch.Tensor, text_embeds: torch.Tensor, metadata: dict[str, Any]
    ) -> torch.Tensor:
        """The objective's loss on this process's embeddings (gathered over processes first, with gradient, so that
        the objective sees the global batch); in training, the step's non-finite check and logs are kept on the
        device (:mod:`~hf_atr.training.non_finite`, :mod:`~hf_atr.training.objective_logs`)."""
        text_embeds = group_caption_embeds(text_embeds, audio_embeds.shape[0], metadata)
        if is_distributed():
            audio_embeds, text_embeds = gather_rows(audio_embeds), gather_rows(text_embeds)
            metadata = gather_batch_metadata(metadata)
        audio_embeds, audio_finite = non_finite.finite_or_zero(audio_embeds)
        text_embeds, text_finite = non_finite.finite_or_zero(text_embeds)
        objective_output = self.objective(
            audio_embeds, text_embeds, batch=metadata, model=self.accelerator.unwrap_model(model)
        )
        loss = objective_output.loss
        if not model.training:
            return loss
        finite = self.non_finite_steps.record(
            self.state.global_step,
            audio_finite,
            text_finite,
            loss,
            objective_output.logs,
            self.objective.name,
        )
        self.objective_logs.add(objective_output.logs, finite, loss)
        return self.non_finite_steps.guard(loss, finite)

    def training_step(
        self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """``Trainer.training_step``, or with ``embedding_chunk_size`` one gradient-cached step
        (:mod:`~hf_atr.training.cached_step`); a skipped non-finite step's gradients are then zeroed."""
        if self.embedding_chunk_size is None:
            loss = super().training_step(model, inputs, num_items_in_batch)
        else:
            loss = cached_training_step(self, model, inputs)
        self.non_finite_steps.after_backward(model)
        return loss

    def get_train_dataloader(self) -> Any:
        """The Trainer's loader, or for a stream a per-process loader over this process's shards
        (:func:`~hf_atr.training.streaming.trainer_stream_loader`: read here, collated in the workers)."""
        if not isinstance(self.train_dataset, StreamingPairs):
            self._process_stream = None
            return super().get_train_dataloader()
        stream = self.train_dataset.for_process(self.args.process_index, self.args.world_size)
        self._process_stream = stream
        return trainer_stream_loader(stream, self.args, self._train_batch_size, self.data_collator)

    def get_batch_samples(
        self, epoch_iterator: Any, num_batches: int, device: torch.device
    ) -> tuple[list, Any]:
        """``Trainer.get_batch_samples``, timed: the step's wait for its batches (:mod:`~hf_atr.training.data_wait`)."""
        with self.data_wait.waiting():
            return super().get_batch_samples(epoch_iterator, num_batches, device)

    def _init_training_state(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        """For a stream, the batches to skip on resume go to the stream (skipped before decoding), not to the
        Trainer's ``skip_first_batches`` (which would collate, hence decode, every skipped batch)."""
        epochs_trained, batches_trained = super()._init_training_state(*args, **kwargs)
        if self._process_stream is None:
            return epochs_trained, batches_trained
        self._process_stream.resume_after(batches_trained * self._train_batch_size)
        return epochs_trained, 0

    def _check_non_finite_steps(self) -> None:
        """Read the non-finite checks of the steps since the last read (:class:`~hf_atr.training.non_finite
        .NonFiniteSteps`): raise for a non-finite step, or count and name the skipped ones."""
        self.non_finite_steps.check(self.objective.name, self.state.global_step)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._check_non_finite_steps()
        if "loss" in logs and self.skip_non_finite:
            logs["skipped_non_finite_steps"] = self.skipped_non_finite_steps
        if "loss" in logs:
            logs.update(self.objective_logs.averages(self.objective.name))
        if "loss" in logs and (share := self.data_wait.pop_share()) is not None:
            logs[DATA_WAIT_LOG_KEY] = round(share, 4)
        super().log(logs, start_time)

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """The metrics of the trainer's evaluators, or of retrieval on ``eval_dataset`` (given here, or the
        trainer's when it has no evaluator), prefixed with ``metric_key_prefix``
        (:mod:`~hf_atr.training.trainer_evaluation`)."""
        self._check_non_finite_steps()
        evaluators, names = self.evaluators, self.evaluator_names
        if eval_dataset is not None or not evaluators:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
            if dataset is None:
                raise ValueError("AtrTrainer.evaluate needs an evaluator or an eval_dataset.")
            evaluators = [
                RetrievalEvaluator(
                    dataset,
                    self.processing_class,
                    languages=self.eval_languages,
                    batch_size=self.args.per_device_eval_batch_size,
                    scoring=self.eval_scoring,
                )
            ]
            names = [None]
        model = self.accelerator.unwrap_model(self.model)
        metrics, protocol = evaluate_all(evaluators, names, model, metric_key_prefix)
        card_data(model)["eval_protocol"] = protocol  # the card callback stores the metrics
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        self._check_non_finite_steps()
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            checkpoint_dir = os.path.join(
                self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}"
            )
            save_objective_state(self.objective, checkpoint_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        self._restore_weights(resume_from_checkpoint)
        load_objective_state(self.objective, resume_from_checkpoint, self.args.device)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """``Trainer.save_model``, after checking the steps trained since the last check for non-finite values."""
        self._check_non_finite_steps()
        super().save_model(output_dir, _internal_call)

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
