"""DART's UWD-R term and objective against direct numpy / scipy / POT references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import ot as pot
import pytest
import scipy.stats
import torch
from safetensors.torch import load_file, save_file

import hf_atr.objectives.dart as dart_module
from hf_atr.objectives.dart import (
    DEGENERATE_CHANNEL_KURTOSIS,
    DartObjective,
    UnbalancedFeatureTransport,
    channel_statistics,
    feature_cost,
    marginal_entropy,
    normalised_marginal,
    reliability_scores,
)
from hf_atr.objectives.mltm import InverseOTObjective
from hf_atr.objectives.registry import available_objectives, build_objective, objective_parameters

UWD_REG, UWD_MARGINAL_REG = 0.03, 0.05


def batch_embeddings(seed: int, rows: int = 8, dim: int = 6, dtype: torch.dtype = torch.float64):
    """Unit-norm paired embeddings whose channels differ in scale, correlation and tails."""
    generator = torch.Generator().manual_seed(seed)
    audio = torch.randn(rows, dim, generator=generator, dtype=dtype)
    text = audio + torch.randn(rows, dim, generator=generator, dtype=dtype)
    return audio / audio.norm(dim=1, keepdim=True), text / text.norm(dim=1, keepdim=True)


def numpy_reliability(audio: np.ndarray, text: np.ndarray) -> np.ndarray:
    """DART App. B, Eq. 18–21, channel by channel with numpy / scipy."""
    scores = []
    for j in range(audio.shape[1]):
        correlation = np.corrcoef(audio[:, j], text[:, j])[0, 1]
        variance = np.var(audio[:, j]) + np.var(text[:, j])
        kurtosis = scipy.stats.kurtosis(audio[:, j], fisher=False) + scipy.stats.kurtosis(
            text[:, j], fisher=False
        )
        scores.append(1.0 / (1.0 + math.exp(-(correlation - variance - kurtosis))))
    return np.array(scores)


def brute_force_feature_cost(audio: np.ndarray, text: np.ndarray) -> np.ndarray:
    cost = np.empty((audio.shape[1], text.shape[1]))
    for i in range(audio.shape[1]):
        for j in range(text.shape[1]):
            cost[i, j] = math.sqrt(sum((audio[n, i] - text[n, j]) ** 2 for n in range(audio.shape[0])))
    return cost


def pot_uwd(cost: np.ndarray, source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """⟨C, P⟩ with POT's unbalanced plan (KL-relaxed marginals, entropic KL(P ‖ a bᵀ) regularisation)."""
    plan = pot.unbalanced.sinkhorn_unbalanced(
        source, target, cost, UWD_REG, UWD_MARGINAL_REG, reg_type="kl", numItermax=100_000, stopThr=1e-13
    )
    explicit = sum(cost[i, j] * plan[i, j] for i in range(cost.shape[0]) for j in range(cost.shape[1]))
    return explicit, plan


# ---------------------------------------------------------------------------------------------------
# Feature cost and reliability statistics
# ---------------------------------------------------------------------------------------------------


def test_feature_cost_matches_brute_force():
    audio, text = batch_embeddings(seed=0, rows=5, dim=4)
    np.testing.assert_allclose(
        feature_cost(audio, text).numpy(), brute_force_feature_cost(audio.numpy(), text.numpy()), rtol=1e-10
    )
    wider_text = torch.randn(5, 7, dtype=torch.float64)
    assert feature_cost(audio, wider_text).shape == (4, 7)


def test_reliability_scores_match_numpy_and_scipy():
    audio, text = batch_embeddings(seed=1, rows=9, dim=5)
    statistics = channel_statistics(audio, text)
    a, t = audio.numpy(), text.numpy()
    for j in range(5):
        assert statistics.correlation[j].item() == pytest.approx(
            np.corrcoef(a[:, j], t[:, j])[0, 1], rel=1e-10
        )
        assert statistics.variance[j].item() == pytest.approx(np.var(a[:, j]) + np.var(t[:, j]), rel=1e-10)
        kurtosis = scipy.stats.kurtosis(a[:, j], fisher=False) + scipy.stats.kurtosis(t[:, j], fisher=False)
        assert statistics.kurtosis[j].item() == pytest.approx(kurtosis, rel=1e-10)
    np.testing.assert_allclose(reliability_scores(audio, text).numpy(), numpy_reliability(a, t), rtol=1e-10)
    float32_scores = reliability_scores(audio.float(), text.float())
    assert float32_scores.dtype == torch.float32
    np.testing.assert_allclose(float32_scores.numpy(), numpy_reliability(a, t), rtol=1e-4)


def test_reliability_ordering_with_constant_and_heavy_tailed_channels():
    """Correlated > uncorrelated > constant (no information) > outlier-dominated; all finite."""
    rows = 32
    grid = torch.linspace(-1.0, 1.0, rows, dtype=torch.float64)  # light tails: kurtosis 1.8
    shuffled = grid[torch.randperm(rows, generator=torch.Generator().manual_seed(0))]
    spike = torch.zeros(rows, dtype=torch.float64)
    spike[5] = 1.0
    audio = torch.stack(
        [
            0.1 * grid,
            0.1 * grid,
            torch.full((rows,), 0.3, dtype=torch.float64),
            spike,
            torch.zeros(rows, dtype=torch.float64),
        ],
        dim=1,
    )
    text = torch.stack(
        [0.1 * grid, 0.1 * shuffled, torch.full((rows,), -0.2, dtype=torch.float64), spike, 0.1 * grid], dim=1
    )
    statistics = channel_statistics(audio, text)
    scores = reliability_scores(audio, text)
    assert torch.isfinite(scores).all() and (scores > 0).all()
    for field in statistics:
        assert torch.isfinite(field).all()
    correlated, uncorrelated, constant, heavy_tailed, one_side_constant = scores.tolist()
    assert correlated > uncorrelated > constant > heavy_tailed
    # Constant channels: correlation 0, variance 0, Gaussian kurtosis on the constant side.
    assert statistics.correlation[2].item() == 0.0
    assert statistics.variance[2].item() == pytest.approx(0.0, abs=1e-20)
    assert statistics.kurtosis[2].item() == 2 * DEGENERATE_CHANNEL_KURTOSIS
    assert statistics.correlation[4].item() == 0.0
    assert statistics.kurtosis[4].item() == pytest.approx(DEGENERATE_CHANNEL_KURTOSIS + 1.8, rel=0.05)
    assert uncorrelated > one_side_constant > constant
    # Float32 and a single-row batch (every channel constant): still finite, and equal scores.
    assert torch.isfinite(reliability_scores(audio.float(), text.float())).all()
    single = reliability_scores(audio[:1].float(), text[:1].float())
    assert torch.isfinite(single).all() and torch.allclose(single, single[0].expand_as(single))


def test_marginal_helpers():
    marginal = normalised_marginal(torch.tensor([1.0, 3.0, 0.0]))
    assert marginal.sum().item() == pytest.approx(1.0)
    assert marginal[2].item() > 0  # floored, so its log is finite in the solver
    assert marginal_entropy(torch.full((8,), 1 / 8)) == pytest.approx(math.log(8))


# ---------------------------------------------------------------------------------------------------
# The UWD-R term
# ---------------------------------------------------------------------------------------------------


def test_uwd_uniform_value_and_gradient_match_pot_plan():
    audio, text = batch_embeddings(seed=2)
    audio.requires_grad_()
    output = UnbalancedFeatureTransport(marginals="uniform", tol=1e-12, max_iter=100_000)(audio, text)
    cost = brute_force_feature_cost(audio.detach().numpy(), text.numpy())
    uniform = np.full(6, 1 / 6)
    reference, plan = pot_uwd(cost, uniform, uniform)
    assert output.loss.item() == pytest.approx(reference, rel=1e-6)
    assert float(output.logs["loss_uwd"]) == pytest.approx(reference, rel=1e-6)
    assert float(output.logs["uwd_transported_mass"]) == pytest.approx(plan.sum(), rel=1e-6)
    assert float(output.logs["reliability_entropy"]) == pytest.approx(math.log(6))

    # Gradient through the cost only (plan detached): that of ⟨C(audio), P_POT⟩.
    output.loss.backward()
    reference_audio = audio.detach().clone().requires_grad_()
    (feature_cost(reference_audio, text) * torch.as_tensor(plan)).sum().backward()
    torch.testing.assert_close(audio.grad, reference_audio.grad, rtol=1e-5, atol=1e-9)


def test_uwd_reliability_marginals_match_numpy_scores_and_pot_plan():
    audio, text = batch_embeddings(seed=3)
    transport = UnbalancedFeatureTransport(tol=1e-12, max_iter=100_000)
    output = transport(audio, text)  # training mode: the first batch initialises the EMA
    scores = numpy_reliability(audio.numpy(), text.numpy())
    np.testing.assert_allclose(transport.reliability_ema.numpy(), scores, rtol=1e-5)
    marginal = scores / scores.sum()
    reference, _ = pot_uwd(brute_force_feature_cost(audio.numpy(), text.numpy()), marginal, marginal)
    assert output.loss.item() == pytest.approx(reference, rel=1e-5)
    entropy = -(marginal * np.log(marginal)).sum()
    assert float(output.logs["reliability_entropy"]) == pytest.approx(entropy, rel=1e-5)


def test_uwd_entropic_term_is_kl_to_the_marginal_product_not_the_entropy():
    """With reliability (non-uniform) marginals POT's reg_type="kl" and "entropy" differ; ours is "kl"."""
    audio, text = batch_embeddings(seed=3)
    output = UnbalancedFeatureTransport(tol=1e-12, max_iter=100_000)(audio, text)
    scores = numpy_reliability(audio.numpy(), text.numpy())
    marginal = scores / scores.sum()
    cost = brute_force_feature_cost(audio.numpy(), text.numpy())
    with_kl, _ = pot_uwd(cost, marginal, marginal)
    with warnings.catch_warnings():  # POT notes that "entropy" ignores its `c` argument
        warnings.simplefilter("ignore", UserWarning)
        entropy_plan = pot.unbalanced.sinkhorn_unbalanced(
            marginal,
            marginal,
            cost,
            UWD_REG,
            UWD_MARGINAL_REG,
            reg_type="entropy",
            numItermax=100_000,
            stopThr=1e-13,
        )
    with_entropy = float((cost * entropy_plan).sum())
    assert output.loss.item() == pytest.approx(with_kl, rel=1e-5)
    assert abs(with_entropy - with_kl) > 0.1 * with_kl


def test_rms_feature_cost_is_eq_7_over_root_batch_and_keeps_the_mass_at_any_batch_size():
    audio, text = batch_embeddings(seed=21)
    output = UnbalancedFeatureTransport(marginals="uniform", feature_cost="rms", tol=1e-12, max_iter=100_000)(
        audio, text
    )
    cost = brute_force_feature_cost(audio.numpy(), text.numpy()) / math.sqrt(audio.shape[0])
    reference, plan = pot_uwd(cost, np.full(6, 1 / 6), np.full(6, 1 / 6))
    assert output.loss.item() == pytest.approx(reference, rel=1e-6)
    assert float(output.logs["uwd_transported_mass"]) == pytest.approx(plan.sum(), rel=1e-6)

    def mass(batch: int, kind: str) -> float:
        generator = torch.Generator().manual_seed(batch)
        audio, text = (
            torch.nn.functional.normalize(torch.randn(batch, 128, generator=generator), dim=-1) for _ in "at"
        )
        return float(UnbalancedFeatureTransport(feature_cost=kind)(audio, text).logs["uwd_transported_mass"])

    assert mass(128, "euclidean") < 0.2 * mass(16, "euclidean")  # Eq. 7's costs grow like √batch
    assert mass(128, "rms") == pytest.approx(mass(16, "rms"), rel=0.2) and mass(128, "rms") > 0.2


def test_dart_logs_the_gradient_share_of_each_term():
    audio, text = batch_embeddings(seed=22, dtype=torch.float32)
    audio.requires_grad_()
    objective = DartObjective()
    output = objective(audio, text)
    base_gradient = torch.autograd.grad(InverseOTObjective(reg=0.03)(audio, text).loss, audio)[0]
    # A fresh term initialises its EMA from this batch, as the objective's did.
    uwd_gradient = torch.autograd.grad(UnbalancedFeatureTransport()(audio, text).loss, audio)[0]
    assert float(output.logs["base_gradient_norm"]) == pytest.approx(base_gradient.norm().item(), rel=1e-4)
    assert float(output.logs["uwd_gradient_norm"]) == pytest.approx(
        0.5 * uwd_gradient.norm().item(), rel=1e-4
    )
    share = output.logs["uwd_gradient_norm"] / (
        output.logs["uwd_gradient_norm"] + output.logs["base_gradient_norm"]
    )
    assert float(output.logs["uwd_gradient_share"]) == pytest.approx(float(share))
    output.loss.backward()  # the logging kept the graph
    torch.testing.assert_close(audio.grad, base_gradient + 0.5 * uwd_gradient, rtol=1e-4, atol=1e-7)
    assert "uwd_gradient_share" not in DartObjective(log_gradient_share=False)(audio, text).logs
    assert "uwd_gradient_share" not in DartObjective()(audio.detach(), text).logs


@pytest.mark.parametrize("mode", ["norm", "variance"])
def test_uwd_appendix_i_marginals_match_pot_plan(mode):
    audio, text = batch_embeddings(seed=4)
    output = UnbalancedFeatureTransport(marginals=mode, tol=1e-12, max_iter=100_000)(audio, text)
    a, t = audio.numpy(), text.numpy()
    if mode == "norm":
        source, target = np.linalg.norm(a, axis=0), np.linalg.norm(t, axis=0)
    else:
        source, target = np.var(a, axis=0), np.var(t, axis=0)
    reference, _ = pot_uwd(brute_force_feature_cost(a, t), source / source.sum(), target / target.sum())
    assert output.loss.item() == pytest.approx(reference, rel=1e-5)


def test_ema_update_and_eval_mode():
    first, second = batch_embeddings(seed=5), batch_embeddings(seed=6)
    transport = UnbalancedFeatureTransport()
    transport(*first)
    transport(*second)
    expected = 0.9 * numpy_reliability(*(x.numpy() for x in first)) + 0.1 * numpy_reliability(
        *(x.numpy() for x in second)
    )
    np.testing.assert_allclose(transport.reliability_ema.numpy(), expected, rtol=1e-5)
    assert transport.num_updates.item() == 2

    stored = transport.reliability_ema.clone()
    with torch.no_grad():  # an evaluation loop
        transport(*batch_embeddings(seed=7))
    transport.eval()
    transport(*batch_embeddings(seed=8))
    torch.testing.assert_close(transport.reliability_ema, stored)
    assert transport.num_updates.item() == 2


def test_ema_state_round_trips_through_state_dict_and_safetensors(tmp_path):
    objective = DartObjective(hysteresis_low=0.9, hysteresis_high=1.1)
    for seed in range(3):
        objective(*batch_embeddings(seed=seed, dtype=torch.float32))
    state = objective.state_dict()
    assert {
        "feature_transport.reliability_ema",
        "feature_transport.channel_active",
        "feature_transport.num_updates",
    } <= set(state)
    save_file({key: value.contiguous() for key, value in state.items()}, tmp_path / "objective.safetensors")

    restored = DartObjective(hysteresis_low=0.9, hysteresis_high=1.1)
    restored.load_state_dict(load_file(tmp_path / "objective.safetensors"), strict=True)
    for key, value in state.items():
        torch.testing.assert_close(restored.state_dict()[key], value)
    batch = batch_embeddings(seed=10, dtype=torch.float32)
    assert restored(*batch).loss.item() == pytest.approx(objective(*batch).loss.item(), rel=1e-6)
    torch.testing.assert_close(
        restored.feature_transport.reliability_ema, objective.feature_transport.reliability_ema
    )

    # A fresh objective's empty state also saves and loads.
    fresh_state = DartObjective().state_dict()
    save_file({key: value.contiguous() for key, value in fresh_state.items()}, tmp_path / "fresh.safetensors")
    DartObjective().load_state_dict(load_file(tmp_path / "fresh.safetensors"))


def test_the_update_count_is_kept_on_the_host_and_read_again_after_loading():
    transport = UnbalancedFeatureTransport()
    for seed in range(2):
        transport(*batch_embeddings(seed=seed))
    assert transport.updates() == transport.num_updates.item() == 2
    restored = UnbalancedFeatureTransport()
    assert restored.updates() == 0
    restored.load_state_dict(transport.state_dict())
    assert restored.updates() == 2
    restored(*batch_embeddings(seed=3))
    assert restored.updates() == restored.num_updates.item() == 3


def test_warmup_then_top_k_channels():
    transport = UnbalancedFeatureTransport(warmup_steps=2, top_k_channels=3)
    for seed in range(2):
        assert transport(*batch_embeddings(seed=seed)).logs["uwd_channels"] == 6.0
    audio, text = batch_embeddings(seed=2)
    assert transport(audio, text).logs["uwd_channels"] == 3.0
    chosen = transport.selected_channels(transport.reliability_ema)
    expected = torch.sort(transport.reliability_ema.topk(3).indices).values
    torch.testing.assert_close(chosen, expected)

    # The loss is the UWD of the selected channels with the renormalised reliabilities.
    transport.eval()
    output = transport(audio, text)
    scores = transport.reliability_ema[chosen].numpy().astype(np.float64)
    marginal = scores / scores.sum()
    a, t = audio[:, chosen].numpy(), text[:, chosen].numpy()
    reference, _ = pot_uwd(brute_force_feature_cost(a, t), marginal, marginal)
    assert output.loss.item() == pytest.approx(reference, rel=1e-4)


def test_hysteresis_suppresses_below_low_and_reactivates_above_high(monkeypatch):
    transport = UnbalancedFeatureTransport(
        hysteresis_low=0.8, hysteresis_high=1.2, ema_decay=0.0, warmup_steps=1
    )
    transport(*batch_embeddings(seed=0))  # warm-up update: sizes the state, every channel active
    # ema_decay = 0: the EMA is the last batch's scores, so we can drive it channel by channel.
    scripted = iter(
        [
            torch.tensor([1.0, 1.0, 0.5, 1.0, 1.0, 1.0]),  # channel 2 below low: suppressed
            torch.tensor([1.0, 1.0, 1.1, 1.0, 1.0, 1.0]),  # back above low but not above high: stays off
            torch.tensor([1.0, 1.0, 1.5, 0.9, 1.0, 1.0]),  # above high: on again; channel 3 still ≥ low
        ]
    )
    monkeypatch.setattr(dart_module, "reliability_scores", lambda audio, text: next(scripted).to(audio))
    actives = []
    for seed in range(3):
        transport(*batch_embeddings(seed=seed))
        actives.append(transport.channel_active.tolist())
    assert actives[0] == [True, True, False, True, True, True]
    assert actives[1] == [True, True, False, True, True, True]
    assert actives[2] == [True, True, True, True, True, True]


def test_freeze_stops_the_reliability_state():
    transport = UnbalancedFeatureTransport(freeze_after_steps=2)
    for seed in range(2):
        transport(*batch_embeddings(seed=seed))
    frozen = transport.reliability_ema.clone()
    assert transport.frozen
    transport(*batch_embeddings(seed=5))
    torch.testing.assert_close(transport.reliability_ema, frozen)
    assert transport.num_updates.item() == 2


def test_zero_variance_channels_give_finite_loss_and_gradients():
    audio, text = batch_embeddings(seed=8, rows=16, dim=12, dtype=torch.float32)
    audio, text = audio.clone(), text.clone()
    audio[:, 0] = 0.25
    text[:, 0] = 0.25
    audio[:, 1] = 0.0
    text[:, 3] = torch.tensor([5.0] + [0.0] * 15)  # heavy-tailed
    audio.requires_grad_()
    text.requires_grad_()
    output = build_objective({"name": "dart"})(audio, text)
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert torch.isfinite(audio.grad).all() and torch.isfinite(text.grad).all()
    assert all(math.isfinite(value) for value in output.logs.values())


@pytest.mark.parametrize("reg", [0.01, 0.005])
def test_dart_float32_gradients_finite_at_small_reg(reg):
    generator = torch.Generator().manual_seed(9)
    audio = torch.nn.functional.normalize(torch.randn(32, 64, generator=generator), dim=1)
    text = torch.nn.functional.normalize(audio + 0.5 * torch.randn(32, 64, generator=generator) / 8, dim=1)
    audio.requires_grad_()
    text.requires_grad_()
    objective = build_objective({"name": "dart", "base": {"name": "iot", "reg": reg}, "uwd_reg": reg})
    output = objective(audio, text)
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert torch.isfinite(audio.grad).all() and torch.isfinite(text.grad).all()


# ---------------------------------------------------------------------------------------------------
# The objective: composition, registry, errors
# ---------------------------------------------------------------------------------------------------


def test_dart_defaults_are_the_papers():
    parameters = objective_parameters("dart")
    assert parameters["uwd_weight"] == 0.5 and parameters["uwd_reg"] == 0.03
    assert parameters["uwd_marginal_reg"] == 0.05 and parameters["ema_decay"] == 0.9
    objective = build_objective({"name": "dart"})
    assert isinstance(objective.base, InverseOTObjective) and objective.base.reg == 0.03
    assert {"iot", "iot_partial", "dart"} <= set(available_objectives())


def test_dart_is_iot_plus_half_uwd():
    audio, text = batch_embeddings(seed=13, dtype=torch.float32)
    batch = {"audio_ids": ["a", "b", "c", "a", "d", "e", "f", "g"]}
    output = DartObjective()(audio, text, batch=batch)
    iot = InverseOTObjective(reg=0.03)(audio, text, batch=batch)
    uwd = UnbalancedFeatureTransport()(audio, text)
    assert output.loss.item() == pytest.approx(iot.loss.item() + 0.5 * uwd.loss.item(), rel=1e-5)
    for key in ("loss_iot", "iot_diagonal_mass", "loss_uwd", "uwd_transported_mass", "reliability_entropy"):
        value = output.logs[
            key
        ]  # 0-dim tensors on the embeddings' device, read by the trainer at logging steps
        assert isinstance(value, torch.Tensor) and value.dim() == 0 and not value.requires_grad


@pytest.mark.parametrize(
    "base",
    [
        "contrastive",
        {"name": "contrastive", "temperature": 0.05},
        "triplet",
        {"name": "iot_partial", "mass": 0.9},
    ],
)
def test_uwd_composes_with_other_base_objectives(base):
    audio, text = batch_embeddings(seed=14, dtype=torch.float32)
    audio.requires_grad_()
    config = base if isinstance(base, dict) else {"name": base}
    objective = build_objective({"name": "dart", "base": base, "uwd_weight": 0.7})
    output = objective(audio, text)
    base_output = build_objective(config)(audio, text)
    uwd = UnbalancedFeatureTransport()(audio, text)
    assert output.loss.item() == pytest.approx(base_output.loss.item() + 0.7 * uwd.loss.item(), rel=1e-5)
    assert set(base_output.logs) <= set(output.logs) and "loss_uwd" in output.logs
    output.loss.backward()
    assert torch.isfinite(audio.grad).all()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"base": "no_such_objective"}, "Unknown objective 'no_such_objective'"),
        ({"base": "dart"}, "cannot be 'dart'"),
        ({"base": 3}, "`base`"),
        ({"base": {"name": "iot", "reg": -1.0}}, "`reg`"),
        ({"base": {"name": "iot_partial", "mass": 2.0}}, "`mass`"),
        ({"uwd_reg": -0.03}, "`uwd_reg`"),
        ({"uwd_marginal_reg": 0.0}, "`uwd_marginal_reg`"),
        ({"uwd_weight": -0.5}, "`uwd_weight`"),
        ({"marginals": "entropy"}, "`marginals`"),
        ({"ema_decay": 1.0}, "`ema_decay`"),
        ({"hysteresis_low": 0.5}, "hysteresis_high"),
        ({"hysteresis_low": 1.5, "hysteresis_high": 1.2}, "hysteresis_low ≤ hysteresis_high"),
        ({"top_k_channels": 0}, "`top_k_channels`"),
        ({"freeze_after_steps": 0}, "`freeze_after_steps`"),
        ({"warmup_steps": -1}, "`warmup_steps`"),
        ({"marginals": "uniform", "top_k_channels": 4}, "marginals='reliability'"),
        ({"tol": -1.0}, "`tol`"),
        ({"feature_cost": "l1"}, "`feature_cost` must be one of ('euclidean', 'rms')"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        build_objective({"name": "dart", **config})
    assert "dart" in str(error.value)


def test_bad_inputs_raise_clear_errors():
    audio, text = batch_embeddings(seed=15)
    with pytest.raises(ValueError, match="same dim"):
        UnbalancedFeatureTransport()(audio, torch.randn(8, 5, dtype=torch.float64))
    transport = UnbalancedFeatureTransport()
    transport(audio, text)
    with pytest.raises(ValueError, match="projection_dim"):
        transport(torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="rows"):
        transport(audio, text[:4])


def test_half_precision_embeddings_are_transported_in_float32():
    audio, text = batch_embeddings(seed=16, dtype=torch.float32)
    reference = DartObjective()(audio, text).loss.item()
    audio_half = audio.bfloat16().requires_grad_()
    output = DartObjective()(audio_half, text.bfloat16())
    assert output.loss.dtype == torch.float32
    assert output.loss.item() == pytest.approx(reference, rel=0.05)
    output.loss.backward()
    assert audio_half.grad.dtype == torch.bfloat16 and torch.isfinite(audio_half.grad).all()


def test_dart_takes_the_uwd_terms_hyperparameters_under_their_config_names():
    parameters = objective_parameters("dart")
    uwd = UnbalancedFeatureTransport.hyperparameters()
    renamed = {"reg": "uwd_reg", "marginal_reg": "uwd_marginal_reg"}
    assert set(parameters) == {"base", "uwd_weight", "log_gradient_share"} | {
        renamed.get(key, key) for key in uwd
    }
    assert all(parameters[renamed.get(key, key)] == default for key, default in uwd.items())
    transport = DartObjective(
        uwd_reg=0.02, uwd_marginal_reg=0.1, top_k_channels=4, tol=1e-7
    ).feature_transport
    assert (transport.reg, transport.marginal_reg, transport.top_k_channels, transport.tol) == (
        0.02,
        0.1,
        4,
        1e-7,
    )
    accepted = (
        r"it accepts \['base', 'ema_decay', .*'uwd_marginal_reg', 'uwd_reg', 'uwd_weight', 'warmup_steps'\]"
    )
    with pytest.raises(
        ValueError, match=r"Objective 'dart' got unknown hyperparameter\(s\) \['reg'\]; " + accepted
    ):
        DartObjective(reg=0.02)
    with pytest.raises(
        ValueError, match=r"Objective 'dart' got unknown hyperparameter\(s\) \['marginal_reg'\]"
    ):
        build_objective({"name": "dart", "marginal_reg": 0.1})
