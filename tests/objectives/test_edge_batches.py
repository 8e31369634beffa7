"""Every registered objective handles a batch of one pair and a batch made only of one clip's captions."""

from __future__ import annotations

import math

import pytest
import torch
from objective_inputs import build_with_inputs, objective_embeddings
from tiny_models import make_model

from hf_atr.objectives.registry import available_objectives, default_scoring

DIM = 16


@pytest.mark.parametrize("name", available_objectives())
@pytest.mark.parametrize("audio_ids", [["only"], ["same"] * 4], ids=["one-pair", "all-duplicates"])
def test_degenerate_batches_give_finite_losses_and_gradients(name, audio_ids):
    model = make_model(scoring=default_scoring({"name": name}), projection_dim=DIM)
    audio, text = objective_embeddings(name, len(audio_ids), DIM)
    audio, text = audio.requires_grad_(), text.requires_grad_()
    output = build_with_inputs(name, DIM)(audio, text, batch={"audio_ids": audio_ids}, model=model)
    assert math.isfinite(output.loss.item())
    output.loss.backward()
    for tensor in (audio, text):
        assert tensor.grad is not None, f"{name}: the loss does not depend on the embeddings"
        assert torch.isfinite(tensor.grad).all()
    assert all(math.isfinite(value) for value in output.logs.values())
