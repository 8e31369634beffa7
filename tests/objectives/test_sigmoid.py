"""The sigmoid objective against SigLIP's Eq. 1 written out, across 2 processes, and against transformers' loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.multiprocessing as mp
from sigmoid_worker import ROWS_PER_RANK, head_model, rank_rows, sigmoid_worker
from tiny_models import make_model

from hf_atr import AtrConfig, build_objective
from hf_atr.objectives.sigmoid import SigmoidObjective


def eq1_brute_force(audio, text, audio_ids, scale, bias):
    """SigLIP Eq. 1 pair by pair: −(1/|B|) Σ_i Σ_j log σ(z_ij (t x_i·y_j + b)), z_ij = ±1."""
    total = 0.0
    for i in range(len(audio_ids)):
        for j in range(len(audio_ids)):
            z = 1.0 if audio_ids[i] == audio_ids[j] else -1.0
            logit = scale * float(text[i].detach() @ audio[j].detach()) + bias
            total += math.log(1.0 / (1.0 + math.exp(-z * logit)))
    return -total / len(audio_ids)


def test_loss_equals_eq_1_written_out_with_the_head_s_scale_and_bias():
    torch.manual_seed(0)
    audio = torch.nn.functional.normalize(torch.randn(6, 5, dtype=torch.float64), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(6, 5, dtype=torch.float64), dim=-1)
    audio_ids = ["a", "b", "a", "c", "d", "e"]  # rows 0 and 2 are the same clip: positives of each other
    model = head_model()
    with torch.no_grad():
        model.scoring_head.logit_scale.fill_(math.log(7.0))
        model.scoring_head.logit_bias.fill_(-3.0)
    loss = build_objective({"name": "sigmoid"})(audio, text, batch={"audio_ids": audio_ids}, model=model).loss
    assert loss.item() == pytest.approx(eq1_brute_force(audio, text, audio_ids, 7.0, -3.0), rel=1e-12)
    without_model = build_objective({"name": "sigmoid"})(audio, text, batch={"audio_ids": audio_ids}).loss
    assert without_model.item() == pytest.approx(
        eq1_brute_force(audio, text, audio_ids, 10.0, -10.0), rel=1e-12
    )


def test_negatives_get_a_gradient_here_and_none_with_transformers_eye_labels():
    torch.manual_seed(1)
    logits = (3 * torch.randn(4, 4, dtype=torch.float64)).requires_grad_(True)
    negatives = ~torch.eye(4, dtype=torch.bool)
    # ours, without a model: logits 10 · text @ audioᵀ − 10 with audio = I, i.e. an affine map of `logits`
    ours = build_objective({"name": "sigmoid"})(torch.eye(4, dtype=torch.float64), logits).loss
    (ours_grad,) = torch.autograd.grad(ours, logits)
    assert (ours_grad[negatives].abs() > 0).all()
    theirs = (
        -torch.nn.functional.logsigmoid(torch.eye(4, dtype=torch.float64) * logits).sum() / 4
    )  # PeAudioModel
    (their_grad,) = torch.autograd.grad(theirs, logits)
    assert torch.equal(their_grad[negatives], torch.zeros(12, dtype=torch.float64))
    assert (their_grad.diagonal().abs() > 0).all()


def test_transformers_pe_audio_loss_adds_log_2_per_negative(tmp_path):
    """``PeAudioModel(return_loss=True)`` itself: its loss is the positives' terms plus (n − 1) log 2."""
    from tiny_models import PE_AUDIO_SAMPLING_RATE, save_tiny_pe_audio_checkpoint
    from transformers import PeAudioProcessor

    pe_model = save_tiny_pe_audio_checkpoint(tmp_path)
    processor = PeAudioProcessor.from_pretrained(tmp_path)
    audio = processor.feature_extractor(
        [torch.randn(4000).numpy() * 0.1 for _ in range(3)],
        sampling_rate=PE_AUDIO_SAMPLING_RATE,
        return_tensors="pt",
    )
    text = processor.tokenizer(["a dog barks", "a siren", "birds sing"], padding=True, return_tensors="pt")
    with torch.no_grad():
        output = pe_model(**audio, **text, return_loss=True)
    positives = -torch.nn.functional.logsigmoid(output.logits_audio_text.diagonal()).sum() / 3
    torch.testing.assert_close(output.loss, positives + 2 * math.log(2))


def test_a_sigmoid_config_initialises_the_head_as_siglip():
    config = AtrConfig(objective={"name": "sigmoid"})
    assert (config.logit_scale_init, config.logit_bias, config.logit_bias_init) == (
        math.log(10.0),
        True,
        -10.0,
    )
    head = make_model(objective={"name": "sigmoid"}).scoring_head
    assert head.scale().item() == pytest.approx(10.0) and head.logit_bias.item() == -10.0
    assert (
        SigmoidObjective().logit_scales_read() == frozenset({"logit_scale"})
        and SigmoidObjective().logit_bias_read()
    )
    chosen = AtrConfig(objective={"name": "sigmoid"}, logit_bias=False, logit_scale_init=1.0)
    assert (chosen.logit_bias, chosen.logit_scale_init) == (False, 1.0)


def test_mismatched_embeddings_are_refused_with_their_shapes():
    with pytest.raises(
        ValueError, match="Objective 'sigmoid': audio_embeds has 3 rows but text_embeds has 2"
    ):
        build_objective({"name": "sigmoid"})(torch.randn(3, 4), torch.randn(2, 4))


@pytest.mark.slow
def test_two_processes_sum_over_the_global_batch_as_eq_1_on_all_rows(tmp_path):
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(sigmoid_worker, args=(2, f"file://{tmp_path / 'store'}", results), nprocs=2, join=True)
    rows = [rank_rows(rank) for rank in (0, 1)]
    audio = torch.cat([audio for audio, _, _ in rows]).requires_grad_(True)
    text = torch.cat([text for _, text, _ in rows]).requires_grad_(True)
    audio_ids = [audio_id for _, _, ids in rows for audio_id in ids]
    model = head_model()
    expected = build_objective({"name": "sigmoid"})(
        audio, text, batch={"audio_ids": audio_ids}, model=model
    ).loss
    scale, bias = (
        model.scoring_head.scale().item(),
        model.scoring_head.bias().item(),
    )  # log 10 as a float32 value
    assert expected.item() == pytest.approx(eq1_brute_force(audio, text, audio_ids, scale, bias), rel=1e-12)
    expected.backward()
    first = ROWS_PER_RANK[0]
    for rank, rows_of_rank in ((0, slice(0, first)), (1, slice(first, None))):
        assert results[rank]["loss"] == pytest.approx(expected.item(), rel=1e-12)
        # every rank's loss is the global one; the gather's backward sums both ranks' gradients into a row (× 2)
        torch.testing.assert_close(
            torch.tensor(results[rank]["audio_grad"], dtype=torch.float64), 2 * audio.grad[rows_of_rank]
        )
        torch.testing.assert_close(
            torch.tensor(results[rank]["text_grad"], dtype=torch.float64), 2 * text.grad[rows_of_rank]
        )
        assert results[rank]["bias_grad"] == pytest.approx(
            model.scoring_head.logit_bias.grad.item(), rel=1e-10
        )
