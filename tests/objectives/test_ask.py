"""ASK objective: each term and the full loss against direct (loop, brute-force top-K, POT) computations."""

from __future__ import annotations

import math

import numpy as np
import ot as pot
import pytest
import torch
import torch.nn.functional as F
from ranking_margin import clear_best_among, clear_top_k

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.objectives.ask import (
    AskObjective,
    inject_knowledge,
    log_knowledge_potential,
    optimal_transport_realignment,
    realigned_similarity,
    reliability_weights,
)
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.objectives.registry import available_objectives, build_objective

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

TEMPERATURE = 0.1
OT_REG = 0.1


def unit(rows: int, dim: int, seed: int) -> torch.Tensor:
    return F.normalize(
        torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1
    )


@pytest.fixture(scope="module")
def knowledge_base() -> KnowledgeBase:
    audio = unit(40, 8, 10)
    text = F.normalize(audio + 0.7 * unit(40, 8, 11), dim=-1)
    return KnowledgeBase.from_embeddings(audio, text, num_prototypes=6)


def test_inject_knowledge_is_the_convex_mix():
    embeds, neighbours = unit(3, 4, 0), unit(6, 4, 1).reshape(3, 2, 4)
    expected = 0.8 * embeds + 0.2 * (neighbours[:, 0] + neighbours[:, 1]) / 2
    torch.testing.assert_close(inject_knowledge(embeds, neighbours, 0.2), expected)


def test_reliability_weights_and_potential_match_a_loop():
    embeds = unit(2, 5, 0)
    candidates, anchors = unit(6, 5, 1).reshape(2, 3, 5), unit(8, 5, 2).reshape(2, 4, 5)
    weights = reliability_weights(candidates, anchors)
    log_potential = log_knowledge_potential(embeds, candidates, weights)
    for i in range(2):
        consistency = [
            sum(float(candidates[i, j] @ anchors[i, anchor]) for anchor in range(4)) / 4 for j in range(3)
        ]
        expected_weights = np.exp(consistency) / np.sum(np.exp(consistency))
        np.testing.assert_allclose(weights[i].numpy(), expected_weights, rtol=1e-10)
        potential = sum(expected_weights[j] * math.exp(float(embeds[i] @ candidates[i, j])) for j in range(3))
        assert float(log_potential[i]) == pytest.approx(math.log(potential), rel=1e-10)


def test_realignment_plan_is_pot_sinkhorn_rescaled():
    similarity = unit(5, 4, 0) @ unit(5, 4, 1).T
    plan = optimal_transport_realignment(similarity, OT_REG)
    uniform = np.full(5, 1 / 5)
    expected = 5 * pot.sinkhorn(
        uniform, uniform, -similarity.numpy(), OT_REG, method="sinkhorn_log", stopThr=1e-10
    )
    np.testing.assert_allclose(plan.numpy(), expected, atol=1e-4)  # plan solved to OT_TOLERANCE
    torch.testing.assert_close(plan.sum(dim=1), torch.ones(5, dtype=plan.dtype), atol=1e-4, rtol=0)
    assert not plan.requires_grad
    realigned = realigned_similarity(similarity, plan, 0.2)
    torch.testing.assert_close(realigned, (0.8 * torch.eye(5, dtype=plan.dtype) + 0.2 * plan) @ similarity)


def reference_ask_loss(
    audio: torch.Tensor,
    text: torch.Tensor,
    base: KnowledgeBase,
    audio_ids: list[str] | None = None,
    *,
    k: int = 3,
    rho: float = 0.2,
    beta: float = 0.2,
    weights: dict[str, float] | None = None,
    granularities: tuple[str, ...] = ("fine", "coarse"),
    injection: bool = True,
    ot_correction: bool = True,
    reliability: bool = True,
    base_audio_ids: list[str] | None = None,
) -> float:
    """ASK Eq. 8-18 written out with brute-force top-K, POT plans and explicit loops (float64 numpy).

    With ``base_audio_ids`` (the clip of each fine pair), fine neighbours are the best pair of each of the
    K best clips other than the sample's own.
    """
    weights = weights or {"fine": 0.2, "coarse": 0.3}
    u, v = audio.detach().double().numpy(), text.detach().double().numpy()
    n = u.shape[0]
    audio_ids = audio_ids or [str(i) for i in range(n)]
    losses = {"t2a": 0.0, "a2t": 0.0}
    modulation = {"t2a": 1.0, "a2t": 1.0}
    for granularity in granularities:
        keys_audio = base.tensors[f"{granularity}_audio"].double().numpy()
        keys_text = base.tensors[f"{granularity}_text"].double().numpy()

        def top(keys, query, i, granularity=granularity):
            """The K neighbours (a set: their keys are averaged), after asserting that the set is clear of
            rounding (tests/ranking_margin.py): the K-th leads the next, and each clip's best pair its others."""
            scores = keys @ query
            if granularity == "coarse" or base_audio_ids is None:
                return clear_top_k(scores, min(k, len(keys)))
            best = {}
            for index in np.argsort(-scores, kind="stable"):
                if base_audio_ids[index] != audio_ids[i] and base_audio_ids[index] not in best:
                    best[base_audio_ids[index]] = index
            chosen = np.array(list(best.values()))[
                clear_top_k(scores[list(best.values())], min(k, len(best)))
            ]
            clips = np.array(base_audio_ids)
            for index in chosen:
                pairs = np.flatnonzero(clips == clips[index])
                copies = (keys[pairs] == keys[index]).all(axis=1)
                if not copies.all():
                    clear_best_among(scores[pairs], copies)
            return chosen

        by_audio = [top(keys_audio, u[i], i) for i in range(n)]
        by_text = [top(keys_text, v[i], i) for i in range(n)]
        if injection:
            u_injected = np.stack(
                [(1 - rho) * u[i] + rho * keys_audio[by_audio[i]].mean(0) for i in range(n)]
            )
            v_injected = np.stack([(1 - rho) * v[i] + rho * keys_text[by_text[i]].mean(0) for i in range(n)])
        else:
            u_injected, v_injected = u, v
        similarity = v_injected @ u_injected.T  # (text, audio)
        for direction, matrix in (("t2a", similarity), ("a2t", similarity.T)):
            if ot_correction:
                uniform = np.full(n, 1 / n)
                plan = n * pot.sinkhorn(
                    uniform, uniform, -matrix, OT_REG, method="sinkhorn_log", stopThr=1e-9, numItermax=20000
                )
                matrix = ((1 - beta) * np.eye(n) + beta * plan) @ matrix
            loss = 0.0
            for i in range(n):
                allowed = [j for j in range(n) if j == i or audio_ids[j] != audio_ids[i]]
                logits = np.array([matrix[i, j] / TEMPERATURE for j in allowed])
                loss += -(matrix[i, i] / TEMPERATURE - np.log(np.sum(np.exp(logits))))
            losses[direction] += loss / n
        if reliability:
            for direction in ("t2a", "a2t"):
                total = 0.0
                for i in range(n):
                    if direction == "t2a":  # audio side of text-retrieved pairs vs audio retrieved by u_i
                        candidates, anchors, own = keys_audio[by_text[i]], keys_audio[by_audio[i]], u[i]
                    else:
                        candidates, anchors, own = keys_text[by_audio[i]], keys_text[by_text[i]], v[i]
                    consistency = np.array([np.mean([c @ a for a in anchors]) for c in candidates])
                    w = np.exp(consistency) / np.exp(consistency).sum()
                    total += -np.log(np.sum(w * np.exp(candidates @ own)))
                modulation[direction] += weights[granularity] * total / n
    return 0.5 * (modulation["t2a"] * losses["t2a"] + modulation["a2t"] * losses["a2t"])


ABLATIONS = [
    ({}, {}),
    ({"use_fine": False}, {"granularities": ("coarse",)}),
    ({"use_coarse": False}, {"granularities": ("fine",)}),
    ({"use_injection": False}, {"injection": False}),
    ({"use_ot_realignment": False}, {"ot_correction": False}),
    ({"use_reliability": False}, {"reliability": False}),
    (
        {"injection_ratio": 0.5, "realignment": 0.7, "fine_weight": 0.9, "coarse_weight": 0.0},
        {"rho": 0.5, "beta": 0.7, "weights": {"fine": 0.9, "coarse": 0.0}},
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("hyperparameters", "reference_options"), ABLATIONS)
def test_loss_matches_direct_computation(knowledge_base, hyperparameters, reference_options):
    audio, text = unit(6, 8, 0), F.normalize(unit(6, 8, 0) + unit(6, 8, 1), dim=-1)
    audio_ids = ["a", "b", "a", "c", "d", "e"]  # rows 0 and 2 are one clip: never each other's negatives
    objective = AskObjective(temperature=TEMPERATURE, num_neighbours=3, ot_reg=OT_REG, **hyperparameters)
    objective.knowledge_base = knowledge_base
    output = objective(audio, text, batch={"audio_ids": audio_ids})
    expected = reference_ask_loss(audio, text, knowledge_base, audio_ids, k=3, **reference_options)
    assert output.loss.item() == pytest.approx(expected, rel=1e-4)
    assert output.logs["knowledge_base"] == 1.0
    used = [g for g in ("fine", "coarse") if hyperparameters.get(f"use_{g}", True)]
    for granularity in used:
        assert f"loss_t2a_{granularity}" in output.logs and f"loss_a2t_{granularity}" in output.logs
        has_reliability = hyperparameters.get("use_reliability", True)
        assert (f"reliability_t2a_{granularity}" in output.logs) == has_reliability
    assert output.logs["loss_t2a"] + float(output.logs["loss_a2t"]) == pytest.approx(
        2 * output.loss.item(), rel=1e-6
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_neighbours_are_distinct_clips_other_than_the_sample_s_own(backend):
    """A base built from the training pairs, each clip stored once per caption, the batch among them."""
    clip_audio = unit(12, 8, 20)
    base_audio = clip_audio.repeat_interleave(3, dim=0)
    base_text = F.normalize(base_audio + 0.6 * unit(36, 8, 21), dim=-1)
    base_ids = [f"clip{row // 3}" for row in range(36)]
    base = KnowledgeBase.from_embeddings(base_audio, base_text, audio_ids=base_ids, num_prototypes=4)
    rows = [0, 4, 9, 13, 30]
    audio, text = base_audio[rows], base_text[rows]
    audio_ids = [base_ids[row] for row in rows]
    objective = AskObjective(temperature=TEMPERATURE, num_neighbours=3, ot_reg=OT_REG, search_backend=backend)
    objective.knowledge_base = base
    loss = objective(audio, text, batch={"audio_ids": audio_ids}).loss.item()
    expected = reference_ask_loss(audio, text, base, audio_ids, k=3, base_audio_ids=base_ids)
    assert loss == pytest.approx(expected, rel=1e-4)
    self_included = reference_ask_loss(audio, text, base, audio_ids, k=3)
    assert abs(expected - self_included) > 1e-2 * abs(expected)  # the exclusion changes the loss


def test_faiss_search_backend_gives_the_same_loss(knowledge_base):
    audio, text = unit(6, 8, 0), F.normalize(unit(6, 8, 0) + unit(6, 8, 1), dim=-1)
    losses = {}
    for backend in ("torch", "faiss"):
        objective = AskObjective(temperature=TEMPERATURE, num_neighbours=3, search_backend=backend)
        objective.knowledge_base = knowledge_base
        losses[backend] = objective(audio, text).loss.item()
    assert losses["torch"] == pytest.approx(losses["faiss"], rel=1e-6)


def test_gradients_reach_the_embeddings_and_not_the_knowledge(knowledge_base):
    audio = unit(5, 8, 3).float().requires_grad_()
    text = unit(5, 8, 4).float().requires_grad_()
    objective = AskObjective(temperature=TEMPERATURE, num_neighbours=4)
    objective.knowledge_base = knowledge_base
    objective(audio, text).loss.backward()
    assert torch.isfinite(audio.grad).all() and audio.grad.abs().sum() > 0
    assert torch.isfinite(text.grad).all() and text.grad.abs().sum() > 0
    assert not any(tensor.requires_grad for tensor in knowledge_base.tensors.values())


def test_model_logit_scale_is_used_without_fixed_temperature(knowledge_base):
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.logit_scale = torch.nn.Parameter(
                torch.tensor(math.log(1 / TEMPERATURE), dtype=torch.float64)
            )

        def similarity(self, text_embeds, audio_embeds):
            return text_embeds @ audio_embeds.T

        def scale(self):
            return self.logit_scale.exp()

    model = torch.nn.Module()
    model.scoring_head = Head()
    audio, text = unit(6, 8, 5), unit(6, 8, 6)
    learned = AskObjective(num_neighbours=3)
    fixed = AskObjective(temperature=TEMPERATURE, num_neighbours=3)
    learned.knowledge_base = fixed.knowledge_base = knowledge_base
    loss = learned(audio, text, model=model).loss
    assert loss.item() == pytest.approx(fixed(audio, text).loss.item(), rel=1e-6)
    loss.backward()
    assert model.scoring_head.logit_scale.grad is not None


def test_without_a_knowledge_base_it_is_the_contrastive_loss():
    audio, text = unit(6, 8, 7), unit(6, 8, 8)
    batch = {"audio_ids": ["a", "a", "b", "c", "d", "e"]}
    output = AskObjective(temperature=TEMPERATURE)(audio, text, batch=batch)
    expected = ContrastiveObjective(temperature=TEMPERATURE)(audio, text, batch=batch)
    assert output.loss.item() == pytest.approx(expected.loss.item())
    assert output.logs["knowledge_base"] == 0.0


def test_registered_with_paper_defaults():
    assert "ask" in available_objectives()
    objective = build_objective({"name": "ask"})
    assert isinstance(objective, AskObjective)
    assert (objective.num_neighbours, objective.num_prototypes) == (10, 512)
    assert (objective.injection_ratio, objective.realignment) == (0.2, 0.2)
    assert objective.granularity_weights == {"fine": 0.2, "coarse": 0.3}
    assert objective.temperature is None and objective.knowledge_base is None


@pytest.mark.parametrize(
    ("hyperparameters", "message"),
    [
        ({"num_neighbours": 0}, "`num_neighbours` must be a positive int"),
        ({"num_prototypes": 2.5}, "`num_prototypes` must be a positive int"),
        ({"injection_ratio": 1.5}, r"`injection_ratio` must be in \[0, 1\]"),
        ({"realignment": -0.1}, r"`realignment` must be in \[0, 1\]"),
        ({"fine_weight": -1}, "`fine_weight` must be a non-negative number"),
        ({"ot_reg": 0}, "`ot_reg` must be a positive number"),
        ({"fine_weight": 0.5, "coarse_weight": 0.5}, "must be < 1 to keep the modulation"),
        ({"use_fine": False, "use_coarse": False}, "cannot both be False"),
        ({"temperature": 0}, "`temperature` must be a positive number"),
        ({"search_backend": "annoy"}, r"`search_backend` must be one of \['torch', 'faiss'\]"),
    ],
)
def test_bad_hyperparameters_raise(hyperparameters, message):
    with pytest.raises(ValueError, match=message):
        AskObjective(**hyperparameters)


def test_embedding_dim_must_match_the_base(knowledge_base):
    objective = AskObjective()
    objective.knowledge_base = knowledge_base
    with pytest.raises(ValueError, match="rebuild it with the current model"):
        objective(unit(4, 6, 0), unit(4, 6, 1))
    with pytest.raises(ValueError, match=r"shape \(batch, dim\)"):
        objective(unit(4, 8, 0), unit(8, 8, 1).reshape(4, 2, 8))
