"""Worker for tests/objectives/test_sigmoid.py: the sigmoid loss of a 2-process global batch (importable by name, as
spawn needs)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from hf_atr.distributed import gather_batch_metadata, gather_rows
from hf_atr.objectives.registry import build_objective
from hf_atr.scoring_head import AtrScoringHead

ROWS_PER_RANK = (3, 2)  # unequal, like the last batch of an epoch
DIM = 4


def head_model() -> nn.Module:
    model = nn.Module()
    model.scoring_head = AtrScoringHead(
        "cosine", dim=DIM, logit_scale_init=math.log(10.0), bias_init=-10.0
    ).double()
    return model


def rank_rows(rank: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    generator = torch.Generator().manual_seed(100 + rank)
    rows = ROWS_PER_RANK[rank]
    audio = nn.functional.normalize(torch.randn(rows, DIM, generator=generator, dtype=torch.float64), dim=-1)
    text = nn.functional.normalize(
        audio + torch.randn(rows, DIM, generator=generator, dtype=torch.float64), dim=-1
    )
    audio_ids = [f"r{rank}c{row}" for row in range(rows)]
    if rank == 1:
        audio_ids[1] = "r0c0"  # the same clip as a row of the other rank: a positive across ranks
    return audio, text, audio_ids


def sigmoid_worker(rank: int, world_size: int, init_method: str, results) -> None:
    """``init_method``: a ``file://`` rendezvous (no port to pick, so parallel test workers cannot race for one)."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    try:
        audio, text, audio_ids = rank_rows(rank)
        audio.requires_grad_(True)
        text.requires_grad_(True)
        model = head_model()
        metadata = gather_batch_metadata({"audio_ids": audio_ids})
        output = build_objective({"name": "sigmoid"})(
            gather_rows(audio), gather_rows(text), batch=metadata, model=model
        )
        output.loss.backward()
        results[rank] = {
            "loss": output.loss.item(),
            "audio_grad": audio.grad.tolist(),
            "text_grad": text.grad.tolist(),
            "bias_grad": model.scoring_head.logit_bias.grad.item(),
        }
    finally:
        dist.destroy_process_group()
