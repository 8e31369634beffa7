"""One gradient-cached training step of :class:`~hf_atr.AtrTrainer` (``embedding_chunk_size``).

The batch stays where the collator left it and moves to the device chunk by chunk
(:func:`~hf_atr.training.grad_cache.cached_embedding_backward`): the encoders see ``embedding_chunk_size`` clips
at a time, the objective the whole (global) batch. The objective's backward goes through ``accelerator.backward``
(so fp16 gradient scaling applies to every gradient), the encoders' backward runs under ``no_sync`` and, under
several processes, the gradients are averaged once at the end of the accumulation cycle, as DDP would.
"""

from __future__ import annotations

from typing import Any

import torch

from ..distributed import average_gradients, is_distributed
from ..objectives.batch import CAPTIONS_PER_AUDIO, NEGATIVE_AUDIO, pop_batch_metadata
from .grad_cache import cached_embedding_backward, split_batch


def cached_training_step(trainer: Any, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
    """The step's loss (divided by the gradient-accumulation steps), its gradients accumulated in ``model``.

    Args:
        trainer: the :class:`~hf_atr.AtrTrainer` (its ``embedding_chunk_size``, accelerator, device inputs and
            objective loss).
        model: the (wrapped) model being trained.
        inputs: the collator's batch, on the host.

    Raises:
        ValueError: a batch with unpaired audio rows (moment training's negative crops), which chunks by caption
            row cannot split.
    """
    model.train()
    if hasattr(trainer.optimizer, "train") and callable(trainer.optimizer.train):
        trainer.optimizer.train()
    metadata = trainer._prepare_input(pop_batch_metadata(dict(inputs)))
    if NEGATIVE_AUDIO in metadata:
        raise ValueError(
            "embedding_chunk_size (gradient caching) chunks a batch by its caption rows, and this batch has "
            "unpaired audio rows (moment training's negative crops): train it without embedding_chunk_size."
        )
    model_inputs = {key: value for key, value in inputs.items() if key not in metadata}
    chunks = split_batch(model_inputs, trainer.embedding_chunk_size, int(metadata.get(CAPTIONS_PER_AUDIO, 1)))

    def embed(chunk: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = model(**trainer._device_audio_inputs(trainer._prepare_input(chunk)))
        return outputs.audio_embeds, outputs.text_embeds

    def objective_backward(audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        with trainer.compute_loss_context_manager():
            loss = trainer._objective_loss(model, audio_embeds, text_embeds, metadata)
        trainer.accelerator.backward(loss / trainer.current_gradient_accumulation_steps)
        return loss.detach()

    with trainer.accelerator.no_sync(model):
        loss = cached_embedding_backward(
            embed,
            chunks,
            objective_backward,
            model=trainer.accelerator.unwrap_model(model),
            devices=[trainer.args.device],
        )
    if is_distributed() and trainer.accelerator.sync_gradients:
        average_gradients(list(model.parameters()))
    return loss / trainer.current_gradient_accumulation_steps


__all__ = ["cached_training_step"]
