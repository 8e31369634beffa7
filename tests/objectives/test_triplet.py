from __future__ import annotations

import pytest
import torch

from hf_atr.objectives import build_objective


def _brute_force_triplet(audio, text, audio_ids, margin, max_violation):
    n = audio.shape[0]
    s = [[float(text[i] @ audio[j]) for j in range(n)] for i in range(n)]
    total = 0.0
    for i in range(n):
        negatives = [j for j in range(n) if audio_ids[j] != audio_ids[i]]
        text_costs = [max(0.0, margin - s[i][i] + s[i][j]) for j in negatives]
        audio_costs = [max(0.0, margin - s[i][i] + s[j][i]) for j in negatives]
        reduce = max if max_violation else sum
        total += (reduce(text_costs) if text_costs else 0.0) + (reduce(audio_costs) if audio_costs else 0.0)
    return total / n


@pytest.mark.parametrize("max_violation", [True, False])
@pytest.mark.parametrize("audio_ids", [list("abcdef"), list("abacbd")])
def test_matches_brute_force(max_violation, audio_ids):
    torch.manual_seed(1)
    audio = torch.nn.functional.normalize(torch.randn(6, 8, dtype=torch.float64), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(6, 8, dtype=torch.float64), dim=-1)
    objective = build_objective({"name": "triplet", "margin": 0.3, "max_violation": max_violation})
    loss = objective(audio, text, batch={"audio_ids": audio_ids}).loss
    assert loss.item() == pytest.approx(
        _brute_force_triplet(audio, text, audio_ids, 0.3, max_violation), rel=1e-10
    )


def test_zero_when_every_positive_beats_every_negative_by_the_margin():
    embeds = torch.eye(4)
    assert build_objective({"name": "triplet", "margin": 0.5})(embeds, embeds.clone()).loss.item() == 0.0


def test_negative_margin_is_rejected():
    with pytest.raises(ValueError, match="`margin` must be a non-negative number, got -1"):
        build_objective({"name": "triplet", "margin": -1})
