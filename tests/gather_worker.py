"""Worker for tests/test_distributed.py (a module importable by name, as spawn needs)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hf_atr.distributed import gather_batch_metadata, gather_rows, is_distributed


def gather_worker(rank: int, world_size: int, init_method: str, results) -> None:
    """``init_method``: a ``file://`` rendezvous (no port to pick, so parallel test workers cannot race for one)."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    try:
        rows = 3 if rank == 0 else 2  # unequal, like the last batch of an epoch
        local = torch.full((rows, 2), float(rank + 1), requires_grad=True)
        gathered = gather_rows(local)
        weights = torch.arange(1, gathered.shape[0] + 1, dtype=torch.float32)[:, None]
        (gathered * weights).sum().backward()
        metadata = gather_batch_metadata(
            {
                "audio_ids": [f"r{rank}c{i}" for i in range(rows)],
                "caption_indices": torch.arange(rows),
                "k": 2,
            }
        )
        results[rank] = {
            "distributed": is_distributed(),
            "gathered": gathered.detach().tolist(),
            "grad": local.grad.tolist(),
            "audio_ids": metadata["audio_ids"],
            "caption_indices": metadata["caption_indices"].tolist(),
            "k": metadata["k"],
        }
    finally:
        dist.destroy_process_group()
