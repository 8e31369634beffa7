"""Every registered objective handles a batch of one pair and a batch made only of one clip's captions."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import make_model

from hf_atr.objectives import available_objectives, build_objective

PAIR_OBJECTIVES = ["contrastive", "triplet", "iot", "iot_partial", "dart", "random_language", "ask"]


def _embeddings(batch_size: int, dim: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    audio = torch.nn.functional.normalize(torch.randn(batch_size, dim, generator=generator), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(batch_size, dim, generator=generator), dim=-1)
    return audio.requires_grad_(), text.requires_grad_()


@pytest.mark.parametrize("name", [name for name in PAIR_OBJECTIVES if name in available_objectives()])
@pytest.mark.parametrize("audio_ids", [["only"], ["same"] * 4], ids=["one-pair", "all-duplicates"])
def test_degenerate_batches_give_finite_losses_and_gradients(name, audio_ids):
    scoring = "euclidean" if name in ("iot", "iot_partial", "dart") else "cosine"
    model = make_model(scoring=scoring)
    audio, text = _embeddings(len(audio_ids))
    output = build_objective({"name": name})(audio, text, batch={"audio_ids": audio_ids}, model=model)
    assert math.isfinite(output.loss.item())
    output.loss.backward()
    for tensor in (audio, text):
        assert tensor.grad is None or torch.isfinite(tensor.grad).all()
    assert all(math.isfinite(value) for value in output.logs.values())
