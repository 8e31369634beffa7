"""Gathering a batch across processes so that objectives see the global batch (global negatives).

Every process gathers the embeddings of all processes *with gradient* and evaluates the objective on
the whole global batch, so the loss is the same on every rank. The backward of the gather sums the
gradients that all ranks send to a rank's own rows; DDP then averages parameter gradients over the
``W`` ranks, so the update equals the single-process update on the global batch (``W · g / W``).
This is what OT objectives need (the plan is a property of the whole batch) and it makes a
``W``-process run reproduce a one-process run with the same global batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather as all_gather_with_grad


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``(n_rank, ...)`` rows in rank order, keeping the autograd graph.

    Ranks may hold different numbers of rows (the last batch of an epoch): rows are padded to the
    largest count for the collective and the padding is dropped afterwards.
    """
    counts = [int(count) for count in gather_objects([tensor.shape[0]])]
    padded = tensor
    if len(set(counts)) > 1:
        padding = tensor.new_zeros((max(counts) - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, padding])
    with warnings.catch_warnings():
        # Deprecated in favour of functional collectives, whose backward needs reduce_scatter, which gloo
        # (CPU) lacks; this one sums gradients with all-to-all on gloo and reduce-scatter on NCCL.
        warnings.simplefilter("ignore", FutureWarning)
        pieces = all_gather_with_grad(padded.contiguous())
    return torch.cat([piece[:count] for piece, count in zip(pieces, counts)])


def gather_objects(values: list[Any]) -> list[Any]:
    """Concatenate every rank's Python list, in rank order (e.g. ``audio_ids``)."""
    gathered: list[list[Any]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, list(values))
    return [value for rank_values in gathered for value in rank_values]


def gather_batch_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Gather the objective's batch metadata: lists as objects, tensors by rows (no gradient needed).

    Scalars (``captions_per_audio``) are the same on every rank and kept as they are.
    """
    gathered: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, (int, float, str)):
            gathered[key] = value
        elif isinstance(value, torch.Tensor):
            gathered[key] = torch.tensor(
                gather_objects(value.tolist()), device=value.device, dtype=value.dtype
            )
        else:
            gathered[key] = gather_objects(list(value))
    return gathered
