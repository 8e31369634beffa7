"""Trainer callbacks: the ASK knowledge-base refresh (dynamic knowledge refinement, ASK §4.4) and the collection of
what the model card shows (:class:`ModelCardCallback`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist
from transformers import TrainerCallback, TrainingArguments
from transformers.utils import logging

from ..distributed import all_gather_rows, broadcast_rows, is_distributed
from ..encoding import encode_pairs, pair_audio_ids
from ..knowledge.knowledge_base import KnowledgeBase, prototype_pairs, representation_drift
from ..model_card.facts import card_data, normalize_metric_names

logger = logging.get_logger(__name__)

DEFAULT_REFRESH_EPOCHS = 15
"""The update period ``T`` in epochs (ASK §5.1, Fig. 3)."""


KNOWLEDGE_BASE_NAME = "knowledge_base.safetensors"
"""File holding ASK's knowledge base inside a checkpoint, so that a resumed run continues with it."""


class KnowledgeBaseRefreshCallback(TrainerCallback):
    """Builds the ASK knowledge base at train begin and rebuilds it with the current encoders every ``T`` epochs.

    Rebuilding re-encodes ``dataset`` with the model being trained, so the base co-evolves with it (the
    RDM fix, ASK §4.4). Before replacing the base, the representation-drift mismatch (Eq. 3-4) between
    the old and the new base (when both hold the same pairs, i.e. the same source) is logged
    (``kb_drift`` in the trainer state's ``log_history``, and in :attr:`history`). Under several
    processes each rank encodes its contiguous shard of ``dataset``, the pairs are all-gathered in rank
    order with tensor collectives, rank 0 clusters them and broadcasts the prototypes, so every rank
    holds the same base.

    Callbacks get the model but no trainer, so the objective and processor are given here.

    Args:
        objective: the :class:`~hf_atr.objectives.ask.AskObjective` whose ``knowledge_base`` is set; its
            ``num_prototypes`` is ``N_c``.
        processor: the model's :class:`~hf_atr.AtrProcessor`.
        dataset: shared-schema source ``D_k`` with precomputed audio features (the training set for ASK⁺).
        every_epochs: refresh period ``T`` in epochs (``None``: not by epochs).
        every_steps: refresh every this many optimizer steps as well (``None``: not by steps).
        refresh: ``False`` keeps the initial base for the whole run (Table 3, "w/o dynamic refinement").
        captions, languages: which captions form pairs, see :func:`~hf_atr.encoding.encode_pairs`.
        drift_queries: queries used to estimate the drift (``None``: every pair).
        show_progress: progress bars while encoding (on the main process only).

    Example::

        objective = build_objective({"name": "ask"})
        refresh = KnowledgeBaseRefreshCallback(objective, processor, features["train"], every_epochs=15)
        trainer = AtrTrainer(model=model, args=args, train_dataset=features["train"], objective=objective,
                             processing_class=processor, callbacks=[refresh])
    """

    def __init__(
        self,
        objective: Any,
        processor: Any,
        dataset: Any,
        *,
        every_epochs: int | None = DEFAULT_REFRESH_EPOCHS,
        every_steps: int | None = None,
        refresh: bool = True,
        captions: str = "all",
        languages: Sequence[str] | None = None,
        batch_size: int = 64,
        drift_queries: int | None = 1024,
        show_progress: bool = True,
        seed: int = 0,
    ) -> None:
        if not hasattr(objective, "knowledge_base"):
            raise TypeError(
                f"KnowledgeBaseRefreshCallback needs an objective with a `knowledge_base` attribute (the 'ask' "
                f"objective), got {type(objective).__name__}."
            )
        for name, value in (("every_epochs", every_epochs), ("every_steps", every_steps)):
            if value is not None and not (isinstance(value, int) and value >= 1):
                raise ValueError(
                    f"KnowledgeBaseRefreshCallback: `{name}` must be a positive int or None, got {value!r}."
                )
        if refresh and every_epochs is None and every_steps is None:
            raise ValueError(
                "KnowledgeBaseRefreshCallback: with refresh=True give `every_epochs` or `every_steps` "
                "(or pass refresh=False for a static base)."
            )
        self.objective = objective
        self.processor = processor
        self.dataset = dataset
        self.every_epochs = every_epochs
        self.every_steps = every_steps
        self.refresh = refresh
        self.captions = captions
        self.languages = languages
        self.batch_size = batch_size
        self.drift_queries = drift_queries
        self.show_progress = show_progress
        self.seed = seed
        self.history: list[dict[str, float]] = []

    def build(self, model: Any, *, show_progress: bool | None = None) -> KnowledgeBase:
        """Encode the source with ``model`` (this rank's shard when distributed) and build the shared base."""
        show_progress = self.show_progress if show_progress is None else show_progress
        distributed = is_distributed()
        # Pairs are clip-major, so the shards gathered in rank order hold the whole dataset's pairs in order.
        audio_ids = pair_audio_ids(self.dataset, captions=self.captions, languages=self.languages)
        dataset = self.dataset
        if distributed:
            dataset = dataset.shard(num_shards=dist.get_world_size(), index=dist.get_rank(), contiguous=True)
            show_progress = show_progress and dist.get_rank() == 0
        audio_embeds, text_embeds = encode_pairs(
            model,
            self.processor,
            dataset,
            captions=self.captions,
            languages=self.languages,
            batch_size=self.batch_size,
            show_progress=show_progress,
        )
        if not distributed:
            return KnowledgeBase.from_embeddings(
                audio_embeds,
                text_embeds,
                audio_ids=audio_ids,
                num_prototypes=self.objective.num_prototypes,
                seed=self.seed,
            )
        audio_embeds, text_embeds = all_gather_rows(audio_embeds), all_gather_rows(text_embeds)
        # k-means on rank 0 only, then broadcast: every rank must hold bit-identical prototypes.
        prototypes = (None, None)
        if dist.get_rank() == 0:
            prototypes = prototype_pairs(
                audio_embeds, text_embeds, self.objective.num_prototypes, seed=self.seed
            )
        dim = audio_embeds.shape[1]
        return KnowledgeBase(
            audio_embeds,
            text_embeds,
            *(broadcast_rows(rows, dim) for rows in prototypes),
            fine_audio_ids=audio_ids,
        )

    def _replace(self, model: Any, state: Any, reason: str) -> None:
        started = time.perf_counter()
        previous = self.objective.knowledge_base
        fresh = self.build(model)
        record: dict[str, float] = {"step": state.global_step, "epoch": float(state.epoch or 0.0)}
        if previous is not None and previous.num_pairs == fresh.num_pairs:
            record["kb_drift"] = representation_drift(
                previous, fresh, max_queries=self.drift_queries, seed=self.seed
            )
        record["kb_build_seconds"] = time.perf_counter() - started
        self.objective.knowledge_base = fresh
        self.history.append(record)
        state.log_history.append(dict(record))
        logger.info(
            f"ASK knowledge base {reason} at step {state.global_step}: {fresh.num_pairs} pairs, "
            f"{fresh.num_prototypes} prototypes"
            + (f", drift (ASK Eq. 4) {record['kb_drift']:.6g}" if "kb_drift" in record else "")
        )

    def on_train_begin(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ) -> None:
        if self.objective.knowledge_base is not None:
            return
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}" / KNOWLEDGE_BASE_NAME
        if state.global_step > 0 and saved.is_file():
            # Resuming: continue with the base the interrupted run had, not one encoded by the restored model.
            self.objective.knowledge_base = KnowledgeBase.load(saved)
            return
        self._replace(model, state, "built")

    def on_save(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.objective.knowledge_base is not None and state.is_world_process_zero and checkpoint.is_dir():
            self.objective.knowledge_base.save(checkpoint / KNOWLEDGE_BASE_NAME)

    def on_epoch_end(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ):
        if not self.refresh or self.every_epochs is None or self._finished(state):
            return
        if round(state.epoch or 0.0) % self.every_epochs == 0:
            self._replace(model, state, "refreshed")

    def on_step_end(
        self, args: TrainingArguments, state: Any, control: Any, model: Any = None, **kwargs: Any
    ):
        if not self.refresh or self.every_steps is None or self._finished(state):
            return
        if state.global_step % self.every_steps == 0:
            self._replace(model, state, "refreshed")

    def _finished(self, state: Any) -> bool:
        """No refresh after the last step (nothing would train on it) nor twice at one step (epoch and step periods)."""
        already_fresh = bool(self.history) and self.history[-1]["step"] == state.global_step
        return already_fresh or (state.max_steps > 0 and state.global_step >= state.max_steps)


class ModelCardCallback(TrainerCallback):
    """Collects what the model card needs during training into ``model.model_card_data``.

    Records the training data name and provenance, the Trainer's hyperparameters (learning rate, batch size,
    epochs, seed), the last evaluation metrics, the number of steps and epochs done and the Trainer's
    ``log_history`` (for the training curves); a model saved at the end of training (``trainer.save_model()``
    → ``save_pretrained``) then gets a card with them.

    Args:
        training_data: name or Hub id of the training corpus.
        eval_dataset: name of the evaluation corpus, if different.
        training_provenance: the training data's provenance (:func:`~hf_atr.data.schema.corpus_provenance`:
            corpus, release, clips found, filters such as the overlap filter); :class:`~hf_atr.AtrTrainer`
            fills it from its training dataset when not given.
    """

    def __init__(
        self,
        training_data: str | None = None,
        eval_dataset: str | None = None,
        training_provenance: Mapping[str, Any] | None = None,
    ) -> None:
        self.training_data = training_data
        self.eval_dataset = eval_dataset
        self.training_provenance = training_provenance

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        data = card_data(model)
        # The state's own list, which the Trainer and callbacks append to: the card draws it as it stands.
        data["log_history"] = state.log_history
        data["training_data"] = self.training_data
        data["eval_dataset"] = self.eval_dataset
        data["training_provenance"] = self.training_provenance
        data["hyperparameters"] = {
            "learning_rate": args.learning_rate,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "world_size": args.world_size,
            "num_train_epochs": args.num_train_epochs,
            "max_steps": args.max_steps,
            "lr_scheduler_type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
            "warmup_steps": args.warmup_steps,
            "weight_decay": args.weight_decay,
            "seed": args.seed,
            "dataloader_num_workers": args.dataloader_num_workers,
        }

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        if model is not None and metrics:
            data = card_data(model)
            data["eval_metrics"] = normalize_metric_names(metrics)
            data["log_history"] = state.log_history

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            data = card_data(model)
            data["global_step"] = state.global_step
            data["epoch"] = state.epoch
