"""Inputs for every registered objective, so that tests iterating over the registry cover each one.

Pair objectives take ``(batch, dim)`` caption embeddings; the multilingual ones ``(batch, K, dim)``
(:data:`CAPTIONS_PER_CLIP`); ``ask`` is given a knowledge base. A newly registered objective with other
needs fails these tests until it is described here, rather than being skipped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.objectives.registry import Objective, build_objective

CAPTIONS_PER_CLIP = {"kcl": 3, "cacl": 2}
"""Languages per clip of the multilingual objectives (CACL: English, then one other language)."""


def unit_rows(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


def objective_embeddings(
    name: str, batch_size: int, dim: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit ``audio (batch, dim)`` and captions ``(batch, dim)`` or ``(batch, K, dim)``, loosely paired.

    Captions are noisy copies of their audio (cosine about 0.45), so that every objective, triplet's hinge
    included, has a non-zero gradient.
    """
    audio = unit_rows((batch_size, dim), seed)
    languages = CAPTIONS_PER_CLIP.get(name)
    shape = (batch_size, dim) if languages is None else (batch_size, languages, dim)
    noise = unit_rows(shape, seed + 1)
    text = F.normalize((audio if languages is None else audio[:, None, :]) + 2.0 * noise, dim=-1)
    return audio, text


def build_with_inputs(name: str, dim: int, seed: int = 0) -> Objective:
    """``build_objective({"name": name})`` with what it needs to run on its full path (ASK: a knowledge base)."""
    objective = build_objective({"name": name})
    if name == "ask":
        audio = unit_rows((30, dim), seed + 10)
        text = F.normalize(audio + unit_rows((30, dim), seed + 11), dim=-1)
        objective.knowledge_base = KnowledgeBase.from_embeddings(
            audio, text, audio_ids=[f"kb{row // 2}" for row in range(30)], num_prototypes=4
        )
    return objective
