from __future__ import annotations

import math

import pytest
import torch
from tiny_models import make_model

from hf_atr.objectives import build_objective


def _brute_force_nt_xent(audio, text, audio_ids, scale, audio_scale=None):
    """Direct loops: each row's softmax over its candidates, excluding other copies of the same clip.

    ``scale`` multiplies the text→audio rows, ``audio_scale`` (default ``scale``) the audio→text rows."""
    n = audio.shape[0]
    total = 0.0
    for i in range(n):
        for anchor, candidates, factor in ((text[i], audio, scale), (audio[i], text, audio_scale or scale)):
            logits = [
                factor * float(anchor @ candidates[j])
                for j in range(n)
                if j == i or audio_ids[j] != audio_ids[i]
            ]
            positive = factor * float(anchor @ candidates[i])
            total += -(positive - math.log(sum(math.exp(v) for v in logits)))
    return total / (2 * n)


@pytest.mark.parametrize("audio_ids", [["a", "b", "c", "d", "e"], ["a", "b", "a", "c", "b"]])
def test_matches_brute_force_including_duplicate_clips(audio_ids):
    torch.manual_seed(0)
    audio = torch.nn.functional.normalize(torch.randn(5, 8, dtype=torch.float64), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(5, 8, dtype=torch.float64), dim=-1)
    objective = build_objective({"name": "contrastive", "temperature": 0.1})
    output = objective(audio, text, batch={"audio_ids": audio_ids})
    assert output.loss.item() == pytest.approx(_brute_force_nt_xent(audio, text, audio_ids, 10.0), rel=1e-10)
    assert set(output.logs) == {"loss_t2a", "loss_a2t"}


def test_duplicates_are_not_negatives():
    """Two rows of the same clip with identical embeddings: masking keeps the loss at its minimum."""
    audio = torch.eye(3, dtype=torch.float64)[[0, 0, 1]]
    objective = build_objective({"name": "contrastive", "temperature": 0.01})
    masked = objective(audio, audio.clone(), batch={"audio_ids": ["x", "x", "y"]}).loss
    unmasked = objective(audio, audio.clone(), batch={"audio_ids": ["x", "x2", "y"]}).loss
    assert masked.item() < 1e-6
    assert unmasked.item() > 0.3


def test_learnable_temperature_comes_from_the_model_and_receives_gradient():
    model = make_model()
    audio = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    objective = build_objective({"name": "contrastive"})
    loss = objective(audio, text, model=model).loss
    expected = _brute_force_nt_xent(
        audio.double(), text.double(), list("abcd"), math.exp(model.config.logit_scale_init)
    )
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert model.scoring_head.logit_scale.grad is not None


def test_two_logit_scales_weight_their_own_direction():
    """CLAP's scales: logit_scale_t for text→audio, the audio scale (logit_scale_a) for audio→text."""
    model = make_model(separate_logit_scales=True)
    with torch.no_grad():
        model.scoring_head.logit_scale.fill_(math.log(8.0))
        model.scoring_head.audio_logit_scale.fill_(math.log(20.0))
    audio = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    loss = build_objective({"name": "contrastive"})(audio, text, model=model).loss
    expected = _brute_force_nt_xent(audio.double(), text.double(), list("abcd"), 8.0, audio_scale=20.0)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert model.scoring_head.audio_logit_scale.grad is not None


@pytest.mark.parametrize("separate_logit_scales", [False, True])
def test_masked_duplicates_leave_the_scale_gradients_finite(separate_logit_scales):
    model = make_model(separate_logit_scales=separate_logit_scales)
    audio = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    objective = build_objective({"name": "contrastive"})
    objective(audio, text, batch={"audio_ids": ["a", "a", "b", "c"]}, model=model).loss.backward()
    head = model.scoring_head
    for parameter in [head.logit_scale, *([head.audio_logit_scale] if separate_logit_scales else [])]:
        assert torch.isfinite(parameter.grad).all() and parameter.grad != 0


def test_fixed_temperature_ignores_the_model_scale():
    model = make_model()
    audio, text = torch.randn(3, 16, requires_grad=True), torch.randn(3, 16)
    objective = build_objective({"name": "contrastive", "temperature": 0.5})
    objective(audio, text, model=model).loss.backward()
    assert model.scoring_head.logit_scale.grad is None


@pytest.mark.parametrize("temperature", [0, -0.1, float("inf"), "0.1"])
def test_bad_temperature_is_rejected(temperature):
    with pytest.raises(ValueError, match="`temperature` must be a positive number"):
        build_objective({"name": "contrastive", "temperature": temperature})


def test_shape_errors_are_explained():
    objective = build_objective({"name": "contrastive"})
    with pytest.raises(ValueError, match="expects audio_embeds and text_embeds of shape \\(batch, dim\\)"):
        objective(torch.randn(2, 4), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="audio_embeds has 2 rows but text_embeds has 3"):
        objective(torch.randn(2, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match="batch\\['audio_ids'\\] has 1 entries but the batch has 2 rows"):
        objective(torch.randn(2, 4), torch.randn(2, 4), batch={"audio_ids": ["a"]})
