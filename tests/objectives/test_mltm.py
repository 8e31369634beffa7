"""m-LTM inverse-OT objectives (`iot`, `iot_partial`) against brute-force references built on POT's plans."""

from __future__ import annotations

import math

import numpy as np
import ot as pot
import pytest
import torch
from ot_problems import clustered_retrieval_cost
from ranking_margin import clear_argmax
from torch import nn

from hf_atr.objectives.mltm import (
    DEFAULT_PARTIAL_MASS,
    DEFAULT_REG,
    InverseOTObjective,
    PartialInverseOTObjective,
    ground_cost,
    inverse_ot_loss,
    matching_target,
)
from hf_atr.objectives.registry import build_objective, objective_parameters
from hf_atr.scoring_head import AtrScoringHead

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

POT_TOL = 1e-12
# Retrieval-like batches on which Sinkhorn converges to POT_TOL in tens to hundreds of iterations (on
# small, well-separated batches it can take 10^5 iterations at ε ≤ 0.1: the error decays sublinearly).
ROWS, DIM, NOISE = 8, 64, 1.5


def unit_rows(
    generator: torch.Generator, rows: int, dim: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    embeds = torch.randn(rows, dim, generator=generator, dtype=dtype)
    return embeds / embeds.norm(dim=1, keepdim=True)


def paired_batch(
    seed: int, rows: int = ROWS, dim: int = DIM, noise: float = NOISE, dtype: torch.dtype = torch.float64
):
    """Retrieval-like batch: each caption is its clip's embedding plus noise."""
    generator = torch.Generator().manual_seed(seed)
    audio = unit_rows(generator, rows, dim, dtype)
    text = audio + noise * torch.randn(rows, dim, generator=generator, dtype=dtype) / math.sqrt(dim)
    return audio, text / text.norm(dim=1, keepdim=True)


class StandInModel(nn.Module):
    """Carries a scoring head, as AtrDualEncoderModel does."""

    def __init__(self, scoring_head: nn.Module) -> None:
        super().__init__()
        self.scoring_head = scoring_head


class StandInMahalanobisHead(nn.Module):
    """The scoring-head interface the objectives use: ``distance``, by explicit difference vectors."""

    kind = "mahalanobis"

    def __init__(self, metric_matrix: torch.Tensor) -> None:
        super().__init__()
        self.metric_matrix = nn.Parameter(metric_matrix.clone())

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        difference = x[:, None, :] - y[None, :, :]
        return torch.einsum("nmd,de,nme->nm", difference, self.metric_matrix, difference).clamp_min(0).sqrt()


def brute_force_mahalanobis(audio: np.ndarray, text: np.ndarray, metric: np.ndarray) -> np.ndarray:
    cost = np.empty((len(audio), len(text)))
    for i, x in enumerate(audio):
        for j, y in enumerate(text):
            cost[i, j] = math.sqrt(max((x - y) @ metric @ (x - y), 0.0))
    return cost


def brute_force_target(audio_ids: list[str]) -> np.ndarray:
    k = len(audio_ids)
    target = np.zeros((k, k))
    for i in range(k):
        group = [j for j in range(k) if audio_ids[j] == audio_ids[i]]
        for j in group:
            target[i, j] = 1.0 / (k * len(group))
    return target


def brute_force_kl(target: np.ndarray, plan: np.ndarray) -> float:
    total = 0.0
    for i in range(target.shape[0]):
        for j in range(target.shape[1]):
            if target[i, j] > 0:
                total += target[i, j] * math.log(target[i, j] / plan[i, j])
    return total


def pot_balanced_plan(cost: np.ndarray, reg: float) -> np.ndarray:
    k = cost.shape[0]
    uniform = np.full(k, 1.0 / k)
    return pot.sinkhorn(
        uniform, uniform, cost, reg, method="sinkhorn_log", numItermax=100_000, stopThr=POT_TOL
    )


def pot_partial_plan(cost: np.ndarray, reg: float, mass: float) -> np.ndarray:
    k = cost.shape[0]
    uniform = np.full(k, 1.0 / k)
    return pot.partial.entropic_partial_wasserstein(
        uniform, uniform, cost, reg, m=mass, numItermax=100_000, stopThr=POT_TOL
    )


def test_defaults_are_the_papers():
    assert DEFAULT_REG == 0.05  # m-LTM §5.3, Tables 6 and 8
    assert objective_parameters("iot")["reg"] == 0.05
    assert objective_parameters("iot_partial")["mass"] == DEFAULT_PARTIAL_MASS == 0.95


@pytest.mark.parametrize("reg", [0.1, 0.2])
def test_iot_loss_matches_pot_plan_euclidean(reg):
    audio, text = paired_batch(seed=0)
    output = build_objective({"name": "iot", "reg": reg, "tol": 1e-12, "max_iter": 10_000})(audio, text)

    cost = np.array([[np.linalg.norm(x - y) for y in text.numpy()] for x in audio.numpy()])
    plan = pot_balanced_plan(cost, reg)
    k = len(cost)
    reference = -sum(math.log(k * plan[i, i]) for i in range(k)) / k
    assert output.loss.item() == pytest.approx(reference, rel=1e-7, abs=1e-9)
    assert float(output.logs["loss_iot"]) == pytest.approx(reference, rel=1e-7)
    assert float(output.logs["iot_diagonal_mass"]) == pytest.approx(np.trace(plan), rel=1e-6)
    assert float(output.logs["iot_transported_mass"]) == pytest.approx(1.0, abs=1e-9)


def test_iot_loss_matches_pot_plan_mahalanobis_stand_in_and_real_head():
    audio, text = paired_batch(seed=1)
    generator = torch.Generator().manual_seed(2)
    factor = torch.eye(DIM, dtype=torch.float64) + 0.1 * torch.randn(
        DIM, DIM, generator=generator, dtype=torch.float64
    )
    metric = factor @ factor.T
    reg = 0.1
    reference_cost = brute_force_mahalanobis(audio.numpy(), text.numpy(), metric.numpy())
    plan = pot_balanced_plan(reference_cost, reg)
    reference = brute_force_kl(np.eye(ROWS) / ROWS, plan)

    objective = InverseOTObjective(reg=reg, tol=1e-12, max_iter=10_000)
    stand_in = StandInModel(StandInMahalanobisHead(metric))
    assert objective(audio, text, model=stand_in).loss.item() == pytest.approx(reference, rel=1e-7)

    real_head = AtrScoringHead("mahalanobis", dim=DIM, logit_scale_init=0.0).double()
    with torch.no_grad():
        real_head.metric_matrix.copy_(metric)
    assert objective(audio, text, model=StandInModel(real_head)).loss.item() == pytest.approx(
        reference, rel=1e-6
    )


@pytest.mark.parametrize("mass", [0.5, 0.8, 0.95])
def test_iot_partial_loss_matches_pot_partial_plan(mass):
    audio, text = paired_batch(seed=3)
    reg = 0.1
    config = {"name": "iot_partial", "reg": reg, "mass": mass, "tol": 1e-12, "max_iter": 10_000}
    output = build_objective(config)(audio, text)

    cost = torch.cdist(audio, text).numpy()
    plan = pot_partial_plan(cost, reg, mass)
    reference = brute_force_kl(np.eye(ROWS) / ROWS, plan)
    assert output.loss.item() == pytest.approx(reference, rel=1e-5)
    assert float(output.logs["iot_transported_mass"]) == pytest.approx(mass, rel=1e-5)
    assert float(output.logs["iot_diagonal_mass"]) == pytest.approx(np.trace(plan), rel=1e-5)


def test_partial_with_full_mass_is_balanced_iot():
    audio, text = paired_batch(seed=4)
    balanced = InverseOTObjective(reg=0.1, tol=1e-12, max_iter=10_000)(audio, text).loss
    partial = PartialInverseOTObjective(reg=0.1, mass=1.0, tol=1e-12, max_iter=10_000)(audio, text).loss
    assert partial.item() == pytest.approx(balanced.item(), rel=1e-5)


def test_partial_plan_leaves_a_mismatched_pair_out():
    """m-LTM §3.3: the mass that is not transported is taken from the noisy correspondence."""
    audio, text = paired_batch(seed=5, noise=0.5)
    text = text.clone()
    text[3] = -audio[3]  # a caption that describes another clip
    objective = PartialInverseOTObjective(mass=7 / 8, tol=1e-9)
    plan = objective.transport_log_plan(ground_cost(audio, text, None)).exp()
    row_mass = plan.sum(dim=1)
    assert row_mass[3] < 0.5 * row_mass.max()
    assert clear_argmax(-row_mass) == 3


def test_ground_cost_without_model_is_euclidean_and_with_model_uses_the_head():
    audio, text = paired_batch(seed=6, rows=4, dim=3)
    expected = np.array([[np.linalg.norm(x - y) for y in text.numpy()] for x in audio.numpy()])
    np.testing.assert_allclose(ground_cost(audio, text, None).numpy(), expected, rtol=1e-10)
    metric = torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64))
    with_head = ground_cost(audio, text, StandInModel(StandInMahalanobisHead(metric)))
    np.testing.assert_allclose(
        with_head.detach().numpy(),
        brute_force_mahalanobis(audio.numpy(), text.numpy(), metric.numpy()),
        rtol=1e-10,
    )


def test_matching_target_spreads_a_duplicate_group_over_its_pairs():
    audio_ids = ["a", "b", "a", "c", "a"]
    same_clip = torch.tensor([[x == y for y in audio_ids] for x in audio_ids])
    target = matching_target(same_clip, torch.float64)
    np.testing.assert_allclose(target.numpy(), brute_force_target(audio_ids), atol=1e-15)
    np.testing.assert_allclose(target.sum(dim=1).numpy(), np.full(5, 1 / 5))
    np.testing.assert_allclose(target.sum(dim=0).numpy(), np.full(5, 1 / 5))


def test_duplicate_clips_loss_matches_brute_force_and_is_not_penalised():
    """A clip drawn with two captions: its two audio rows are identical, so the plan splits their mass
    over both captions; the target does too, so the duplicates are not pushed apart."""
    audio, text = paired_batch(seed=7, rows=5)
    audio = audio.clone()
    audio[3] = audio[1]
    audio_ids = ["c0", "c1", "c2", "c1", "c4"]
    reg = 0.1
    objective = InverseOTObjective(reg=reg, tol=1e-12, max_iter=10_000)
    with_ids = objective(audio, text, batch={"audio_ids": audio_ids}).loss
    without_ids = objective(audio, text).loss

    plan = pot_balanced_plan(torch.cdist(audio, text).numpy(), reg)
    assert with_ids.item() == pytest.approx(brute_force_kl(brute_force_target(audio_ids), plan), rel=1e-7)
    assert with_ids.item() < without_ids.item()

    # The duplicate block's gradient does not separate the two captions of the same clip: moving the
    # captions together lowers (never raises) the loss.
    text_variable = text.clone().requires_grad_()
    objective(audio, text_variable, batch={"audio_ids": audio_ids}).loss.backward()
    gradient = text_variable.grad
    towards_each_other = (text[1] - text[3]) @ (gradient[3] - gradient[1])
    assert towards_each_other.item() <= 1e-10


def test_inverse_ot_loss_is_finite_when_the_plan_underflows():
    """Loss on the log plan: finite where exp(log Π) is 0 in float32."""
    log_plan = torch.full((3, 3), -200.0)
    target = torch.eye(3) / 3
    loss = inverse_ot_loss(log_plan, target)
    assert math.isfinite(loss.item())
    assert loss.item() == pytest.approx(200.0 - math.log(3), rel=1e-6)


@pytest.mark.parametrize("name", ["iot", "iot_partial"])
@pytest.mark.parametrize("reg", [0.01, 0.005])
def test_float32_gradients_finite_at_small_reg(name, reg):
    audio, text = paired_batch(seed=8, rows=32, dim=16, noise=0.5, dtype=torch.float32)
    audio.requires_grad_()
    text.requires_grad_()
    output = build_objective({"name": name, "reg": reg})(audio, text)
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert torch.isfinite(audio.grad).all() and torch.isfinite(text.grad).all()
    assert audio.grad.abs().sum() > 0
    assert all(math.isfinite(value) for value in output.logs.values())


def test_float32_gradients_finite_through_mahalanobis_head():
    audio, text = paired_batch(seed=9, rows=16, dim=8, noise=0.5, dtype=torch.float32)
    audio.requires_grad_()
    head = AtrScoringHead("mahalanobis", dim=8, logit_scale_init=0.0)
    InverseOTObjective(reg=0.01)(audio, text, model=StandInModel(head)).loss.backward()
    assert torch.isfinite(audio.grad).all()
    assert torch.isfinite(head.metric_matrix.grad).all() and head.metric_matrix.grad.abs().sum() > 0


def test_gradcheck_autograd_mode_float64():
    audio, text = paired_batch(seed=10, rows=3, dim=4, noise=2.0)
    objective = InverseOTObjective(reg=0.2, grad_mode="autograd", tol=1e-13, max_iter=5000)
    audio.requires_grad_()
    text.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: objective(x, y).loss, (audio, text), atol=1e-6, rtol=1e-4)


def test_one_step_gradient_matches_autograd_gradient():
    audio, text = paired_batch(seed=11)
    gradients = {}
    for grad_mode in ("one_step", "autograd"):
        variable = audio.clone().requires_grad_()
        objective = InverseOTObjective(reg=0.1, grad_mode=grad_mode, tol=1e-12, max_iter=10_000)
        objective(variable, text).loss.backward()
        gradients[grad_mode] = variable.grad
    torch.testing.assert_close(gradients["one_step"], gradients["autograd"], rtol=1e-4, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [32, 128, 256])
def test_default_solver_gives_the_cost_gradient_within_1e_4_in_float32(batch):
    # Near-diagonal retrieval batches on which Sinkhorn alone crawls. The IOT loss -(1/k) Σ log(k Π_ii) with
    # uniform marginals has the closed-form cost gradient (I/k - Π*) / ε; Π* from POT (float64, marginals to 1e-9).
    cost = clustered_retrieval_cost(batch).requires_grad_()
    objective = InverseOTObjective()
    (-(objective.transport_log_plan(cost).diagonal() + math.log(batch)).mean()).backward()
    uniform = np.full(batch, 1 / batch)
    exact_plan = pot.sinkhorn(
        uniform,
        uniform,
        cost.detach().double().numpy(),
        objective.reg,
        method="sinkhorn",
        stopThr=1e-9,
        numItermax=100_000,
    )
    exact = (np.eye(batch) / batch - exact_plan) / objective.reg
    assert np.linalg.norm(cost.grad.double().numpy() - exact) / np.linalg.norm(exact) < 1e-4


def test_training_a_free_embedding_lowers_the_loss():
    audio, text = paired_batch(seed=12, rows=8, dim=8, noise=3.0, dtype=torch.float32)
    audio = audio.clone().requires_grad_()
    objective = InverseOTObjective(reg=0.1)
    optimizer = torch.optim.SGD([audio], lr=0.5)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss = objective(audio, text).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"name": "iot", "reg": -0.05}, "`reg`"),
        ({"name": "iot", "reg": 0}, "`reg`"),
        ({"name": "iot", "reg": float("nan")}, "`reg`"),
        ({"name": "iot", "max_iter": 0}, "`max_iter`"),
        ({"name": "iot", "tol": -1.0}, "`tol`"),
        ({"name": "iot", "grad_mode": "envelope"}, "`grad_mode`"),
        ({"name": "iot_partial", "mass": 0.0}, "`mass`"),
        ({"name": "iot_partial", "mass": 1.5}, "`mass`"),
        ({"name": "iot_partial", "mass": -0.2}, "`mass`"),
        ({"name": "iot_partial", "reg": -1.0}, "`reg`"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(config, message):
    with pytest.raises(ValueError, match=message) as error:
        build_objective(config)
    assert config["name"] in str(error.value)


def test_multilingual_or_mismatched_embeddings_are_rejected():
    audio, text = paired_batch(seed=13, rows=4, dim=3)
    with pytest.raises(ValueError, match=r"\(batch, dim\)"):
        InverseOTObjective()(audio, text[:, None, :].expand(4, 2, 3))
    with pytest.raises(ValueError, match="rows"):
        InverseOTObjective()(audio, text[:3])
    with pytest.raises(ValueError, match="audio_ids"):
        InverseOTObjective()(audio, text, batch={"audio_ids": ["a", "b"]})


def test_partial_default_gradient_matches_unrolled_autograd():
    torch.manual_seed(3)
    audio = torch.nn.functional.normalize(torch.randn(8, 6, dtype=torch.float64), dim=-1)
    text = torch.nn.functional.normalize(audio + 0.3 * torch.randn(8, 6, dtype=torch.float64), dim=-1)
    gradients = {}
    for grad_mode in ("implicit", "autograd"):
        variable = audio.clone().requires_grad_()
        # At reg=0.2 the solver reaches tol=1e-12 in a few hundred iterations, so both gradients are of the converged
        # plan (at 0.1 it stops 2e-6 short after 20,000 iterations, and unrolling them took 11 s).
        objective = PartialInverseOTObjective(
            reg=0.2, mass=0.8, grad_mode=grad_mode, tol=1e-12, max_iter=20_000
        )
        objective(variable, text).loss.backward()
        gradients[grad_mode] = variable.grad
    assert PartialInverseOTObjective().grad_mode == "implicit"
    scale = gradients["autograd"].abs().max().item()
    torch.testing.assert_close(gradients["implicit"], gradients["autograd"], rtol=1e-3, atol=1e-4 * scale)
