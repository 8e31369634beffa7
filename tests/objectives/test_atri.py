from __future__ import annotations

import math

import pytest
import torch
from tiny_models import make_model

from hf_atr.objectives.atri import (
    ATRI_TEMPERATURE,
    CaclObjective,
    KclObjective,
    RandomLanguageObjective,
    masked_symmetric_info_nce,
)
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.objectives.registry import build_objective, objective_parameters

TEMPERATURE = 0.1


def unit(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(
        torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1
    )


def info_nce_term(anchor, candidates, positive_index):
    """-log softmax of the positive among explicitly listed candidates, one dot product at a time."""
    scores = [float(anchor @ candidate) / TEMPERATURE for candidate in candidates]
    positive = float(anchor @ candidates[positive_index]) / TEMPERATURE
    return -(positive - math.log(sum(math.exp(score) for score in scores)))


def same_clip(audio_ids, i, j):
    return audio_ids is not None and i != j and audio_ids[i] == audio_ids[j]


def brute_force_kcl(audio, text, mask, audio_ids=None):
    """ATRI Eq. (9)–(11) with loops; absent captions and other copies of a clip leave the sums."""
    batch, languages, _ = text.shape
    total, pairs = 0.0, 0
    for k in range(languages):
        for i in range(batch):
            if not mask[i][k]:
                continue
            pairs += 1
            texts = [j for j in range(batch) if mask[j][k] and not same_clip(audio_ids, i, j)]
            total += info_nce_term(audio[i], [text[j, k] for j in texts], texts.index(i))
            audios = [j for j in range(batch) if not same_clip(audio_ids, i, j)]
            total += info_nce_term(text[i, k], [audio[j] for j in audios], audios.index(i))
    return total / (2 * pairs)


def brute_force_pair_term(u, v, u_present, v_present, audio_ids=None):
    """Eq. (13): both directions, summed over pairs where u_i and v_i both exist."""
    batch = u.shape[0]
    total, pairs = 0.0, 0
    for i in range(batch):
        if not (u_present[i] and v_present[i]):
            continue
        pairs += 1
        columns = [j for j in range(batch) if v_present[j] and not same_clip(audio_ids, i, j)]
        total += info_nce_term(u[i], [v[j] for j in columns], columns.index(i))
        rows = [j for j in range(batch) if u_present[j] and not same_clip(audio_ids, i, j)]
        total += info_nce_term(v[i], [u[j] for j in rows], rows.index(i))
    return total, pairs


def brute_force_cacl(audio, text, mask, audio_ids=None):
    """ATRI Eq. (12): (L^ae + L^ao + L^eo) / (2 · counted pairs), = 1/(6N) when nothing is missing."""
    everyone = [True] * audio.shape[0]
    english_present = [bool(row[0]) for row in mask]
    other_present = [bool(row[1]) for row in mask]
    terms = [
        brute_force_pair_term(audio, text[:, 0], everyone, english_present, audio_ids),
        brute_force_pair_term(audio, text[:, 1], everyone, other_present, audio_ids),
        brute_force_pair_term(text[:, 0], text[:, 1], english_present, other_present, audio_ids),
    ]
    return sum(total for total, _ in terms) / (2 * sum(pairs for _, pairs in terms))


def test_kcl_matches_brute_force_and_is_normalised_by_2NK():
    audio, text = unit(5, 6, seed=1), unit(5, 3, 6, seed=2)
    mask = torch.ones(5, 3, dtype=torch.bool)
    loss = KclObjective(temperature=TEMPERATURE)(audio, text).loss
    assert loss.item() == pytest.approx(brute_force_kcl(audio, text, mask.tolist()), rel=1e-10)
    # With all captions present: the mean over languages of the per-language symmetric contrastive loss.
    contrastive = ContrastiveObjective(temperature=TEMPERATURE)
    per_language = [contrastive(audio, text[:, k]).loss for k in range(3)]
    assert loss.item() == pytest.approx(torch.stack(per_language).mean().item(), rel=1e-10)


def test_kcl_missing_languages_and_duplicate_clips_match_brute_force():
    audio, text = unit(6, 5, seed=3), unit(6, 4, 5, seed=4)
    mask = torch.tensor(
        [[1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.bool
    )
    audio_ids = ["a", "b", "a", "c", "d", "b"]
    batch = {"audio_ids": audio_ids, "language_mask": mask}
    loss = KclObjective(temperature=TEMPERATURE)(audio, text, batch=batch).loss
    assert loss.item() == pytest.approx(brute_force_kcl(audio, text, mask.tolist(), audio_ids), rel=1e-10)


def test_absent_captions_get_no_gradient_and_their_values_do_not_matter():
    audio, text = unit(4, 5, seed=5), unit(4, 3, 5, seed=6).requires_grad_()
    mask = torch.tensor([[1, 0, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    objective = KclObjective(temperature=TEMPERATURE)
    loss = objective(audio, text, batch={"language_mask": mask}).loss
    loss.backward()
    assert torch.isfinite(text.grad).all()
    assert text.grad[~mask].abs().max() == 0
    changed = text.detach().clone()
    changed[~mask] = unit(2, 5, seed=7)
    assert objective(audio, changed, batch={"language_mask": mask}).loss.item() == pytest.approx(
        loss.item(), rel=1e-12
    )


def test_cacl_matches_brute_force_with_missing_other_language_and_duplicates():
    audio, text = unit(6, 5, seed=8), unit(6, 2, 5, seed=9)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    audio_ids = ["a", "b", "c", "a", "d", "e"]
    batch = {"audio_ids": audio_ids, "language_mask": mask}
    output = CaclObjective(temperature=TEMPERATURE)(audio, text, batch=batch)
    assert output.loss.item() == pytest.approx(
        brute_force_cacl(audio, text, mask.tolist(), audio_ids), rel=1e-10
    )
    assert set(output.logs) == {"loss_audio_english", "loss_audio_other", "loss_english_other"}


def test_cacl_without_missing_captions_is_one_sixth_N_of_three_symmetric_terms():
    audio, text = unit(5, 4, seed=10), unit(5, 2, 4, seed=11)
    loss = CaclObjective(temperature=TEMPERATURE)(audio, text).loss
    contrastive = ContrastiveObjective(temperature=TEMPERATURE)
    # ContrastiveObjective averages the two directions over N rows: 2N·it = one L^{uv} of Eq. (13).
    terms = [
        contrastive(audio, text[:, 0]),
        contrastive(audio, text[:, 1]),
        contrastive(text[:, 0], text[:, 1]),
    ]
    expected = sum(2 * 5 * term.loss.item() for term in terms) / (6 * 5)
    assert loss.item() == pytest.approx(expected, rel=1e-10)


def test_random_language_is_plain_symmetric_info_nce():
    audio, text = unit(5, 4, seed=12), unit(5, 4, seed=13)
    audio_ids = ["a", "b", "a", "c", "d"]
    loss = RandomLanguageObjective(temperature=TEMPERATURE)(audio, text, batch={"audio_ids": audio_ids}).loss
    expected, pairs = brute_force_pair_term(audio, text, [True] * 5, [True] * 5, audio_ids)
    assert loss.item() == pytest.approx(expected / (2 * pairs), rel=1e-10)


@pytest.mark.parametrize("name", ["kcl", "cacl", "random_language"])
def test_paper_temperature_is_fixed_by_default_and_learnable_on_request(name):
    """ATRI §5.1: τ = 0.07 for every configuration; ``temperature=None`` uses the scoring head's scale."""
    assert objective_parameters(name)["temperature"] == ATRI_TEMPERATURE == 0.07
    model = make_model()
    with torch.no_grad():
        model.scoring_head.logit_scale.fill_(math.log(1 / TEMPERATURE))
    languages = {"kcl": 4, "cacl": 2}.get(name)
    audio = unit(3, 16, seed=14).float()
    text = unit(3, 16, seed=15).float() if languages is None else unit(3, languages, 16, seed=15).float()
    default = build_objective({"name": name})
    assert default.temperature == ATRI_TEMPERATURE
    learnable = build_objective({"name": name, "temperature": None})
    at_fixed = build_objective({"name": name, "temperature": TEMPERATURE})
    paper = build_objective({"name": name, "temperature": ATRI_TEMPERATURE})
    assert default(audio, text, model=model).loss.item() == pytest.approx(
        paper(audio, text).loss.item(), rel=1e-6
    )
    loss = learnable(audio, text, model=model).loss
    assert loss.item() == pytest.approx(at_fixed(audio, text).loss.item(), rel=1e-5)
    loss.backward()
    assert model.scoring_head.logit_scale.grad is not None
    assert default(audio, text, model=model).loss.item() != pytest.approx(loss.item(), rel=1e-3)


def test_atri_objectives_are_registered():
    assert isinstance(build_objective({"name": "kcl"}), KclObjective)
    assert isinstance(build_objective({"name": "cacl"}), CaclObjective)
    assert isinstance(build_objective({"name": "random_language"}), RandomLanguageObjective)


def test_kcl_gradient_matches_finite_differences():
    audio, text = unit(3, 4, seed=16).requires_grad_(), unit(3, 2, 4, seed=17).requires_grad_()
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    objective = KclObjective(temperature=0.5)
    assert torch.autograd.gradcheck(
        lambda a, t: objective(a, t, batch={"language_mask": mask, "audio_ids": ["x", "y", "x"]}).loss,
        (audio, text),
    )


def test_masked_info_nce_counts_pairs_per_group():
    logits = torch.zeros(2, 3, 3)
    rows = torch.tensor([[1, 1, 1], [1, 0, 1]], dtype=torch.bool)
    columns = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    forward, backward, pairs = masked_symmetric_info_nce(
        logits, rows, columns, torch.zeros(3, 3, dtype=torch.bool)
    )
    assert pairs.tolist() == [2, 2]
    # Uniform logits: -log(1/candidates) for each counted anchor.
    assert forward.tolist() == pytest.approx([2 * math.log(2), 2 * math.log(3)])
    assert backward.tolist() == pytest.approx([2 * math.log(3), 2 * math.log(2)])


@pytest.mark.parametrize(
    ("objective", "text_shape", "message"),
    [
        (KclObjective(), (4, 8), r"text_embeds \(batch, K, dim\)"),
        (KclObjective(), (3, 2, 8), "one row of captions per clip"),
        (CaclObjective(), (4, 3, 8), "expects 2 captions per clip"),
    ],
)
def test_bad_shapes_raise_clear_errors(objective, text_shape, message):
    with pytest.raises(ValueError, match=message):
        objective(torch.randn(4, 8), torch.randn(*text_shape))


def test_bad_or_empty_language_mask_raises():
    audio, text = torch.randn(2, 4), torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"bool tensor of shape \(batch, K\) = \(2, 3\)"):
        KclObjective()(audio, text, batch={"language_mask": torch.ones(2, 2, dtype=torch.bool)})
    with pytest.raises(ValueError, match="marks no caption as present"):
        KclObjective()(audio, text, batch={"language_mask": torch.zeros(2, 3, dtype=torch.bool)})
