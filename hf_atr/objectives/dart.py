"""DART (Dual-level Alignment via Robust Transport, ICLR 2026), one objective: the UWD-R term and its sum.

DART adds to an instance-level objective (by default m-LTM's inverse OT) a feature-level term: each
embedding channel, seen across the batch, is a point, and the audio channels are transported onto the
text channels by entropic unbalanced OT whose marginals favour reliable channels (UWD-R, DART Eq. 7–13).
:class:`UnbalancedFeatureTransport` is that term as a module, :class:`DartObjective` (``"dart"``) the sum
``L_base + λ·L_UWD-R`` (Eq. 14), with any registered instance-level objective as base (DART Tab. 11)::

    build_objective({"name": "dart"})                                    # iot (ε = 0.03) + 0.5·UWD-R
    build_objective({"name": "dart", "base": "contrastive"})             # contrastive + 0.5·UWD-R
    build_objective({"name": "dart", "base": {"name": "triplet", "margin": 0.2}, "uwd_weight": 0.7})

At the paper's settings (ε = 0.03, τ = 0.05, d = 512, unit embeddings) the feature-level plan keeps little
mass (8 % at batch 32, 0.5 % at batch 128, measured on random embeddings) because the costs of Eq. 7 grow
like √batch; ``feature_cost="rms"`` divides them by √batch so that the transported mass no longer depends
on the batch size. The logs report the transported mass and the UWD term's share of the gradient
(``docs/dart_reproduction.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

from ..ot import unbalanced_sinkhorn_plan
from ..ot.utils import DEFAULT_MAX_ITER, DEFAULT_TOL, check_positive, check_solver_options
from .batch import check_pair_embeddings
from .registry import (
    Objective,
    ObjectiveOutput,
    build_objective,
    check_known_hyperparameters,
    default_scoring,
    register_objective,
)

DART_CITATION = (
    "Guo, Tu, Xu. Beyond Instance-Level Alignment: Dual-Level Optimal Transport for Audio-Text Retrieval "
    "(DART). ICLR 2026. https://openreview.net/forum?id=cFhcd4WGjO"
)
# DART Tab. 6 (every setting): λ = 0.5, ε = 0.03, τ = 0.05; §3.3: EMA β = 0.9.
DEFAULT_UWD_WEIGHT = 0.5
DEFAULT_UWD_REG = 0.03
DEFAULT_UWD_MARGINAL_REG = 0.05
DEFAULT_EMA_DECAY = 0.9
# DART's instance-level term: IOT with the ε of its Tab. 6 (m-LTM's own default is 0.05).
DEFAULT_BASE_OBJECTIVE: Mapping[str, Any] = {"name": "iot", "reg": DEFAULT_UWD_REG}
# The parameters of UnbalancedFeatureTransport that DART's config names differently (the others keep their names).
UWD_CONFIG_NAMES: Mapping[str, str] = {"reg": "uwd_reg", "marginal_reg": "uwd_marginal_reg"}

# "reliability" is RAM (DART §3.3); the others are the alternatives of DART App. I (Tab. 8).
MARGINAL_MODES = ("reliability", "uniform", "norm", "variance")
# "euclidean" is DART Eq. 7 as written; "rms" divides it by √batch (a documented departure, off by default).
FEATURE_COSTS = ("euclidean", "rms")
# A channel that is constant over the batch has no defined correlation or kurtosis. It carries no
# information, so it gets correlation 0 and the kurtosis of a Gaussian (no evidence of heavy tails):
# it ranks below every informative, well-behaved channel and above outlier-dominated ones.
DEGENERATE_CHANNEL_KURTOSIS = 3.0
# A channel whose standard deviation is below this fraction of its largest magnitude is constant up to
# float32 round-off.
DEGENERATE_RELATIVE_STD = 1e-6


class ChannelStatistics(NamedTuple):
    """Per-channel statistics of DART App. B, each ``(dim,)`` float64.

    Attributes:
        correlation: Pearson correlation of ``U[:, j]`` and ``V[:, j]`` (Eq. 18).
        variance: ``Var(U[:, j]) + Var(V[:, j])`` (Eq. 19), population variances.
        kurtosis: ``Kurt(U[:, j]) + Kurt(V[:, j])`` (Eq. 20), ``Kurt(z) = E[(z − μ)⁴] / σ⁴``.
    """

    correlation: torch.Tensor
    variance: torch.Tensor
    kurtosis: torch.Tensor


def feature_cost(
    audio_embeds: torch.Tensor, text_embeds: torch.Tensor, kind: str = "euclidean"
) -> torch.Tensor:
    """``(d_u, d_v)`` feature cost between the channels of a batch (DART Eq. 7).

    ``"euclidean"``: ``C[i, j] = ‖U[:, i] − V[:, j]‖₂`` (Eq. 7). ``"rms"``: the same divided by ``√batch``,
    the root-mean-square difference per sample. Eq. 7's entries grow like ``√batch`` (DART App. C.3: they
    concentrate around ``√(m(D² + σ²))``), so at a fixed τ larger batches transport ever less mass; the
    RMS cost estimates the batch-free ``√(D² + σ²)``. Channels are the points: the cost is a cdist of the
    transposed embeddings, never a ``d_u × d_v × batch`` tensor.

    Args:
        audio_embeds: ``(batch, d_u)`` audio embeddings ``U``.
        text_embeds: ``(batch, d_v)`` text embeddings ``V``.
        kind: ``"euclidean"`` (the paper) or ``"rms"``.
    """
    cost = torch.cdist(audio_embeds.T.contiguous(), text_embeds.T.contiguous())
    return cost / math.sqrt(audio_embeds.shape[0]) if kind == "rms" else cost


def _centred_moments(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Centred values ``(batch, dim)``, population variance ``(dim,)`` and degenerate-channel mask ``(dim,)``."""
    centred = values - values.mean(dim=0)
    variance = centred.square().mean(dim=0)
    scale = values.abs().amax(dim=0)
    degenerate = variance <= (DEGENERATE_RELATIVE_STD * scale).square()
    return centred, variance, degenerate


def _kurtosis(centred: torch.Tensor, variance: torch.Tensor, degenerate: torch.Tensor) -> torch.Tensor:
    """``(dim,)`` ``E[(z − μ)⁴] / σ⁴``, or :data:`DEGENERATE_CHANNEL_KURTOSIS` where σ is 0."""
    fourth_moment = centred.pow(4).mean(dim=0)
    return torch.where(
        degenerate, DEGENERATE_CHANNEL_KURTOSIS, fourth_moment / variance.where(~degenerate, 1.0).square()
    )


def channel_statistics(audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> ChannelStatistics:
    """Correlation, variance and kurtosis of every channel over the batch (DART App. B, Eq. 18–20).

    Computed in float64 outside the autograd graph (App. B: the statistics are not back-propagated).
    Constant channels (:data:`DEGENERATE_CHANNEL_KURTOSIS`) give finite values, never NaN.

    Args:
        audio_embeds: ``(batch, dim)`` audio embeddings ``U``.
        text_embeds: ``(batch, dim)`` text embeddings ``V``.
    """
    audio = audio_embeds.detach().to(torch.float64)
    text = text_embeds.detach().to(torch.float64)
    audio_centred, audio_variance, audio_degenerate = _centred_moments(audio)
    text_centred, text_variance, text_degenerate = _centred_moments(text)

    covariance = (audio_centred * text_centred).mean(dim=0)
    defined = ~(audio_degenerate | text_degenerate)
    correlation = torch.where(
        defined, covariance / (audio_variance * text_variance).sqrt().where(defined, 1.0), 0.0
    ).clamp(-1.0, 1.0)

    return ChannelStatistics(
        correlation=correlation,
        variance=audio_variance + text_variance,
        kurtosis=_kurtosis(audio_centred, audio_variance, audio_degenerate)
        + _kurtosis(text_centred, text_variance, text_degenerate),
    )


def reliability_scores(audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
    """``(dim,)`` channel reliabilities ``r_j = σ(corr − var − kurt)`` of one batch (DART Eq. 10 / Eq. 21).

    Args:
        audio_embeds: ``(batch, dim)`` audio embeddings ``U``.
        text_embeds: ``(batch, dim)`` text embeddings ``V``.

    Returns:
        ``(dim,)`` scores in ``[0, 1)``, detached, in the dtype of ``audio_embeds``.
    """
    statistics = channel_statistics(audio_embeds, text_embeds)
    score = torch.sigmoid(statistics.correlation - statistics.variance - statistics.kurtosis)
    return score.to(audio_embeds.dtype)


def normalised_marginal(weights: torch.Tensor) -> torch.Tensor:
    """``(dim,)`` probability vector ``w / Σ w`` (DART Eq. 11).

    Weights are floored at the dtype's smallest normal number first, so that a channel whose reliability
    underflowed (a sigmoid of a large negative statistic) keeps a finite log-mass in the solver.
    """
    weights = weights.clamp_min(torch.finfo(weights.dtype).tiny)
    return weights / weights.sum()


def marginal_entropy(marginal: torch.Tensor) -> torch.Tensor:
    """Shannon entropy ``−Σ u log u`` (nats, a 0-dim tensor) of a ``(dim,)`` probability vector; ``log dim`` when
    uniform."""
    marginal = marginal.detach()
    return -torch.special.xlogy(marginal, marginal).sum()


def _check_optional_int(value: Any, field: str, minimum: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise ValueError(f"dart: `{field}` must be None or an integer ≥ {minimum}, got {value!r}.")


class UnbalancedFeatureTransport(Objective):
    r"""DART's feature-level term UWD-R (Eq. 7–13), an (unregistered) objective addable to any instance-level one.

    With ``U, V`` the ``(batch, dim)`` audio and text embeddings, the channels are the points: the cost is
    ``C[i, j] = ‖U[:, i] − V[:, j]‖₂`` (Eq. 7), the plan solves entropic unbalanced OT

    .. math::
        P = \arg\min_{P \ge 0} ⟨C, P⟩ + ε\,KL(P ‖ u v^\top) + τ\,[KL(P1 ‖ u) + KL(P^\top 1 ‖ v)]
        \quad \text{(Eq. 8, 12, with the entropic term of Tab. 6's ε)}

    with the generalised ``KL(x ‖ y) = Σ x log(x/y) − x + y``, i.e. POT's
    ``ot.unbalanced.sinkhorn_unbalanced(u, v, C, ε, τ, reg_type="kl")`` (POT's default since 0.9.5; tested
    against it). Eq. 8 itself has no entropic term; Tab. 6 sets ε and App. C's strong-convexity constant
    ``ε + τ`` is POT's. The entropic term is ``KL(P ‖ u vᵀ)``, not ``−εH(P)`` (POT's ``reg_type="entropy"``,
    its default before 0.9.5): they differ by ``ε Σ_ij P_ij (−log u_i − log v_j)``, a cost shift that weighs
    on the unreliable channels when the marginals are not uniform, and DART's code is not public to say
    which it used. The loss is ``L_UWD = ⟨C, P⟩`` (Eq. 9) with ``P`` detached: the gradient flows through ``C``
    only (the envelope gradient, equal to the gradient of the full unbalanced objective).

    Marginals (``marginals``):

    - ``"reliability"`` (RAM, §3.3, App. B): ``u = v = r / Σ r`` with ``r_j = σ(corr − var − kurt)``
      (:func:`reliability_scores`). In training mode (with autograd enabled) each batch's scores are
      folded into an EMA, ``r ← β r + (1 − β) r̂`` (Eq. 13), kept in the
      buffer ``reliability_ema`` (it round-trips through ``state_dict`` / safetensors); the first batch
      initialises it. Otherwise (eval mode, or under ``torch.no_grad``) the stored EMA is used as is
      (the batch's own scores before any training update). Under several processes the scores must be
      those of the global batch, as DART averages them across processes: :class:`~hf_atr.AtrTrainer`
      gathers every rank's embeddings before the objective (``hf_atr.distributed``), so every
      rank computes the same scores and holds the same EMA.
    - ``"uniform"``, ``"norm"`` (``‖U[:, j]‖₂`` for u, ``‖V[:, j]‖₂`` for v), ``"variance"`` (the
      batch variance of each channel): the alternatives of App. I, recomputed per batch.

    Channel selection (App. B; ``"reliability"`` only): channels outside the selection are dropped from
    the transport problem. Steps count reliability updates, i.e. training batches.

    - ``warmup_steps``: every channel is active during the first ``warmup_steps`` updates.
    - ``hysteresis_low`` / ``hysteresis_high``: thresholds on the *relative* reliability ``r_j / mean(r)``
      (1 = an average channel; the absolute scores shift with the batch size, whose sample kurtosis
      dominates them). An active channel is suppressed when it falls below ``hysteresis_low``, an
      inactive one re-activated when it rises above ``hysteresis_high``. If every channel ends up
      suppressed, the most reliable one is kept.
    - ``top_k_channels``: keep only the K most reliable of the active channels.
    - ``freeze_after_steps``: after this many updates the reliability state (EMA and selection) stops
      changing. App. B freezes the selection of reliable channels; freezing the scores it derives from
      does that and also fixes the marginals.

    Args:
        reg: entropic regularisation ε of the unbalanced solver (DART: 0.03).
        marginal_reg: marginal relaxation τ (DART: 0.05).
        marginals: one of ``"reliability"``, ``"uniform"``, ``"norm"``, ``"variance"``.
        ema_decay: β in [0, 1) (DART: 0.9).
        warmup_steps, hysteresis_low, hysteresis_high, top_k_channels, freeze_after_steps: see above.
        feature_cost: ``"euclidean"`` (Eq. 7, default) or ``"rms"`` (Eq. 7 / √batch, see :func:`feature_cost`).
        max_iter, tol: unbalanced Sinkhorn iteration cap and tolerance.
    """

    citation = (DART_CITATION,)

    def __init__(
        self,
        reg: float = DEFAULT_UWD_REG,
        marginal_reg: float = DEFAULT_UWD_MARGINAL_REG,
        marginals: str = "reliability",
        ema_decay: float = DEFAULT_EMA_DECAY,
        warmup_steps: int = 0,
        hysteresis_low: float | None = None,
        hysteresis_high: float | None = None,
        freeze_after_steps: int | None = None,
        top_k_channels: int | None = None,
        feature_cost: str = "euclidean",
        max_iter: int = DEFAULT_MAX_ITER,
        tol: float = DEFAULT_TOL,
    ) -> None:
        super().__init__()
        self.reg = check_positive("dart", "uwd_reg", reg)
        if feature_cost not in FEATURE_COSTS:
            raise ValueError(f"dart: `feature_cost` must be one of {FEATURE_COSTS}, got {feature_cost!r}.")
        self.feature_cost = feature_cost
        self.marginal_reg = check_positive("dart", "uwd_marginal_reg", marginal_reg)
        if marginals not in MARGINAL_MODES:
            raise ValueError(f"dart: `marginals` must be one of {MARGINAL_MODES}, got {marginals!r}.")
        if isinstance(ema_decay, bool) or not isinstance(ema_decay, (int, float)) or not (0 <= ema_decay < 1):
            raise ValueError(f"dart: `ema_decay` (β) must be in [0, 1), got {ema_decay!r}.")
        _check_optional_int(warmup_steps, "warmup_steps", 0)
        _check_optional_int(freeze_after_steps, "freeze_after_steps", 1)
        _check_optional_int(top_k_channels, "top_k_channels", 1)
        if (hysteresis_low is None) != (hysteresis_high is None):
            raise ValueError("dart: set both `hysteresis_low` and `hysteresis_high`, or neither.")
        if hysteresis_low is not None and not (0 < hysteresis_low <= hysteresis_high):
            raise ValueError(
                "dart: hysteresis thresholds must satisfy 0 < hysteresis_low ≤ hysteresis_high (relative "
                f"reliabilities, 1 = average channel), got {hysteresis_low!r} and {hysteresis_high!r}."
            )
        selection_options = {
            "warmup_steps": warmup_steps or None,
            "hysteresis_low": hysteresis_low,
            "freeze_after_steps": freeze_after_steps,
            "top_k_channels": top_k_channels,
        }
        if marginals != "reliability" and any(value is not None for value in selection_options.values()):
            configured = sorted(key for key, value in selection_options.items() if value is not None)
            raise ValueError(
                f"dart: {configured} select channels by reliability and need marginals='reliability', "
                f"got marginals={marginals!r}."
            )
        check_solver_options("dart", max_iter, tol)
        self.marginals = marginals
        self.ema_decay = float(ema_decay)
        self.warmup_steps = warmup_steps
        self.hysteresis_low = hysteresis_low
        self.hysteresis_high = hysteresis_high
        self.freeze_after_steps = freeze_after_steps
        self.top_k_channels = top_k_channels
        self.max_iter = max_iter
        self.tol = float(tol)
        # Sized on the first batch (the embedding dim is not known before); loading resizes them.
        self.register_buffer("reliability_ema", torch.zeros(0))
        self.register_buffer("channel_active", torch.zeros(0, dtype=torch.bool))
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        # num_updates as the host knows it; None after loading: read it once from the buffer.
        self._updates_on_host: int | None = 0

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # The lazily sized buffers take the shape of the checkpoint's (a fresh module holds empty ones).
        for name in ("reliability_ema", "channel_active"):
            saved = state_dict.get(prefix + name)
            current = getattr(self, name)
            if saved is not None and saved.shape != current.shape and current.numel() == 0:
                setattr(self, name, torch.zeros(saved.shape, dtype=current.dtype, device=current.device))
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        self._updates_on_host = None

    def updates(self) -> int:
        """``num_updates`` as a Python int: read from the buffer once after loading, then counted on the host, so
        that a training step does not wait for the device to learn it."""
        if self._updates_on_host is None:
            self._updates_on_host = int(self.num_updates)
        return self._updates_on_host

    @property
    def frozen(self) -> bool:
        """Whether the reliability state has stopped updating (``freeze_after_steps`` reached)."""
        return self.freeze_after_steps is not None and self.updates() >= self.freeze_after_steps

    def update_reliability(self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> None:
        """Fold this (global) batch's reliabilities into the EMA (Eq. 13), then update
        the hysteresis state. A no-op once frozen.

        Args:
            audio_embeds: ``(batch, dim)``.
            text_embeds: ``(batch, dim)``.
        """
        if self.frozen:
            return
        batch_reliability = reliability_scores(audio_embeds, text_embeds)
        dim = batch_reliability.shape[0]
        if self.reliability_ema.numel() == 0:
            self.reliability_ema = batch_reliability.to(torch.float32).clone()
            self.channel_active = torch.ones(dim, dtype=torch.bool, device=batch_reliability.device)
        else:
            self.reliability_ema.mul_(self.ema_decay).add_(
                batch_reliability.to(self.reliability_ema), alpha=1 - self.ema_decay
            )
        updates = self.updates() + 1
        self.num_updates += 1
        self._updates_on_host = updates
        if updates <= self.warmup_steps or self.hysteresis_low is None:
            self.channel_active.fill_(True)
            return
        relative = self.reliability_ema / self.reliability_ema.mean().clamp_min(
            torch.finfo(torch.float32).tiny
        )
        self.channel_active = torch.where(
            self.channel_active, relative >= self.hysteresis_low, relative > self.hysteresis_high
        )
        if not self.channel_active.any():
            self.channel_active[self.reliability_ema.argmax()] = True

    def selected_channels(self, reliability: torch.Tensor) -> torch.Tensor | None:
        """Indices ``(n_selected,)`` of the channels taking part in the transport, or None for all.

        Args:
            reliability: ``(dim,)`` the reliabilities in use (the EMA, or the batch's before any update).
        """
        if self.updates() <= self.warmup_steps:
            return None
        active = (
            self.channel_active
            if self.channel_active.numel()
            else torch.ones_like(reliability, dtype=torch.bool)
        )
        if self.top_k_channels is not None and self.top_k_channels < int(active.sum()):
            ranked = reliability.masked_fill(~active, -math.inf)
            top = ranked.topk(self.top_k_channels).indices
            active = torch.zeros_like(active).index_fill_(0, top, True)
        if bool(active.all()):
            return None
        return active.nonzero().squeeze(1)

    def _transport_marginals(
        self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Source and target marginals and the selected channel indices (None = all)."""
        if self.marginals == "uniform":
            return (
                audio_embeds.new_full((audio_embeds.shape[1],), 1.0 / audio_embeds.shape[1]),
                text_embeds.new_full((text_embeds.shape[1],), 1.0 / text_embeds.shape[1]),
                None,
            )
        if self.marginals == "norm":
            return (
                normalised_marginal(audio_embeds.detach().norm(dim=0)),
                normalised_marginal(text_embeds.detach().norm(dim=0)),
                None,
            )
        if self.marginals == "variance":
            return (
                normalised_marginal(audio_embeds.detach().var(dim=0, unbiased=False)),
                normalised_marginal(text_embeds.detach().var(dim=0, unbiased=False)),
                None,
            )
        if audio_embeds.shape[1] != text_embeds.shape[1]:
            raise ValueError(
                "dart: reliability-aware marginals compare channel j of audio and text, so both embeddings "
                f"need the same dim; got {audio_embeds.shape[1]} and {text_embeds.shape[1]}."
            )
        if self.reliability_ema.numel() not in (0, audio_embeds.shape[1]):
            raise ValueError(
                f"dart: the stored reliability EMA has {self.reliability_ema.numel()} channels but the "
                f"embeddings have {audio_embeds.shape[1]}; was the checkpoint made with another projection_dim?"
            )
        # Evaluation loops run under no_grad: only real training steps move the EMA.
        if self.training and torch.is_grad_enabled():
            self.update_reliability(audio_embeds, text_embeds)
        if self.reliability_ema.numel():
            reliability = self.reliability_ema.to(audio_embeds.dtype)
        else:
            reliability = reliability_scores(audio_embeds, text_embeds)
        selected = self.selected_channels(reliability)
        if selected is not None:
            reliability = reliability[selected]
        marginal = normalised_marginal(reliability)
        return marginal, marginal, selected

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``L_UWD-R`` of a batch (DART Eq. 9 with the marginals of Eq. 11).

        Args:
            audio_embeds: ``(batch, d_u)`` audio embeddings ``U``.
            text_embeds: ``(batch, d_v)`` text embeddings ``V`` (``d_v = d_u`` for reliability marginals).
            batch, model: unused: the term sees channels, not pairs, and needs no scoring head.

        Returns:
            the unweighted loss and logs ``loss_uwd``, ``uwd_transported_mass`` (``Σ P``),
            ``reliability_entropy`` (entropy of the audio-side marginal, nats) and ``uwd_channels``
            (channels taking part).
        """
        check_pair_embeddings(audio_embeds, text_embeds, "dart")
        audio_marginal, text_marginal, selected = self._transport_marginals(audio_embeds, text_embeds)
        if selected is not None:
            audio_embeds = audio_embeds.index_select(1, selected)
            text_embeds = text_embeds.index_select(1, selected)
        cost = feature_cost(audio_embeds, text_embeds, self.feature_cost)
        plan = unbalanced_sinkhorn_plan(
            cost.detach(),
            self.reg,
            self.marginal_reg,
            audio_marginal.to(cost.dtype),
            text_marginal.to(cost.dtype),
            max_iter=self.max_iter,
            tol=self.tol,
            grad_mode="envelope",
        ).detach()
        loss = (cost * plan).sum()
        logs = {
            "loss_uwd": loss.detach(),
            "uwd_transported_mass": plan.sum(),
            "reliability_entropy": marginal_entropy(audio_marginal),
            "uwd_channels": float(cost.shape[0]),
        }
        return ObjectiveOutput(loss=loss, logs=logs)


def _base_objective_config(base: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if base is None:
        return dict(DEFAULT_BASE_OBJECTIVE)
    if isinstance(base, str):
        config = {"name": base}
    elif isinstance(base, Mapping) and "name" in base:
        config = dict(base)
    else:
        raise ValueError(
            "dart: `base` must be an objective name (e.g. 'contrastive') or a dict with a 'name' key "
            f"(e.g. {{'name': 'triplet', 'margin': 0.2}}), got {base!r}."
        )
    if config["name"] == "dart":
        raise ValueError(
            "dart: `base` cannot be 'dart' itself; name an instance-level objective such as 'iot'."
        )
    return config


@register_objective("dart")
class DartObjective(Objective):
    r"""DART: an instance-level objective plus λ times the feature-level UWD-R term (DART Eq. 14).

    ``L = L_base + λ · L_UWD-R``, where ``L_base`` is any registered instance-level objective built through
    the registry (DART Tab. 11 adds UWD to triplet, contrastive and IOT) and ``L_UWD-R`` is
    :class:`UnbalancedFeatureTransport`. The default base is m-LTM's inverse OT with DART's ε = 0.03
    (Tab. 6); ``base="iot"`` uses ``iot``'s own defaults (ε = 0.05).

    Args:
        base: the instance-level objective: a registered name, or a config dict with ``name`` and its
            hyperparameters; None for ``{"name": "iot", "reg": 0.03}``.
        uwd_weight: λ (DART: 0.5).
        log_gradient_share: log how much of the gradient the UWD term contributes (one extra backward of the
            objective, not of the encoders, per training step).
        uwd_hyperparameters: the UWD-R term's, those of :class:`UnbalancedFeatureTransport` with its defaults,
            ``reg`` and ``marginal_reg`` named ``uwd_reg`` (ε of the unbalanced solver, DART: 0.03) and
            ``uwd_marginal_reg`` (τ, the marginal relaxation, DART: 0.05); ``marginals``, ``ema_decay``,
            ``warmup_steps``, ``hysteresis_low``, ``hysteresis_high``, ``freeze_after_steps``, ``top_k_channels``,
            ``feature_cost``, ``max_iter`` and ``tol`` keep their names.

    Example::

        objective = build_objective({"name": "dart", "base": "contrastive", "top_k_channels": 256})
        output = objective(audio_embeds, text_embeds, batch=batch, model=model)
        output.logs  # {"loss_t2a": ..., "loss_a2t": ..., "loss_uwd": ..., "reliability_entropy": ...}
    """

    description = (
        "instance-level alignment plus reliability-weighted unbalanced Wasserstein feature alignment (DART)"
    )
    citation = (DART_CITATION,)

    @classmethod
    def scoring_in_paper(cls, hyperparameters: Mapping[str, Any]) -> str:
        """The base objective's: Euclidean for the default IOT base (DART Eq. 4), cosine for contrastive (Tab. 11)."""
        base_config = _base_objective_config(hyperparameters.get("base"))
        return default_scoring(base_config)

    @classmethod
    def hyperparameters(cls) -> dict[str, Any]:
        """Its own (``base``, ``uwd_weight``, ``log_gradient_share``), then the UWD-R term's under their config names
        (:data:`UWD_CONFIG_NAMES`), with their defaults."""
        uwd = {
            UWD_CONFIG_NAMES.get(name, name): default
            for name, default in UnbalancedFeatureTransport.hyperparameters().items()
        }
        return {**super().hyperparameters(), **uwd}

    def __init__(
        self,
        base: str | Mapping[str, Any] | None = None,
        uwd_weight: float = DEFAULT_UWD_WEIGHT,
        log_gradient_share: bool = True,
        **uwd_hyperparameters: Any,
    ) -> None:
        super().__init__()
        if (
            isinstance(uwd_weight, bool)
            or not isinstance(uwd_weight, (int, float))
            or not (0 <= uwd_weight < math.inf)
        ):
            raise ValueError(f"dart: `uwd_weight` (λ) must be a number ≥ 0, got {uwd_weight!r}.")
        check_known_hyperparameters("dart", uwd_hyperparameters, self.hyperparameters())
        base_config = _base_objective_config(base)
        try:
            self.base = build_objective(base_config)
        except ValueError as error:
            raise ValueError(f"dart: invalid base objective {base_config!r}: {error}") from error
        self.uwd_weight = float(uwd_weight)
        transport_names = {config_name: name for name, config_name in UWD_CONFIG_NAMES.items()}
        self.feature_transport = UnbalancedFeatureTransport(
            **{transport_names.get(key, key): value for key, value in uwd_hyperparameters.items()}
        )
        self.log_gradient_share = bool(log_gradient_share)

    def logit_scales_read(self) -> frozenset[str]:
        """The base objective's (the UWD term reads embeddings only)."""
        return self.base.logit_scales_read()

    def logit_bias_read(self) -> bool:
        """The base objective's (the UWD term reads embeddings only)."""
        return self.base.logit_bias_read()

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds``, ``text_embeds``: ``(batch, dim)``; logs are the base's plus the UWD term's.

        With ``log_gradient_share`` and embeddings that require grad, also logs ``base_gradient_norm``
        (``‖∇L_base‖``), ``uwd_gradient_norm`` (``λ‖∇L_UWD-R‖``) and ``uwd_gradient_share`` (the second over
        their sum), gradients with respect to the embeddings: whether the feature-level term acts at all.
        """
        base_output = self.base(audio_embeds, text_embeds, batch=batch, model=model)
        uwd_output = self.feature_transport(audio_embeds, text_embeds)
        loss = base_output.loss + self.uwd_weight * uwd_output.loss
        logs = {**base_output.logs, **uwd_output.logs}
        if self.log_gradient_share:
            logs.update(self._gradient_share(base_output.loss, uwd_output.loss, (audio_embeds, text_embeds)))
        return ObjectiveOutput(loss=loss, logs=logs)

    def _gradient_share(
        self, base_loss: torch.Tensor, uwd_loss: torch.Tensor, embeds: tuple[torch.Tensor, ...]
    ) -> dict[str, torch.Tensor]:
        """Norms of ``∇L_base`` and ``λ∇L_UWD-R`` with respect to the embeddings (no graph kept for them), as 0-dim
        tensors on the embeddings' device."""
        inputs = [tensor for tensor in embeds if tensor.requires_grad]
        if not (torch.is_grad_enabled() and inputs):
            return {}

        def gradient_norm(loss: torch.Tensor) -> torch.Tensor:
            if not loss.requires_grad:
                return torch.zeros((), dtype=loss.dtype, device=loss.device)
            gradients = torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True)
            squares = [gradient.detach().square().sum() for gradient in gradients if gradient is not None]
            return torch.stack(squares).sum().sqrt() if squares else torch.zeros((), device=loss.device)

        base_norm, uwd_norm = gradient_norm(base_loss), self.uwd_weight * gradient_norm(uwd_loss)
        total = base_norm + uwd_norm
        return {
            "base_gradient_norm": base_norm,
            "uwd_gradient_norm": uwd_norm,
            "uwd_gradient_share": torch.where(total > 0, uwd_norm / total, torch.zeros_like(total)),
        }
