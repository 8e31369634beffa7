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


def _brute_force_with_negatives(audio, text, audio_ids, negatives, negative_ids, scale):
    """Direct loops over moment training's batch: caption i's candidates are every paired clip but other copies of
    its own, then every unpaired negative whose id is not its clip's; audio i's are the captions as without them."""
    n = audio.shape[0]
    total = 0.0
    for i in range(n):
        candidates = [j for j in range(n) if j == i or audio_ids[j] != audio_ids[i]]
        logits = [scale * float(text[i] @ audio[j]) for j in candidates]
        logits += [
            scale * float(text[i] @ negatives[m])
            for m in range(len(negatives))
            if negative_ids[m] != audio_ids[i]
        ]
        total += -(scale * float(text[i] @ audio[i]) - math.log(sum(math.exp(v) for v in logits)))
        logits = [scale * float(audio[i] @ text[j]) for j in candidates]
        total += -(scale * float(audio[i] @ text[i]) - math.log(sum(math.exp(v) for v in logits)))
    return total / (2 * n)


def test_unpaired_negative_audio_rows_are_negatives_of_every_caption_only():
    torch.manual_seed(1)
    audio = torch.nn.functional.normalize(torch.randn(4, 8, dtype=torch.float64), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(4, 8, dtype=torch.float64), dim=-1)
    negatives = torch.nn.functional.normalize(torch.randn(3, 8, dtype=torch.float64), dim=-1)
    audio_ids = ["r1@0.000-1.000", "r1@3.000-4.000", "r2@0.000-1.000", "r1@0.000-1.000"]
    # The third negative is the span of rows 0 and 3: never their negative.
    negative_ids = ["r1@5.000-6.000", "r2@4.000-5.000", "r1@0.000-1.000"]
    # Interleaved as several processes' gathered rows would be: the flags say which rows are unpaired.
    order = [0, 4, 1, 2, 5, 3, 6]
    rows = torch.cat([audio, negatives])[order]
    ids = [(audio_ids + negative_ids)[k] for k in order]
    flags = torch.tensor([k >= 4 for k in order])
    objective = build_objective({"name": "contrastive", "temperature": 0.2})
    output = objective(rows, text, batch={"audio_ids": ids, "negative_audio": flags})
    expected = _brute_force_with_negatives(audio, text, audio_ids, negatives, negative_ids, 5.0)
    assert output.loss.item() == pytest.approx(expected, rel=1e-10)
    # The audio→text term does not see the negatives; the text→audio term grows with them.
    plain = objective(audio, text, batch={"audio_ids": audio_ids})
    assert float(output.logs["loss_a2t"]) == pytest.approx(float(plain.logs["loss_a2t"]), rel=1e-12)
    assert output.logs["loss_t2a"] > plain.logs["loss_t2a"]
    # Gradient reaches the negatives (they are pushed away from the captions).
    rows.requires_grad_(True)
    objective(rows, text, batch={"audio_ids": ids, "negative_audio": flags}).loss.backward()
    assert rows.grad[flags].abs().sum() > 0


def test_objectives_that_do_not_score_unpaired_audio_refuse_it():
    audio, text = torch.randn(3, 4), torch.randn(2, 4)
    flags = torch.tensor([False, False, True])
    with pytest.raises(ValueError, match="Objective 'triplet' does not score unpaired audio rows"):
        build_objective({"name": "triplet"})(audio, text, batch={"negative_audio": flags})
    with pytest.raises(
        ValueError, match=r"batch\['negative_audio'\] has shape \(2,\) but there are 3 audio rows"
    ):
        build_objective({"name": "contrastive"})(audio, text, batch={"negative_audio": flags[:2]})
    with pytest.raises(ValueError, match=r"batch\['audio_ids'\] has 2 entries but there are 3 audio rows"):
        build_objective({"name": "contrastive"})(
            audio, text, batch={"negative_audio": flags, "audio_ids": ["a", "b"]}
        )
