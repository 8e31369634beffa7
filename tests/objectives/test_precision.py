"""Every registered objective computes in float32 whatever the autocast state."""

from __future__ import annotations

import pytest
import torch
from objective_inputs import build_with_inputs, objective_embeddings
from tiny_models import make_model

from hf_atr.objectives.registry import Objective, ObjectiveOutput, available_objectives, build_objective

BATCH, DIM = 12, 16
AUDIO_IDS = [f"clip{row}" for row in range(BATCH - 2)] + ["clip0", "clip1"]  # two duplicate clips


@pytest.fixture(scope="module")
def models():
    return {
        scoring: make_model(scoring=scoring, projection_dim=DIM)
        for scoring in ("cosine", "euclidean", "mahalanobis")
    }


def embedding_gradients(objective, audio, text, model, *, autocast: bool):
    audio, text = audio.clone().requires_grad_(), text.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        output = objective(audio, text, batch={"audio_ids": AUDIO_IDS}, model=model)
    output.loss.backward()
    return output, torch.cat([audio.grad.flatten(), text.grad.flatten()])


@pytest.mark.parametrize("scoring", ["cosine", "euclidean", "mahalanobis"])
@pytest.mark.parametrize("name", available_objectives())
def test_gradient_under_bf16_autocast_equals_the_float32_gradient(name, scoring, models):
    model = models[scoring]
    with torch.no_grad():  # a non-trivial metric, so that the Mahalanobis head's matmuls matter
        if scoring == "mahalanobis":
            factor = torch.eye(DIM) + 0.3 * torch.randn(DIM, DIM, generator=torch.Generator().manual_seed(3))
            model.scoring_head.metric_matrix.copy_(factor @ factor.T)
    audio, text = objective_embeddings(name, BATCH, DIM)
    reference_output, reference = embedding_gradients(
        build_with_inputs(name, DIM), audio, text, model, autocast=False
    )
    output, under_autocast = embedding_gradients(
        build_with_inputs(name, DIM), audio, text, model, autocast=True
    )
    assert reference.abs().max() > 0, f"{name}: zero gradient, the comparison would prove nothing"
    assert output.loss.dtype == torch.float32
    assert (under_autocast - reference).norm() <= 1e-3 * reference.norm()
    assert output.loss.item() == pytest.approx(reference_output.loss.item(), rel=1e-5)


@pytest.mark.parametrize("name", available_objectives())
def test_bfloat16_embeddings_give_a_float32_loss_and_bfloat16_gradients(name, models):
    audio, text = objective_embeddings(name, BATCH, DIM)
    reference = build_with_inputs(name, DIM)(
        audio.bfloat16().float(), text.bfloat16().float(), model=models["cosine"]
    )
    audio_half = audio.bfloat16().requires_grad_()
    output = build_with_inputs(name, DIM)(audio_half, text.bfloat16(), model=models["cosine"])
    assert output.loss.dtype == torch.float32
    assert output.loss.item() == pytest.approx(reference.loss.item(), rel=1e-5)
    output.loss.backward()
    assert audio_half.grad.dtype == torch.bfloat16 and torch.isfinite(audio_half.grad).all()


@pytest.mark.parametrize("scoring", ["cosine", "mahalanobis"])
def test_a_bfloat16_model_head_scores_in_float32_with_both_logit_scales(scoring):
    """Both logit scales are exponentiated, and the metric applied, in float32: the loss equals that of a float32
    model holding the same (bfloat16-valued) parameters."""
    half = make_model(scoring=scoring, projection_dim=DIM, separate_logit_scales=True)
    with torch.no_grad():
        half.scoring_head.logit_scale.fill_(2.9)
        half.scoring_head.audio_logit_scale.fill_(4.1)
        if scoring == "mahalanobis":
            factor = torch.eye(DIM) + 0.3 * torch.randn(DIM, DIM, generator=torch.Generator().manual_seed(4))
            half.scoring_head.metric_matrix.copy_(factor @ factor.T)
    half = half.to(torch.bfloat16)
    full = make_model(scoring=scoring, projection_dim=DIM, separate_logit_scales=True)
    full.load_state_dict({name: value.float() for name, value in half.state_dict().items()})
    audio, text = objective_embeddings("contrastive", BATCH, DIM)
    losses = {}
    for precision, model in (("half", half), ("full", full)):
        objective = build_objective({"name": "contrastive"})
        losses[precision] = objective(audio, text, batch={"audio_ids": AUDIO_IDS}, model=model).loss
    assert half.scoring_head.scale().dtype == half.scoring_head.audio_scale().dtype == torch.float32
    assert losses["half"].dtype == torch.float32
    assert losses["half"].item() == pytest.approx(losses["full"].item(), rel=1e-6)


class _HalfPrecisionPlugin(Objective):
    """A plugin that would compute in whatever it is given: it records what it saw."""

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        self.seen = (audio_embeds.dtype, text_embeds.dtype, torch.is_autocast_enabled("cpu"))
        return ObjectiveOutput(loss=(audio_embeds @ text_embeds.T).diagonal().mean())


def test_plugins_get_float32_inputs_without_autocast():
    plugin = _HalfPrecisionPlugin()
    audio = torch.randn(3, 4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = plugin(audio, audio)
    assert plugin.seen == (torch.float32, torch.float32, False)
    assert output.loss.dtype == torch.float32
    double = torch.randn(3, 4, dtype=torch.float64)
    assert plugin(double, double).loss.dtype == torch.float64 and plugin.seen[0] == torch.float64
