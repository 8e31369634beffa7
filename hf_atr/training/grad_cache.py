"""Gradient caching: the objective sees a whole large batch, the encoders hold one chunk's activations at a time.

The GradCache method (Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup",
RepL4NLP 2021, arXiv:2101.06983). A retrieval loss couples every row of the batch, but its gradient with respect
to the parameters factors through the embeddings, ``∂L/∂θ = Σ_i (∂L/∂e_i)(∂e_i/∂θ)``, and each ``e_i`` depends on
its own inputs only. So:

1. embed the batch chunk by chunk without an autograd graph, recording each chunk's random state;
2. run the objective on all the embeddings (leaf tensors; under several processes, gathered first) and
   backpropagate it to get ``∂L/∂e`` (and the gradients of the scoring head, which the objective reads directly);
3. embed each chunk again with a graph, replaying its random state (same dropout masks, same on-device feature
   noise), and backpropagate the chunk's rows of ``∂L/∂e``.

The parameter gradients equal those of one backward through the whole batch up to floating-point summation
order; memory holds the embeddings of the batch, the objective's own buffers and one chunk's activations.

Batch normalisation is the exception: normalising by a chunk's statistics is not normalising by the batch's, so
with BatchNorm backbones (HTS-AT, PANNs) chunked training is a different computation from whole-batch training.
The first pass leaves the running statistics as it found them (:func:`frozen_batch_norm_statistics`), so that
they are updated once per chunk, by the second pass, as in chunked training without caching.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

TEXT_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
"""Batch entries with one row per caption (``batch * K`` rows for K captions per clip); every other tensor entry
has one row per clip."""


@dataclass
class RandomState:
    """The CPU generator's state and those of the CUDA devices in use, to replay a chunk's random draws."""

    cpu: torch.Tensor
    cuda: dict[int, torch.Tensor]

    @classmethod
    def capture(cls, devices: Sequence[torch.device]) -> RandomState:
        cuda_indices = sorted({device.index or 0 for device in devices if device.type == "cuda"})
        return cls(
            cpu=torch.get_rng_state(),
            cuda={index: torch.cuda.get_rng_state(index) for index in cuda_indices},
        )

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for index, state in self.cuda.items():
            torch.cuda.set_rng_state(state, index)


@contextlib.contextmanager
def frozen_batch_norm_statistics(model: nn.Module) -> Iterator[None]:
    """Leave the running statistics of ``model``'s batch-norm layers (and their batch counters) as they were.

    Inside, batch-norm layers in training mode still normalise by the batch's statistics; only the update of
    ``running_mean``, ``running_var`` and ``num_batches_tracked`` is undone on exit.
    """
    layers = [
        module
        for module in model.modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm)
        and module.track_running_stats
        and module.training
    ]
    saved = [
        {name: buffer.clone() for name, buffer in layer.named_buffers(recurse=False)} for layer in layers
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for layer, buffers in zip(layers, saved):
                for name, value in buffers.items():
                    getattr(layer, name).copy_(value)


def _rows(value: Any, rows: slice) -> Any:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value[rows]
    if isinstance(value, Mapping):
        return {name: _rows(item, rows) for name, item in value.items()}
    return value


def check_chunk_size(chunk_size: Any) -> int:
    """``chunk_size`` if it is a positive int, else a ``ValueError`` naming it."""
    if not (isinstance(chunk_size, int) and not isinstance(chunk_size, bool) and chunk_size >= 1):
        raise ValueError(f"embedding_chunk_size must be a positive int, got {chunk_size!r}.")
    return chunk_size


def split_batch(
    inputs: Mapping[str, Any], chunk_size: int, captions_per_audio: int = 1
) -> list[dict[str, Any]]:
    """Split a batch of model inputs into chunks of at most ``chunk_size`` clips.

    Tensors and NumPy arrays (and dicts of them, e.g. the waveform collator's random choices; its lengths and crop
    flags are NumPy, kept on the host) are cut along their first dimension: the caption entries (:data:`TEXT_INPUT_NAMES`) by ``captions_per_audio`` rows per clip, all others
    by one row per clip; other values are shared by every chunk.

    Args:
        inputs: model inputs without the objective's metadata, e.g. ``input_values: (batch, ...)``,
            ``input_ids: (batch * captions_per_audio, seq)``.
        chunk_size: clips per chunk (≥ 1).
        captions_per_audio: ``K``, the caption rows per clip (multilingual batches).

    Returns:
        Chunks in batch order; concatenating their embeddings gives the batch's.
    """
    check_chunk_size(chunk_size)
    if "input_ids" not in inputs:
        raise ValueError(f"The batch has no 'input_ids' to split (keys: {sorted(inputs)}).")
    caption_rows = inputs["input_ids"].shape[0]
    if caption_rows % captions_per_audio:
        raise ValueError(
            f"The batch has {caption_rows} caption rows, not a multiple of captions_per_audio={captions_per_audio}."
        )
    clips = caption_rows // captions_per_audio
    chunks = []
    for start in range(0, clips, chunk_size):
        stop = min(start + chunk_size, clips)
        clip_rows = slice(start, stop)
        text_rows = slice(start * captions_per_audio, stop * captions_per_audio)
        chunks.append(
            {
                name: _rows(value, text_rows if name in TEXT_INPUT_NAMES else clip_rows)
                for name, value in inputs.items()
            }
        )
    return chunks


def cached_embedding_backward(
    embed: Callable[[Mapping[str, Any]], tuple[torch.Tensor, torch.Tensor]],
    chunks: Sequence[Mapping[str, Any]],
    objective_backward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None],
    *,
    model: nn.Module,
    devices: Sequence[torch.device],
) -> torch.Tensor | None:
    """One gradient-cached step: the gradients of the objective on all chunks, accumulated into ``.grad``.

    Args:
        embed: chunk → ``(audio_embeds (n, dim), text_embeds (n * K, dim))`` (the model's forward, including any
            on-device feature computation, whose random draws are replayed too).
        chunks: the batch in chunks (:func:`split_batch`).
        objective_backward: ``(audio_embeds (batch, dim), text_embeds (batch * K, dim))``, leaf tensors that
            require grad → computes the loss, calls backward on it (scaled as the caller's optimizer expects) and
            returns it detached; or returns ``None`` to skip the step (no gradient at all).
        model: the module whose batch-norm statistics the first pass must not move.
        devices: devices whose random generators the chunks draw from (the CPU's is always replayed).

    Returns:
        The loss ``objective_backward`` returned, or ``None`` when it skipped the step.
    """
    states, audio_parts, text_parts = [], [], []
    with torch.no_grad(), frozen_batch_norm_statistics(model):
        for chunk in chunks:
            states.append(RandomState.capture(devices))
            audio_embeds, text_embeds = embed(chunk)
            audio_parts.append(audio_embeds)
            text_parts.append(text_embeds)
    after_first_pass = RandomState.capture(devices)
    audio_embeds = torch.cat(audio_parts).requires_grad_()
    text_embeds = torch.cat(text_parts).requires_grad_()
    loss = objective_backward(audio_embeds, text_embeds)
    if loss is not None:
        audio_offsets = _offsets([part.shape[0] for part in audio_parts])
        text_offsets = _offsets([part.shape[0] for part in text_parts])
        for chunk, state, audio_rows, text_rows in zip(chunks, states, audio_offsets, text_offsets):
            state.restore()
            chunk_audio, chunk_text = embed(chunk)
            outputs, gradients = [], []
            for output, leaf, rows in (
                (chunk_audio, audio_embeds, audio_rows),
                (chunk_text, text_embeds, text_rows),
            ):
                if output.requires_grad and leaf.grad is not None:
                    outputs.append(output)
                    gradients.append(leaf.grad[rows].to(output.dtype))
            if outputs:
                torch.autograd.backward(outputs, gradients)
    after_first_pass.restore()
    return loss


def _offsets(sizes: Sequence[int]) -> list[slice]:
    slices, start = [], 0
    for size in sizes:
        slices.append(slice(start, start + size))
        start += size
    return slices
