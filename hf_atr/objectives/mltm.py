"""Mini-batch learning-to-match (m-LTM, Luong et al., ICLR 2024): inverse optimal transport objectives.

``iot`` learns the ground metric so that the entropic optimal transport plan between the audio and
caption embeddings of a batch matches the true pairing (m-LTM Eq. 6–8, DART Eq. 4–5); ``iot_partial``
transports only a fraction ``mass`` of it, so that mismatched pairs can be left out of the plan
(m-LTM §3.3, Eq. 12–13). The ground metric is the model's scoring head: Euclidean, or Mahalanobis with
a learnable PSD matrix (m-LTM Eq. 9), which the model itself keeps PSD
(:meth:`~hf_atr.AtrDualEncoderModel.project_parameters_`, called by the trainer after every optimizer step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..ot import partial_sinkhorn_log_plan, sinkhorn_log_plan
from ..ot.utils import DEFAULT_MAX_ITER, DEFAULT_TOL, check_positive, check_solver_options
from .batch import batch_audio_ids, check_pair_embeddings, same_clip_mask
from .registry import Objective, ObjectiveOutput, register_objective

MLTM_CITATION = (
    "Luong, Nguyen, Ho, Haffari, Phung, Qu. Revisiting Deep Audio-Text Retrieval Through the Lens of "
    "Transportation (m-LTM). ICLR 2024. arXiv:2405.10084"
)
# m-LTM §5.3 (Tables 6 and 8): ε = 0.05 gave the best retrieval; ε ≤ 0.02 collapsed with their solver.
DEFAULT_REG = 0.05
# m-LTM §3.3 / Fig. 2: the best transported mass tracks the noise ratio; 0.95 suits a few percent of noise.
DEFAULT_PARTIAL_MASS = 0.95
# Balanced IOT stops at a tighter marginal error: at 1e-6 the one-step gradient can be ~7e-4 (relative)
# from the exact one on near-diagonal batches, at 1e-7 it is under 1e-4 (benchmarks/ot_solvers.py).
DEFAULT_IOT_TOL = 1e-7
# "none" is left out: an objective whose plan carries no gradient cannot train the ground metric.
GRAD_MODES = ("one_step", "autograd")
# For partial OT the one-step gradient of the IOT loss is 50–80 % off (it is exact only for the balanced
# problem, whose loss is the dual objective); "implicit" differentiates the fixed point exactly.
PARTIAL_GRAD_MODES = ("implicit", "one_step", "autograd")


def ground_cost(
    audio_embeds: torch.Tensor, text_embeds: torch.Tensor, model: nn.Module | None
) -> torch.Tensor:
    """``(n_audio, n_text)`` ground cost ``C_ij = d(audio_i, text_j)`` (m-LTM Eq. 9, DART Eq. 4).

    Uses ``model.scoring_head.distance`` (Euclidean or Mahalanobis, as the model is configured). Without a
    model it falls back to the Euclidean distance (DART's choice, its Eq. 4), so the objective can be used
    on bare embeddings.

    Args:
        audio_embeds: ``(n_audio, dim)``.
        text_embeds: ``(n_text, dim)``.
        model: the dual encoder, or None.
    """
    if model is not None:
        return model.scoring_head.distance(audio_embeds, text_embeds)
    return torch.cdist(audio_embeds, text_embeds)


def matching_target(same_clip: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(batch, batch)`` target plan ``π̂`` of the true pairing, uniform marginals ``1/batch``.

    Without duplicates this is ``π̂ = I / batch`` (m-LTM Eq. 6). A clip that appears ``g`` times in the
    batch (with ``g`` of its captions) forms a ``g × g`` block of true pairs: each of its rows spreads its
    ``1/batch`` of mass evenly over the block, ``π̂_ij = 1/(batch·g)``. Identical audio rows give identical
    cost rows, so the entropic plan itself spreads their mass that way, and the target is attainable.

    Args:
        same_clip: ``(batch, batch)`` boolean, True where rows i and j are the same clip (diagonal included).
        dtype: floating dtype of the result.
    """
    block = same_clip.to(dtype)
    return block / (block.sum(dim=1, keepdim=True) * same_clip.shape[0])


def inverse_ot_loss(log_plan: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``KL(π̂ ‖ Π) = Σ_ij π̂_ij (log π̂_ij − log Π_ij)`` over the target's support (m-LTM Eq. 6, DART Eq. 5).

    With the diagonal target ``π̂ = I / k`` this is ``−(1/k) Σ_i log(k·Π_ii)``. It is evaluated on the log
    plan, never on ``exp``'d values, so it stays finite when ``Π_ii`` underflows float32 (small ε).

    Args:
        log_plan: ``(k, k)`` log of the transport plan ``Π``.
        target: ``(k, k)`` target plan ``π̂`` (:func:`matching_target`), non-negative, summing to 1.
    """
    support = target > 0
    target_mass = target[support]
    return (target_mass * (target_mass.log() - log_plan[support])).sum()


@register_objective("iot")
class InverseOTObjective(Objective):
    r"""Inverse optimal transport (m-LTM Eq. 6–8; DART Eq. 4–5).

    The ground cost ``C_ij = d(audio_i, text_j)`` of the batch (the model scoring head's Euclidean or
    Mahalanobis distance) defines the entropic OT plan with uniform marginals ``1/k``,

    .. math::
        Π = \arg\min_{Π \in U(1/k, 1/k)} ⟨C, Π⟩ − ε H(Π)  \qquad \text{(m-LTM Eq. 3)},

    solved by log-domain Sinkhorn, and the loss is the KL divergence from the true pairing to it,
    ``L = KL(π̂ ‖ Π) = −(1/k) Σ_i log(k·Π_ii)`` (computed on ``log Π``). The gradient flows through the
    solver ("one_step": solve without autograd, back-propagate through one last differentiable
    iteration, in constant memory; "autograd": through every iteration).

    Duplicate clips (equal ``batch["audio_ids"]``) are not treated as mismatches: the target spreads a
    clip's mass evenly over the block of its pairs (:func:`matching_target`).

    Without a model, the ground metric is the Euclidean distance. A Mahalanobis scoring head's matrix is kept
    PSD by the model (:meth:`~hf_atr.AtrDualEncoderModel.project_parameters_`, m-LTM Eq. 11's ``Proj``), which
    :class:`~hf_atr.AtrTrainer` calls after every optimizer step; a hand-written loop calls it itself.

    Args:
        reg: entropic regularisation ε (m-LTM uses 0.05). Costs are distances of unit vectors (≤ 2), so ε
            well below 0.01 makes the plan nearly a permutation; the log-domain loss stays finite.
        max_iter: maximum Sinkhorn iterations.
        tol: stop when the marginal error falls below this (default 1e-7: the one-step gradient is then
            within 1e-4 of the exact one, see ``benchmarks/ot_solvers.py``).
        grad_mode: "one_step" (default) or "autograd".

    Example::

        objective = build_objective({"name": "iot", "reg": 0.05})
        output = objective(audio_embeds, text_embeds, batch={"audio_ids": ids}, model=model)
        output.loss.backward()
        optimizer.step()
        model.project_parameters_()
    """

    description = "inverse optimal transport with a learned ground metric (m-LTM)"
    citation = (MLTM_CITATION,)

    reads_logit_bias = False

    def logit_scales_read(self) -> frozenset[str]:
        """None: the loss depends on the similarities alone, never on the head's logit scales."""
        return frozenset()

    grad_modes = GRAD_MODES
    # DART Eq. 4 ("Euclidean in our implementation"); m-LTM Eq. 9 with M = I (scoring="mahalanobis" learns M).
    paper_scoring = "euclidean"

    def __init__(
        self,
        reg: float = DEFAULT_REG,
        max_iter: int = DEFAULT_MAX_ITER,
        tol: float = DEFAULT_IOT_TOL,
        grad_mode: str = "one_step",
    ) -> None:
        super().__init__()
        objective_name = self.name or type(self).__name__
        self.reg = check_positive(objective_name, "reg", reg)
        check_solver_options(objective_name, max_iter, tol)
        if grad_mode not in self.grad_modes:
            raise ValueError(
                f"{objective_name}: `grad_mode` must be one of {self.grad_modes}, got {grad_mode!r}."
            )
        self.max_iter = max_iter
        self.tol = float(tol)
        self.grad_mode = grad_mode

    def transport_log_plan(self, cost: torch.Tensor) -> torch.Tensor:
        """``(k, k)`` log of the balanced entropic plan with uniform marginals for ``cost`` ``(k, k)``."""
        return sinkhorn_log_plan(
            cost, self.reg, max_iter=self.max_iter, tol=self.tol, grad_mode=self.grad_mode
        )

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds``, ``text_embeds``: ``(batch, dim)``, row i of each forms a positive pair.

        Logs ``loss_iot``, ``iot_diagonal_mass`` (``Σ_i Π_ii``, i.e. the mean of ``k·Π_ii``: 1 for a
        perfect matching) and ``iot_transported_mass`` (``Σ_ij Π_ij``: 1, or the partial mass).
        """
        check_pair_embeddings(audio_embeds, text_embeds, self.name)
        cost = ground_cost(audio_embeds, text_embeds, model)
        log_plan = self.transport_log_plan(cost)
        same_clip = same_clip_mask(batch_audio_ids(batch), cost.shape[0], cost.device)
        loss = inverse_ot_loss(log_plan, matching_target(same_clip, log_plan.dtype))
        with torch.no_grad():
            plan = log_plan.detach().exp()
            logs = {
                "loss_iot": loss.detach(),
                "iot_diagonal_mass": plan.diagonal().sum(),
                "iot_transported_mass": plan.sum(),
            }
        return ObjectiveOutput(loss=loss, logs=logs)


@register_objective("iot_partial")
class PartialInverseOTObjective(InverseOTObjective):
    r"""Inverse OT with a partial transport plan, for noisy correspondences (m-LTM §3.3, Eq. 12–13).

    The plan moves only a total mass ``s`` (``mass``) under marginal upper bounds ``1/k``,

    .. math::
        Π_s = \arg\min_{Π \ge 0,\ Π1 \le 1/k,\ Π^\top 1 \le 1/k,\ 1^\top Π 1 = s} ⟨C, Π⟩ − ε H(Π),

    solved by entropic Bregman projections (Benamou et al. 2015) in the log domain, and the loss is the
    same ``KL(π̂ ‖ Π_s)`` as :class:`InverseOTObjective`. Mismatched pairs (a caption replaced by another)
    are costly, so the plan leaves them out of the mass it moves. ``mass = 1`` is the balanced ``iot``.

    Args:
        reg: entropic regularisation ε (m-LTM uses 0.05).
        mass: transported mass ``s`` in (0, 1]; m-LTM Fig. 2 finds the best ``s`` tracks the noise ratio.
        max_iter: maximum iterations of the Bregman projections.
        tol: stopping tolerance.
        grad_mode: "implicit" (default: exact implicit gradient, memory of one iteration), "one_step" (a
            poor approximation for partial OT) or "autograd".

    Example::

        objective = build_objective({"name": "iot_partial", "mass": 0.8})
    """

    description = "inverse partial optimal transport, robust to noisy pairs (m-LTM)"
    citation = (MLTM_CITATION,)
    grad_modes = PARTIAL_GRAD_MODES

    def __init__(
        self,
        reg: float = DEFAULT_REG,
        mass: float = DEFAULT_PARTIAL_MASS,
        max_iter: int = DEFAULT_MAX_ITER,
        tol: float = DEFAULT_TOL,
        grad_mode: str = "implicit",
    ) -> None:
        super().__init__(reg=reg, max_iter=max_iter, tol=tol, grad_mode=grad_mode)
        if isinstance(mass, bool) or not isinstance(mass, (int, float)) or not (0 < mass <= 1):
            raise ValueError(f"{self.name}: `mass` (transported mass s) must be in (0, 1], got {mass!r}.")
        self.mass = float(mass)

    def transport_log_plan(self, cost: torch.Tensor) -> torch.Tensor:
        """``(k, k)`` log of the entropic partial plan of total mass ``self.mass`` for ``cost`` ``(k, k)``."""
        return partial_sinkhorn_log_plan(
            cost, self.reg, self.mass, max_iter=self.max_iter, tol=self.tol, grad_mode=self.grad_mode
        )
