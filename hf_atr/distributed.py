"""Every collective of hf-atr: gathering a batch across processes so that objectives see the global batch
(global negatives), averaging the gradients of gradient-cached steps, and moving knowledge-base rows between
ranks.

Every process gathers the embeddings of all processes *with gradient* and evaluates the objective on
the whole global batch, so the loss is the same on every rank. The backward of the gather sums the
gradients that all ranks send to a rank's own rows; DDP then averages parameter gradients over the
``W`` ranks, so the update equals the single-process update on the global batch (``W · g / W``).
This is what OT objectives need (the plan is a property of the whole batch, DART's channel reliabilities
a statistic of it) and it makes a ``W``-process run reproduce a one-process run with the same global batch.
Objectives themselves never communicate: they compute on the batch they are given.

Rows are exchanged with tensor collectives (padded to the longest shard); only :func:`gather_objects`
(batch metadata such as ``audio_ids``) pickles.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather as all_gather_with_grad


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world_size() -> tuple[int, int]:
    """``(rank, number of processes)``; ``(0, 1)`` outside a process group."""
    if not is_distributed():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def wait_for_all() -> None:
    """Block until every process reaches this point (e.g. until rank 0 has written a file); no-op alone."""
    if is_distributed():
        dist.barrier()


def gather_shards(rows: torch.Tensor, payload: Any) -> tuple[torch.Tensor, list[Any]]:
    """Every rank's ``(n_rank, dim)`` rows concatenated in rank order, and every rank's ``payload`` (a
    picklable object describing its rows), as a list in rank order. No gradient.

    Alone (no process group) this is ``(rows, [payload])``: the same code serves one process and many.
    """
    if not is_distributed():
        return rows.detach().cpu(), [payload]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return all_gather_rows(rows), gathered


def _collective_device() -> torch.device:
    """NCCL only moves CUDA tensors; gloo moves CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _row_counts(count: int) -> list[int]:
    """Every rank's number of rows, in rank order."""
    local = torch.tensor([count], device=_collective_device())
    counts = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, local)
    return [int(rank_count.item()) for rank_count in counts]


def _padded(rows: torch.Tensor, length: int) -> torch.Tensor:
    """``rows`` ``(n, ...)`` followed by zero rows up to ``length`` (the collectives need equal shapes)."""
    if rows.shape[0] == length:
        return rows
    return torch.cat([rows, rows.new_zeros((length - rows.shape[0], *rows.shape[1:]))])


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``(n_rank, ...)`` rows in rank order, keeping the autograd graph.

    Ranks may hold different numbers of rows (the last batch of an epoch): rows are padded to the
    largest count for the collective and the padding is dropped afterwards.
    """
    counts = _row_counts(tensor.shape[0])
    padded = _padded(tensor, max(counts))
    with warnings.catch_warnings():
        # Deprecated in favour of functional collectives, whose backward needs reduce_scatter, which gloo
        # (CPU) lacks; this one sums gradients with all-to-all on gloo and reduce-scatter on NCCL.
        warnings.simplefilter("ignore", FutureWarning)
        pieces = all_gather_with_grad(padded.contiguous())
    return torch.cat([piece[:count] for piece, count in zip(pieces, counts)])


def all_gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """Every rank's ``(n_rank, dim)`` rows concatenated in rank order (``n_rank`` may differ), on the CPU.

    No gradient: for encoded knowledge-base pairs, not for training embeddings (:func:`gather_rows`).
    """
    counts = _row_counts(rows.shape[0])
    padded = _padded(rows.detach().to(_collective_device()), max(counts))
    gathered = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(gathered, padded)
    return torch.cat([shard[:count] for shard, count in zip(gathered, counts)]).cpu()


def broadcast_rows(rows: torch.Tensor | None, dim: int) -> torch.Tensor:
    """Rank 0's ``(n, dim)`` float32 rows on every rank (other ranks pass None), on the CPU."""
    device = _collective_device()
    count = torch.tensor([rows.shape[0] if rows is not None else 0], device=device)
    dist.broadcast(count, src=0)
    if dist.get_rank() == 0:
        buffer = rows.to(device=device, dtype=torch.float32).contiguous()
    else:
        buffer = torch.empty(int(count.item()), dim, dtype=torch.float32, device=device)
    dist.broadcast(buffer, src=0)
    return buffer.cpu()


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


def average_gradients(parameters: Sequence[torch.nn.Parameter]) -> None:
    """Average the ``.grad`` of ``parameters`` over ranks in place, as DDP's reducer does (one flat all-reduce).

    For steps whose backward ran outside DDP's hooks (gradient caching runs the encoders' backward chunk by chunk
    under ``no_sync``). A parameter without a gradient on some rank counts as zero there; one without a gradient on
    every rank keeps ``grad=None`` (so optimizers skip it, as after a DDP step that never used it).
    """
    parameters = [parameter for parameter in parameters if parameter.requires_grad]
    if not parameters:
        return
    device = _collective_device()
    present = torch.tensor(
        [parameter.grad is not None for parameter in parameters], dtype=torch.int32, device=device
    )
    dist.all_reduce(present)
    reduced = [parameter for parameter, count in zip(parameters, present.tolist()) if count > 0]
    if not reduced:
        return
    for parameter in reduced:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    # One buffer per dtype: the collective needs a single dtype.
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for parameter in reduced:
        by_dtype.setdefault(parameter.grad.dtype, []).append(parameter)
    world_size = dist.get_world_size()
    for group in by_dtype.values():
        flat = torch.cat([parameter.grad.reshape(-1) for parameter in group]).to(device)
        dist.all_reduce(flat)
        flat /= world_size
        offset = 0
        for parameter in group:
            count = parameter.grad.numel()
            parameter.grad.copy_(flat[offset : offset + count].view_as(parameter.grad))
            offset += count
