"""AtrTrainer: transformers' Trainer with a pluggable retrieval objective and retrieval evaluation."""

from __future__ import annotations

import gc
import math
import os
import time
from typing import Any

import torch
from datasets import IterableDataset as StreamedDataset
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..data.schema import corpus_provenance
from ..distributed import average_gradients, gather_batch_metadata, gather_rows, is_distributed
from ..evaluation.evaluator import RetrievalEvaluator
from ..file_permissions import apply_umask
from ..model_card.facts import card_data
from ..objectives.batch import CAPTIONS_PER_AUDIO, NEGATIVE_AUDIO, group_caption_embeds, pop_batch_metadata
from ..objectives.registry import LOGIT_BIAS_NAME, LOGIT_SCALE_NAMES, Objective, build_objective
from .callbacks import ModelCardCallback
from .collator import CaptionPairDataset, text_length_buckets
from .data_wait import DATA_WAIT_LOG_KEY, DataWaitCallback, DataWaitMeter
from .device_inputs import DeviceAudioInputs, training_collator
from .grad_cache import cached_embedding_backward, check_chunk_size, split_batch
from .moment_crops import MomentCropDataset
from .multilingual import RandomLanguageDataset
from .streaming import StreamingPairs, stream_data_loader
from .trainer_evaluation import choose_best_model_metric, evaluate_all, evaluator_list, evaluator_names

logger = logging.get_logger(__name__)

OBJECTIVE_STATE_NAME = "objective.safetensors"
"""File holding the objective's buffers/parameters (e.g. DART's EMA reliabilities) inside a checkpoint."""

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


def _has_input_dependent_branches(model: Any) -> bool:
    """Whether some parameters are used only for some inputs, so DDP must look for unused ones every step.

    CLAP's fused audio tower runs its fusion layers only on batches that hold a clip longer than the window.
    """
    config = getattr(model, "config", None)
    return bool(getattr(getattr(config, "audio_config", None), "enable_fusion", False))


def _check_dataloader_options(args: TrainingArguments, train_dataset: Any, device_features: bool) -> None:
    """Persistent workers keep their first copy of a map-style dataset, so per-epoch draws must not live there."""
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


def _pins_memory(args: TrainingArguments) -> bool:
    """Whether the DataLoaders pin memory: as ``args`` says when training on an accelerator, never on the CPU,
    where pinned (page-locked) memory speeds up no copy and torch's DataLoader warns about it at every epoch."""
    return args.dataloader_pin_memory and args.device.type != "cpu"


class _CompileTimeCallback(TrainerCallback):
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


def _pad_captions_to_buckets(data_collator: Any, tokenizer: Any) -> tuple[int, ...] | None:
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


class _ParameterProjectionCallback(TrainerCallback):
    """Calls ``model.project_parameters_()`` after every optimizer step, whatever the objective.

    The model owns its constraints (the Mahalanobis matrix stays PSD, m-LTM §3.2); the trainer only says when.
    """

    def on_optimizer_step(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ):
        model.project_parameters_()


class _DatasetEpochCallback(TrainerCallback):
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
      summed on the device, averaged between logging steps and appear in the trainer's logs. A NaN/inf
      embedding or loss raises :class:`NonFiniteLossError` naming the step and the tensor (or skips the step);
      the check runs on the device and is read at the next logging step, or before a checkpoint is written,
      whichever comes first, so that no checkpoint holds the weights of a non-finite step.
    - Objective state (buffers/parameters) is saved as ``objective.safetensors`` in every checkpoint and
      restored by ``train(resume_from_checkpoint=...)``.
    - A :class:`~hf_atr.ModelCardCallback` (added unless one is passed) records hyperparameters, the
      training data's provenance (``corpus_provenance`` of the training clips, with the filters they went
      through) and the last evaluation with its protocol for the card that ``save_model`` writes.
    - Every logging step logs ``data_wait``, the share of the step time spent waiting for batches, and a
      warning names ``--dataloader_num_workers`` when the steps keep waiting (:mod:`~hf_atr.training.data_wait`).
    - ``TrainingArguments(torch_compile=True)`` compiles the model (transformers does, through accelerate);
      the collators then pad captions to a few fixed lengths
      (:func:`~hf_atr.training.collator.text_length_buckets`), so that each compiles once, and the first step's
      time, compilation included, is logged once. Saved weights are the module's own (no ``_orig_mod.`` prefix). Dropout draws its random
      numbers differently under compilation, so a compiled run with dropout is not the eager run's twin.
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
    gradient-accumulation steps as usual (``model_accepts_loss_kwargs = False``, see STACK-NOTES.md).
    ``dataloader_pin_memory`` holds on an accelerator only: on the CPU it is turned off.

    Scale:

    - ``audio_features="device"``: the collator's DataLoader workers decode, resample and crop the clips
      (:class:`~hf_atr.training.waveform_collator.WaveformCollator`, built from the processor unless one is passed;
      long clips are cut to the extractor's window at a random offset drawn per (seed, epoch, clip)), and the
      log-mel features are computed batched on the training device inside the step.
    - ``embedding_chunk_size=N``: gradient caching (:mod:`hf_atr.training.grad_cache`): the encoders see ``N``
      clips at a time, the objective the whole (global) batch, and the update equals the uncached one (with
      LayerNorm backbones; with BatchNorm ones, statistics are per chunk). Memory no longer grows with the batch
      through the encoders' activations, only through the embeddings and the objective's own ``batch × batch``
      buffers. Stateful objectives update once per step.
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
        trainable = [name for name, parameter in self.objective.named_parameters() if parameter.requires_grad]
        if trainable and "optimizers" not in kwargs:
            raise ValueError(
                f"Objective {self.objective.name!r} has trainable parameters {trainable}, which the Trainer's "
                "optimizer (built from the model) would never update. Keep learnable quantities in the model "
                "(as the temperature lives in its scoring head), or pass `optimizers=(optimizer, scheduler)` "
                "covering them."
            )
        self._freeze_unread_logit_scales(model)
        if args.ddp_find_unused_parameters is None:
            args.ddp_find_unused_parameters = _has_input_dependent_branches(model)
        data_collator = training_collator(
            data_collator, processing_class, audio_features=audio_features, seed=args.seed
        )
        self.device_inputs = DeviceAudioInputs(data_collator)
        self.data_wait = DataWaitMeter()
        callbacks = [
            *(callbacks or []),
            _ParameterProjectionCallback(),
            _DatasetEpochCallback(),
            DataWaitCallback(self.data_wait),
        ]
        if args.torch_compile:
            callbacks.append(_CompileTimeCallback())
            buckets = _pad_captions_to_buckets(data_collator, processing_class.tokenizer)
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
            if kwargs.get("eval_dataset") is not None:
                raise ValueError(
                    "Pass evaluator=... or eval_dataset=..., not both: an evaluator holds its own evaluation set."
                )
            kwargs["eval_dataset"] = {
                name or getattr(each, "name", None) or type(each).__name__.lower(): getattr(
                    each, "dataset", None
                )
                for name, each in zip(self.evaluator_names, self.evaluators)
            }
        choose_best_model_metric(args, self.evaluators, self.evaluator_names)
        train_dataset = kwargs.pop("train_dataset", None)
        _record_training_provenance(callbacks, train_dataset)
        if isinstance(train_dataset, StreamedDataset):
            train_dataset = StreamingPairs(train_dataset, languages=train_languages, seed=args.seed)
        elif train_dataset is not None and "captions" in getattr(train_dataset, "column_names", ()):
            train_dataset = CaptionPairDataset(train_dataset, languages=train_languages)
        _check_dataloader_options(args, train_dataset, self.device_inputs.features is not None)
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
        self.args.dataloader_pin_memory = _pins_memory(self.args)
        waveforms = self.device_inputs.waveform_collator
        if waveforms is not None and waveforms.int16_batches is None:
            # On the CPU int16 saves no copy and moves the scaling from the workers into the training process.
            waveforms.int16_batches = self.args.device.type != "cpu"
        self.objective.to(self.args.device)
        self.eval_languages = eval_languages
        self.eval_scoring = eval_scoring
        self.skip_non_finite = skip_non_finite
        self.embedding_chunk_size = embedding_chunk_size
        self.skipped_non_finite_steps = 0
        self._objective_log_sums: dict[str, torch.Tensor] = {}
        self._objective_log_count: torch.Tensor | int = 0
        self._unchecked_steps: list[tuple[int, torch.Tensor, dict[str, Any]]] = []
        self._step_finite: torch.Tensor | None = None
        self._process_stream: StreamingPairs | None = None

    def _freeze_unread_logit_scales(self, model: Any) -> None:
        """``requires_grad=False`` on the scoring head's logit scales (and bias) the objective's loss does not depend on."""
        head = getattr(model, "scoring_head", None)
        read = self.objective.logit_scales_read() | (
            {LOGIT_BIAS_NAME} if self.objective.logit_bias_read() else set()
        )
        frozen = []
        for name in sorted((LOGIT_SCALE_NAMES | {LOGIT_BIAS_NAME}) - read):
            parameter = getattr(head, name, None)
            if isinstance(parameter, torch.nn.Parameter) and parameter.requires_grad:
                parameter.requires_grad_(False)
                frozen.append(name)
        if frozen:
            logger.info(
                f"Objective {self.objective.name!r} does not read {frozen}: frozen (no gradient, no update)."
            )

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
        """The objective's loss on this process's embeddings (gathered over processes first), logs collected."""
        text_embeds = group_caption_embeds(text_embeds, audio_embeds.shape[0], metadata)
        if is_distributed():
            audio_embeds, text_embeds = gather_rows(audio_embeds), gather_rows(text_embeds)
            metadata = gather_batch_metadata(metadata)
        audio_embeds, audio_finite = finite_or_zero(audio_embeds)
        text_embeds, text_finite = finite_or_zero(text_embeds)
        objective_output = self.objective(
            audio_embeds, text_embeds, batch=metadata, model=self.accelerator.unwrap_model(model)
        )
        loss = objective_output.loss
        if not model.training:
            return loss
        loss_finite = torch.isfinite(loss.detach())
        code = torch.where(~audio_finite, 1, torch.where(~text_finite, 2, torch.where(~loss_finite, 3, 0)))
        self._unchecked_steps.append((self.state.global_step, code, objective_output.logs))
        if len(self._unchecked_steps) >= UNCHECKED_STEPS_LIMIT:
            self._check_non_finite_steps()
        finite = code == 0
        self._add_objective_logs(objective_output.logs, finite, loss)
        if not self.skip_non_finite:
            return loss
        self._step_finite = finite if self._step_finite is None else self._step_finite & finite
        return torch.where(finite, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))

    def _add_objective_logs(self, logs: dict[str, Any], finite: torch.Tensor, like: torch.Tensor) -> None:
        """Add a training step's objective logs to the sums of this logging period, on the device (floats made
        0-dim tensors there); with ``skip_non_finite``, a non-finite step adds nothing and is not counted."""
        for key, value in logs.items():
            if not isinstance(value, torch.Tensor):
                value = torch.full((), float(value), dtype=torch.float64, device=like.device)
            value = value.detach()
            if self.skip_non_finite:
                value = torch.where(finite, value, torch.zeros((), dtype=value.dtype, device=value.device))
            total = self._objective_log_sums.get(key)
            self._objective_log_sums[key] = value if total is None else total + value
        self._objective_log_count = self._objective_log_count + (finite.long() if self.skip_non_finite else 1)

    def training_step(
        self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """``Trainer.training_step``, or with ``embedding_chunk_size`` one gradient-cached step.

        Cached: the batch stays where the collator left it and moves to the device chunk by chunk
        (:func:`~hf_atr.training.grad_cache.cached_embedding_backward`); the objective's backward goes through
        ``accelerator.backward`` (so fp16 gradient scaling applies to every gradient), the encoders' backward runs
        under ``no_sync`` and, under several processes, the gradients are averaged once at the end of the
        accumulation cycle, as DDP would.
        """
        if self.embedding_chunk_size is None:
            loss = super().training_step(model, inputs, num_items_in_batch)
        else:
            loss = self._cached_training_step(model, inputs)
        if self._step_finite is not None:
            self._zero_gradients_unless(model, self._step_finite)
            self._step_finite = None
        return loss

    @staticmethod
    def _zero_gradients_unless(model: Any, finite: torch.Tensor) -> None:
        """Set every gradient to zero unless ``finite`` (a 0-dim bool on the device): a skipped step, decided
        without reading the flag back (the gradients of a non-finite step may hold NaN, which a product with 0
        would keep)."""
        keep = finite.logical_not()
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.masked_fill_(keep, 0.0)

    def _cached_training_step(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """One gradient-cached step (see :meth:`training_step`)."""
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        metadata = self._prepare_input(pop_batch_metadata(dict(inputs)))
        if NEGATIVE_AUDIO in metadata:
            raise ValueError(
                "embedding_chunk_size (gradient caching) chunks a batch by its caption rows, and this batch has "
                "unpaired audio rows (moment training's negative crops): train it without embedding_chunk_size."
            )
        model_inputs = {key: value for key, value in inputs.items() if key not in metadata}
        chunks = split_batch(
            model_inputs, self.embedding_chunk_size, int(metadata.get(CAPTIONS_PER_AUDIO, 1))
        )

        def embed(chunk: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
            outputs = model(**self._device_audio_inputs(self._prepare_input(chunk)))
            return outputs.audio_embeds, outputs.text_embeds

        def objective_backward(audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
            with self.compute_loss_context_manager():
                loss = self._objective_loss(model, audio_embeds, text_embeds, metadata)
            self.accelerator.backward(loss / self.current_gradient_accumulation_steps)
            return loss.detach()

        with self.accelerator.no_sync(model):
            loss = cached_embedding_backward(
                embed,
                chunks,
                objective_backward,
                model=self.accelerator.unwrap_model(model),
                devices=[self.args.device],
            )
        if is_distributed() and self.accelerator.sync_gradients:
            average_gradients(list(model.parameters()))
        return loss / self.current_gradient_accumulation_steps

    def get_train_dataloader(self) -> Any:
        """The Trainer's loader, or for a stream a per-process loader over this process's shards.

        Streams bypass ``accelerator.prepare``: for an ``IterableDataset`` accelerate would either read every batch
        on rank 0 and dispatch it (``dispatch_batches``, its default for iterable datasets) or wrap the stream in an
        ``IterableDatasetShard`` that makes every rank read every item and keep its share. Each rank reads its own
        shards instead (:func:`~hf_atr.training.streaming.stream_data_loader`: read here, collated in the workers);
        the Trainer moves each batch to the device.
        """
        if not isinstance(self.train_dataset, StreamingPairs):
            self._process_stream = None
            return super().get_train_dataloader()
        if self.args.accelerator_config.dispatch_batches:
            raise ValueError(
                "accelerator_config.dispatch_batches=True is not used with streamed training: each process reads "
                "its own shards. Leave it unset."
            )
        stream = self.train_dataset.for_process(self.args.process_index, self.args.world_size)
        self._process_stream = stream
        workers = self.args.dataloader_num_workers
        return stream_data_loader(
            stream,
            self._train_batch_size,
            self.data_collator,
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=self.args.dataloader_prefetch_factor if workers > 0 else None,
            multiprocessing_context=self.args.dataloader_multiprocessing_context if workers > 0 else None,
            in_order=self.args.dataloader_in_order,
            # Its own generator: creating the iterator then draws the workers' base seed from it, not from torch's
            # global generator, whose state a resumed run restores from the checkpoint.
            generator=torch.Generator().manual_seed(self.args.seed),
        )

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
        """Read the non-finite codes of the steps since the last check (one read for all of them): raise
        :class:`NonFiniteLossError` for the first non-finite step, or with ``skip_non_finite`` count the skipped
        steps and name them in a warning."""
        unchecked, self._unchecked_steps = self._unchecked_steps, []
        if not unchecked:
            return
        codes = torch.stack([code for _, code, _ in unchecked]).tolist()
        problems = [(step, code, logs) for (step, _, logs), code in zip(unchecked, codes) if code]
        if not problems:
            return
        step, code, logs = problems[0]
        problem = NON_FINITE_TENSORS[code - 1]
        terms = f"; its terms were {_read_logs(logs)}" if problem == "loss" else ""
        message = f"Non-finite {problem} at step {step} (objective {self.objective.name!r}{terms})."
        if not self.skip_non_finite:
            raise NonFiniteLossError(
                f"{message} Lower the learning rate, check this batch's inputs, raise the objective's entropic "
                "regularisation, or pass skip_non_finite=True to AtrTrainer to skip such steps. (The check is read "
                f"at logging steps and before checkpoints; read at step {self.state.global_step}, no checkpoint was "
                "written since.)"
            )
        self.skipped_non_finite_steps += len(problems)
        steps = sorted({step for step, _, _ in problems})
        logger.warning(
            f"{message} Skipped {len(problems)} step(s) since the last log, at step(s) {steps} "
            f"({self.skipped_non_finite_steps} so far)."
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._check_non_finite_steps()
        if "loss" in logs and self.skip_non_finite:
            logs["skipped_non_finite_steps"] = self.skipped_non_finite_steps
        if "loss" in logs and self._objective_log_sums:
            names = list(self._objective_log_sums)
            totals = torch.stack([self._objective_log_sums[name].to(torch.float64) for name in names])
            count = torch.as_tensor(self._objective_log_count, dtype=torch.float64, device=totals.device)
            *totals_read, count_read = torch.cat(
                [totals, count.reshape(1)]
            ).tolist()  # one read for all terms
            if count_read > 0:
                for name, total in zip(names, totals_read):
                    logs[f"{self.objective.name}/{name}"] = round(total / count_read, 6)
            self._objective_log_sums.clear()
            self._objective_log_count = 0
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
            evaluators, names = [self._retrieval_evaluator(dataset)], [None]
        model = self.accelerator.unwrap_model(self.model)
        metrics, protocol = evaluate_all(evaluators, names, model, metric_key_prefix)
        card_data(model)["eval_protocol"] = protocol  # the card callback stores the metrics
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _retrieval_evaluator(self, dataset: Any) -> RetrievalEvaluator:
        """The default evaluation: retrieval on ``dataset`` in ``eval_languages``, scored by ``eval_scoring``."""
        return RetrievalEvaluator(
            dataset,
            self.processing_class,
            languages=self.eval_languages,
            batch_size=self.args.per_device_eval_batch_size,
            scoring=self.eval_scoring,
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        self._check_non_finite_steps()
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


def _read_logs(logs: dict[str, Any]) -> dict[str, float]:
    """An objective's logs as floats (read from the device)."""
    return {key: float(value) for key, value in logs.items()}
