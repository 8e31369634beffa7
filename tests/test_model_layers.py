"""The dual encoder's building blocks against brute force: pooling, projection heads, the tower's mask name."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_model
from torch import nn

from hf_atr.model_layers import (
    AtrNormedProjection,
    AtrProjectionMLP,
    audio_mask_argument,
    encoder_only,
    frozen_context,
    pool_hidden_states,
    tower_projection,
)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_pooling_leaves_padding_out_like_a_loop_over_rows(pooling):
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    lengths = [5, 2, 1]
    mask = torch.tensor([[1] * length + [0] * (5 - length) for length in lengths])
    pooled = pool_hidden_states(hidden, mask, pooling, pooler_output=None)
    for row, length in enumerate(lengths):
        states = hidden[row, :length]
        expected = {"mean": states.mean(0), "max": states.max(0).values, "cls": states[0]}[pooling]
        torch.testing.assert_close(pooled[row], expected)
    unmasked = pool_hidden_states(hidden, None, pooling, pooler_output=None)
    expected_all = {"mean": hidden.mean(1), "max": hidden.max(1).values, "cls": hidden[:, 0]}[pooling]
    torch.testing.assert_close(unmasked, expected_all)


def test_pooler_pooling_returns_the_backbone_pooler_and_names_its_absence():
    pooler_output = torch.randn(2, 4)
    assert pool_hidden_states(torch.randn(2, 3, 4), None, "pooler", pooler_output) is pooler_output
    with pytest.raises(ValueError, match="pooling='pooler' but this backbone returns no `pooler_output`"):
        pool_hidden_states(torch.randn(2, 3, 4), None, "pooler", None)


def test_projections_follow_the_config():
    model = make_model()
    config = model.config
    linear = tower_projection(config, 6)
    assert (
        isinstance(linear, nn.Linear)
        and linear.bias is None
        and linear.weight.shape == (config.projection_dim, 6)
    )
    config.projection, config.projection_hidden_act, config.projection_layer_norm = "mlp", "relu", True
    normed = tower_projection(config, 6)
    assert isinstance(normed, AtrNormedProjection) and isinstance(normed.proj, AtrProjectionMLP)
    states = torch.randn(3, 6)
    mlp = normed.proj
    layer_normed = nn.functional.layer_norm(
        states, (6,), normed.layer_norm.weight, normed.layer_norm.bias, 1e-6
    )
    expected = mlp.linear2(torch.relu(mlp.linear1(layer_normed)))
    torch.testing.assert_close(normed(states), expected)


def test_the_mask_goes_under_the_name_the_tower_takes():
    class PaddingMaskTower(nn.Module):
        def forward(self, input_values, padding_mask=None):
            return input_values

    class BothTower(nn.Module):
        def forward(self, input_values, attention_mask=None, padding_mask=None):
            return input_values

    model = make_model()
    assert audio_mask_argument(PaddingMaskTower()) == "padding_mask"
    assert audio_mask_argument(BothTower()) == "attention_mask"
    assert audio_mask_argument(model.audio_model) == "attention_mask"
    assert encoder_only(model.audio_model) is model.audio_model


def test_a_frozen_tower_records_no_graph():
    weight = torch.ones(2, requires_grad=True)
    with frozen_context(True):
        assert not (weight * 2).requires_grad
    with frozen_context(False):
        assert (weight * 2).requires_grad
