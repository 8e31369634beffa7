from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_model, make_processor, random_waveforms
from transformers import AutoModel

from hf_atr import AtrDualEncoderModel, AtrScoringHead
from hf_atr.model_layers import AtrProjectionMLP

BACKBONES = [("ast", "bert"), ("whisper", "xlm-roberta")]


def _inputs(processor, n_audio=3, n_text=4):
    captions = ["a dog barks loudly", "birds sing", "a siren wails then a beep", "silence"][:n_text]
    return processor(audio=random_waveforms(n_audio), text=captions, return_tensors="pt")


@pytest.mark.parametrize(("audio_family", "text_family"), BACKBONES)
def test_forward_returns_normalised_embeddings_and_scaled_logits(audio_family, text_family):
    processor = make_processor(audio_family)
    model = make_model(audio_family, text_family, processor=processor).eval()
    with torch.no_grad():
        output = model(**_inputs(processor))
    assert output.audio_embeds.shape == (3, 16)
    assert output.text_embeds.shape == (4, 16)
    torch.testing.assert_close(output.audio_embeds.norm(dim=-1), torch.ones(3))
    torch.testing.assert_close(output.text_embeds.norm(dim=-1), torch.ones(4))
    expected = math.exp(model.config.logit_scale_init) * output.text_embeds @ output.audio_embeds.T
    torch.testing.assert_close(output.logits_per_text, expected)
    torch.testing.assert_close(output.logits_per_audio, expected.T)


@pytest.mark.parametrize(("audio_family", "text_family"), BACKBONES)
def test_save_and_load_through_automodel_gives_identical_outputs(tmp_path, audio_family, text_family):
    processor = make_processor(audio_family)
    model = make_model(audio_family, text_family, processor=processor, scoring="mahalanobis").eval()
    inputs = _inputs(processor)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert not list(tmp_path.glob("*.bin"))
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, AtrDualEncoderModel)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits_per_text, model(**inputs).logits_per_text)


def test_custom_parameters_missing_from_a_checkpoint_are_initialised_not_garbage(tmp_path, model):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["scoring_head.logit_scale"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path)
    assert loaded.scoring_head.logit_scale.item() == pytest.approx(model.config.logit_scale_init)


def test_mahalanobis_matrix_starts_as_identity_after_load_without_it(tmp_path, processor):
    model = make_model(processor=processor, scoring="mahalanobis")
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["scoring_head.metric_matrix"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.scoring_head.metric_matrix.detach(), torch.eye(16))


def test_get_features_match_forward(model, processor):
    inputs = _inputs(processor)
    model.eval()
    with torch.no_grad():
        output = model(**inputs)
        audio = model.get_audio_features(input_values=inputs["input_values"])
        text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    torch.testing.assert_close(audio, output.audio_embeds)
    torch.testing.assert_close(text, output.text_embeds)


def test_audio_features_need_an_audio_input(model):
    with pytest.raises(ValueError, match="needs `input_values` or `input_features`"):
        model.get_audio_features()


def _brute_force_distance(x, y, metric):
    return torch.tensor(
        [[float(torch.sqrt((a - b) @ metric @ (a - b))) for b in y] for a in x], dtype=x.dtype
    )


@pytest.mark.parametrize("kind", ["cosine", "euclidean", "mahalanobis"])
def test_scoring_head_distance_and_similarity_match_brute_force(kind):
    torch.manual_seed(0)
    head = AtrScoringHead(kind, dim=5, logit_scale_init=math.log(10.0)).double()
    x = torch.nn.functional.normalize(torch.randn(4, 5, dtype=torch.float64), dim=-1)
    y = torch.nn.functional.normalize(torch.randn(3, 5, dtype=torch.float64), dim=-1)
    if kind == "mahalanobis":
        factor = torch.randn(5, 5, dtype=torch.float64)
        with torch.no_grad():
            head.metric_matrix.copy_(factor @ factor.T)
        expected_distance = _brute_force_distance(x, y, head.metric_matrix.detach())
    elif kind == "euclidean":
        expected_distance = _brute_force_distance(x, y, torch.eye(5, dtype=torch.float64))
    else:
        expected_distance = 1 - x @ y.T
    torch.testing.assert_close(head.distance(x, y), expected_distance)
    expected_similarity = x @ y.T if kind == "cosine" else -expected_distance
    torch.testing.assert_close(head.similarity(x, y), expected_similarity)
    torch.testing.assert_close(head(x, y), 10.0 * expected_similarity)


def test_distance_gradient_is_finite_for_coincident_points():
    head = AtrScoringHead("euclidean", dim=3, logit_scale_init=0.0)
    x = torch.ones(2, 3, requires_grad=True)
    head.distance(x, x.detach()).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_logit_scale_is_capped_at_100():
    head = AtrScoringHead("cosine", dim=3, logit_scale_init=10.0)
    assert head.scale().item() == pytest.approx(100.0)


def test_psd_projection_makes_the_metric_symmetric_psd_and_keeps_psd_matrices():
    torch.manual_seed(0)
    head = AtrScoringHead("mahalanobis", dim=6, logit_scale_init=0.0)
    with torch.no_grad():
        head.metric_matrix.copy_(torch.randn(6, 6))
    head.project_to_psd_()
    matrix = head.metric_matrix.detach()
    torch.testing.assert_close(matrix, matrix.T)
    assert torch.linalg.eigvalsh(matrix).min() >= -1e-5
    before = matrix.clone()
    head.project_to_psd_()
    torch.testing.assert_close(head.metric_matrix.detach(), before, atol=1e-5, rtol=1e-5)


def test_mahalanobis_gradients_are_those_of_the_explicit_quadratic_form():
    """m-LTM Eq. 9: d/dM of (x − y)ᵀM(x − y) is (x − y)(x − y)ᵀ, symmetric, even when M itself is not."""
    generator = torch.Generator().manual_seed(0)
    head = AtrScoringHead("mahalanobis", dim=5, logit_scale_init=0.0).double()
    factor = torch.randn(5, 5, generator=generator, dtype=torch.float64)
    antisymmetric = torch.randn(5, 5, generator=generator, dtype=torch.float64)
    metric = factor @ factor.T + 0.5 * (antisymmetric - antisymmetric.T)  # what an Adam step leaves
    with torch.no_grad():
        head.metric_matrix.copy_(metric)
    x = torch.randn(4, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(4, 3, generator=generator, dtype=torch.float64)

    (head.distance(x, y) * weights).sum().backward()
    explicit_metric = metric.clone().requires_grad_()
    x_explicit, y_explicit = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    difference = x_explicit[:, None, :] - y_explicit[None, :, :]
    explicit = torch.einsum("nmd,de,nme->nm", difference, explicit_metric, difference).sqrt()
    (explicit * weights).sum().backward()

    gradient = head.metric_matrix.grad
    torch.testing.assert_close(gradient, explicit_metric.grad, rtol=1e-10, atol=1e-12)
    assert torch.equal(gradient, gradient.T)
    torch.testing.assert_close(x.grad, x_explicit.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(y.grad, y_explicit.grad, rtol=1e-10, atol=1e-12)


def test_model_projects_its_mahalanobis_matrix_and_leaves_other_heads_alone():
    not_psd = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 0.3], [0.0, 0.3, 0.2]])
    values, vectors = np.linalg.eigh((not_psd.numpy() + not_psd.numpy().T) / 2)
    expected = (vectors * np.clip(values, 0, None)) @ vectors.T
    model = make_model(scoring="mahalanobis", projection_dim=3)
    with torch.no_grad():
        model.scoring_head.metric_matrix.copy_(not_psd)
    model.project_parameters_()
    projected = model.scoring_head.metric_matrix.detach()
    assert torch.equal(projected, projected.T)
    np.testing.assert_allclose(projected.numpy(), expected, atol=1e-6)
    euclidean = make_model(scoring="euclidean", projection_dim=3)
    before = {name: tensor.clone() for name, tensor in euclidean.state_dict().items()}
    euclidean.project_parameters_()
    assert all(torch.equal(tensor, before[name]) for name, tensor in euclidean.state_dict().items())


def test_a_float32_objective_can_score_with_a_bfloat16_head():
    head = AtrScoringHead("mahalanobis", dim=4, logit_scale_init=0.0).bfloat16()
    x, y = torch.randn(3, 4), torch.randn(2, 4)
    distance = head.distance(x, y)
    assert distance.dtype == torch.float32
    torch.testing.assert_close(distance, torch.cdist(x, y))


def test_transform_turns_the_metric_into_euclidean_geometry():
    torch.manual_seed(0)
    head = AtrScoringHead("mahalanobis", dim=4, logit_scale_init=0.0).double()
    factor = torch.randn(4, 4, dtype=torch.float64)
    with torch.no_grad():
        head.metric_matrix.copy_(factor @ factor.T)
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(
        torch.cdist(head.transform(x), head.transform(y)), head.distance(x, y).detach()
    )


def test_mlp_projection_and_separate_logit_scales(tmp_path, processor):
    model = make_model(processor=processor, projection="mlp", separate_logit_scales=True).eval()
    assert (
        isinstance(model.audio_projection, AtrProjectionMLP)
        and model.audio_projection.linear1.bias is not None
    )
    assert model.scoring_head.audio_logit_scale.item() == pytest.approx(model.config.logit_scale_init)
    with torch.no_grad():
        model.scoring_head.audio_logit_scale.fill_(math.log(30.0))
    inputs = _inputs(processor)
    with torch.no_grad():
        output = model(**inputs)
    similarity = output.text_embeds @ output.audio_embeds.T
    torch.testing.assert_close(output.logits_per_text, math.exp(model.config.logit_scale_init) * similarity)
    torch.testing.assert_close(output.logits_per_audio, 30.0 * similarity.T)
    model.save_pretrained(tmp_path)
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits_per_audio, output.logits_per_audio)


def test_audio_logit_scale_missing_from_a_checkpoint_is_initialised(tmp_path, processor):
    make_model(processor=processor, separate_logit_scales=True).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["scoring_head.audio_logit_scale"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path)
    assert loaded.scoring_head.audio_logit_scale.item() == pytest.approx(loaded.config.logit_scale_init)


def test_a_model_of_the_default_options_keeps_its_state_dict_keys(processor):
    keys = set(make_model(processor=processor).state_dict())
    assert {"audio_projection.weight", "text_projection.weight", "scoring_head.logit_scale"} <= keys
    assert not any("linear1" in key or "audio_logit_scale" in key for key in keys)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_text_pooling_before_the_projection_matches_brute_force(processor, pooling):
    model = make_model(processor=processor, text_pooling=pooling).eval()
    tokens = processor(text=["a dog barks loudly while birds sing", "a dog"], return_tensors="pt")
    with torch.no_grad():
        pooled = model.get_text_features(**tokens, project=False)
        hidden = model.text_model(**tokens).last_hidden_state
    for row, length in enumerate(tokens["attention_mask"].sum(dim=1).tolist()):
        states = hidden[row, :length]
        expected = {"mean": states.mean(0), "max": states.max(0).values, "cls": states[0]}[pooling]
        torch.testing.assert_close(pooled[row], expected)
    assert pooled.shape == (2, model.config.text_config.hidden_size)


def test_text_pooling_normalize_and_audio_features_before_the_projection(processor):
    model = make_model(processor=processor, text_pooling_normalize=True).eval()
    inputs = _inputs(processor)
    with torch.no_grad():
        text = model.get_text_features(inputs["input_ids"], inputs["attention_mask"], project=False)
        audio = model.get_audio_features(input_values=inputs["input_values"], project=False)
        projected = model.get_text_features(inputs["input_ids"], inputs["attention_mask"])
    torch.testing.assert_close(text.norm(dim=-1), torch.ones(4))
    torch.testing.assert_close(projected, torch.nn.functional.normalize(model.text_projection(text), dim=-1))
    assert audio.shape == (3, model.config.audio_config.hidden_size)
