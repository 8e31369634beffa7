"""ASK: adaptive self-improving knowledge objective (ASK §4.2-4.5, Eq. 8-18)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import logging

from ..ot import sinkhorn_log_plan
from .batch import batch_audio_ids, check_pair_embeddings, other_copies_mask
from .contrastive import ContrastiveObjective, pair_similarity
from .registry import ObjectiveOutput, register_objective

logger = logging.get_logger(__name__)

DEFAULT_NUM_PROTOTYPES = 512
"""``N_c``, the number of coarse-grained prototypes of the knowledge base (ASK §5.1)."""
SEARCH_BACKENDS = ("torch", "faiss")
"""How the knowledge base is searched (:meth:`hf_atr.knowledge.KnowledgeBase.search`), an option of ASK."""
OT_TOLERANCE = 1e-5
"""Column-marginal error at which the realignment plan's Sinkhorn stops: the plan only re-weights rows."""


def inject_knowledge(embeds: torch.Tensor, neighbours: torch.Tensor, injection_ratio: float) -> torch.Tensor:
    """Knowledge-enhanced embeddings ``u' = (1 − ρ)·u + ρ·ū`` (ASK Eq. 8).

    ASK's Eq. 8 and App. A disagree on what ρ weighs; here ρ (``injection_ratio``) is the weight of the knowledge.

    Args:
        embeds: ``(batch, dim)`` embeddings ``u_i``.
        neighbours: ``(batch, K, dim)`` retrieved entries of the same modality; ``ū_i`` is their mean.
    """
    return (1.0 - injection_ratio) * embeds + injection_ratio * neighbours.mean(dim=1)


def reliability_weights(candidates: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """``(batch, K)`` reliability weights ``w_j = softmax_j(s̄_j)``, ``s̄_j = (1/K) Σ_l c_jᵀ a_l`` (ASK Eq. 10-11).

    Args:
        candidates: ``(batch, K, dim)`` entries retrieved through the *other* modality (e.g. the audio side
            of the text-retrieved pairs ``N_f(v_i)``).
        anchors: ``(batch, K', dim)`` entries retrieved through the same modality (e.g. ``U_r``, the
            audio retrieved by ``u_i``).
    """
    consistency = torch.einsum("bkd,bld->bk", candidates, anchors) / anchors.shape[1]
    return consistency.softmax(dim=-1)


def log_knowledge_potential(
    embeds: torch.Tensor, candidates: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """``(batch,)`` ``log Ψ_i = log Σ_j w_j · exp(u_iᵀ c_j)`` (ASK Eq. 12), computed as a log-sum-exp.

    Args:
        embeds: ``(batch, dim)`` the sample's own embedding (``u_i`` for T→A).
        candidates: ``(batch, K, dim)`` the cross-modally retrieved entries of the same modality.
        weights: ``(batch, K)`` reliability weights from :func:`reliability_weights`.
    """
    inner = torch.einsum("bd,bkd->bk", embeds, candidates)
    return torch.logsumexp(inner + weights.log(), dim=-1)


def optimal_transport_realignment(similarity: torch.Tensor, ot_reg: float) -> torch.Tensor:
    """``(batch, batch)`` row-stochastic realignment plan ``B·Q*`` (ASK Eq. 14, App. C Eq. 33).

    ``Q* = argmax_Q ⟨Q, S⟩ + ε H(Q)`` with uniform marginals, solved by log-domain Sinkhorn on the cost
    ``−S``; the plan is detached (a fixed re-weighting of the rows, not a path for gradients).
    """
    batch_size = similarity.shape[0]
    log_plan = sinkhorn_log_plan(-similarity.detach().float(), ot_reg, tol=OT_TOLERANCE, grad_mode="none")
    return (log_plan.exp() * batch_size).to(similarity.dtype)


def realigned_similarity(similarity: torch.Tensor, plan: torch.Tensor, realignment: float) -> torch.Tensor:
    """``S* = ((1 − β)·I + β·Q) S`` (ASK Eq. 14) for ``(batch, batch)`` ``S`` and a row-stochastic ``Q``."""
    return (1.0 - realignment) * similarity + realignment * (plan @ similarity)


@register_objective("ask")
class AskObjective(ContrastiveObjective):
    r"""ASK: NT-Xent on knowledge-injected, OT-realigned similarities, modulated by reliability (ASK Eq. 8-18).

    For each granularity ``g`` (fine pairs ``K_f``, coarse prototypes ``K_c`` of :attr:`knowledge_base`):

    1. Injection (Eq. 8): ``u'_g = (1−ρ)u + ρ·mean(top-K audio of u)``, likewise ``v'_g`` from the text side.
       Fine neighbours are ``K`` distinct clips, never the sample's own (``batch["audio_ids"]``): with a base
       built from the training set, a sample's stored pair would be its top-1 neighbour, and with
       ``captions="all"`` one clip's audio would fill several of the ``K`` slots.
    2. Reliability (Eq. 10-12): the audio side of the pairs retrieved by ``v_i`` is weighted by its consistency
       with the audio retrieved by ``u_i``; ``Ψ^{T→A}_{i,g} = Σ_j w_j exp(u_iᵀu_j)``, symmetrically ``Ψ^{A→T}``.
    3. OT realignment (Eq. 14): ``S*_g = ((1−β)I + β·B·Q*) S_g``, ``S_g`` the ``(text, audio)`` similarity of the
       injected embeddings (the model's scoring head), ``Q*`` the detached entropic OT plan.
    4. Loss (Eq. 15-18): ``L_{T→A} = Σ_g NT-Xent(S*_g / τ)``, ``F_g = mean_i −log Ψ_{i,g}``,
       ``L* = (1 + λ_f F_f + λ_c F_c)·L`` per direction, ``L_ASK = (L*_{T→A} + L*_{A→T}) / 2``.

    The knowledge base is not a parameter: set ``objective.knowledge_base`` (the
    :class:`~hf_atr.training.callbacks.KnowledgeBaseRefreshCallback` builds and refreshes it). Until one is set
    the loss is the plain contrastive loss (logged as ``knowledge_base = 0``). Retrieved knowledge carries no
    gradient. Rows that are the same clip (``batch["audio_ids"]``) are never each other's negatives.

    Args:
        temperature: ``τ``, as in :class:`~hf_atr.objectives.contrastive.ContrastiveObjective` (``None``: the
            model's learnable logit scale).
        num_neighbours: ``K`` retrieved entries per query (clamped to the base size).
        num_prototypes: ``N_c`` for bases built for this objective (read by the refresh callback).
        injection_ratio: ``ρ``, the weight of the knowledge in Eq. 8.
        realignment: ``β`` of Eq. 14.
        fine_weight, coarse_weight: ``λ_f``, ``λ_c`` of Eq. 17 (``λ_f + λ_c < 1``: ``F_g ≥ −1`` for unit
            embeddings, so the modulation stays positive).
        ot_reg: entropic regularisation ``ε`` of the OT plan (Eq. 33; the paper gives no value).
        use_fine, use_coarse: keep the fine / coarse granularity (Table 3, group 1).
        use_injection: inject knowledge; off, both granularities score the raw embeddings (Table 3, group 2).
        use_ot_realignment: off, ``S* = S`` (Table 3, group 2).
        use_reliability: off, the loss is not modulated, ``L* = L`` (Table 3, group 3).
        search_backend: how the base is searched, ``"torch"`` (exact top-K by matrix product on the
            embeddings' device) or ``"faiss"`` (exact ``IndexFlatIP`` on the CPU); see
            :meth:`KnowledgeBase.search`.
        The "no refresh" ablation (group 4) is the callback's ``refresh=False``.

    Example::

        objective = build_objective({"name": "ask", "temperature": 0.07})
        objective.knowledge_base = KnowledgeBase.from_dataset(model, processor, features["train"])
        output = objective(audio_embeds, text_embeds, batch={"audio_ids": ids}, model=model)
    """

    description = "contrastive learning with an adaptive self-improving knowledge base (ASK)"
    citation = (
        "ASK: Adaptive Self-improving Knowledge Framework for Audio Text Retrieval. Anonymous ACL submission "
        "(under review; no public identifier).",
    )

    training_view = "pairs_with_knowledge_base"
    needs_whole_corpus = True  # the knowledge base is encoded from the training clips (§4.4)

    # Eq. 15 scales both directions by logit_scale. (Until a knowledge base is set the loss is the contrastive one,
    # which reads audio_logit_scale too, as a constant then.)
    learned_logit_scales = frozenset({"logit_scale"})

    def __init__(
        self,
        temperature: float | None = None,
        num_neighbours: int = 10,
        num_prototypes: int = DEFAULT_NUM_PROTOTYPES,
        injection_ratio: float = 0.2,
        realignment: float = 0.2,
        fine_weight: float = 0.2,
        coarse_weight: float = 0.3,
        ot_reg: float = 0.1,
        use_fine: bool = True,
        use_coarse: bool = True,
        use_injection: bool = True,
        use_ot_realignment: bool = True,
        use_reliability: bool = True,
        search_backend: str = "torch",
    ) -> None:
        super().__init__(temperature=temperature)
        for name, value in (("num_neighbours", num_neighbours), ("num_prototypes", num_prototypes)):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"ask: `{name}` must be a positive int, got {value!r}.")
        for name, value in (("injection_ratio", injection_ratio), ("realignment", realignment)):
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise ValueError(f"ask: `{name}` must be in [0, 1], got {value!r}.")
        for name, value in (("fine_weight", fine_weight), ("coarse_weight", coarse_weight)):
            if not (isinstance(value, (int, float)) and 0.0 <= value < math.inf):
                raise ValueError(f"ask: `{name}` must be a non-negative number, got {value!r}.")
        if fine_weight + coarse_weight >= 1.0:
            # F_g = mean −log Ψ ≥ −1 for unit embeddings, so 1 + λ_f F_f + λ_c F_c > 0 needs λ_f + λ_c < 1.
            raise ValueError(
                f"ask: `fine_weight` + `coarse_weight` must be < 1 to keep the modulation of Eq. 17 positive, got "
                f"{fine_weight} + {coarse_weight}."
            )
        if not (isinstance(ot_reg, (int, float)) and 0.0 < ot_reg < math.inf):
            raise ValueError(f"ask: `ot_reg` must be a positive number, got {ot_reg!r}.")
        if search_backend not in SEARCH_BACKENDS:
            raise ValueError(
                f"ask: `search_backend` must be one of {list(SEARCH_BACKENDS)}, got {search_backend!r}."
            )
        if not (use_fine or use_coarse):
            raise ValueError(
                "ask: `use_fine` and `use_coarse` cannot both be False; keep at least one granularity."
            )
        self.num_neighbours = num_neighbours
        self.num_prototypes = num_prototypes
        self.injection_ratio = float(injection_ratio)
        self.realignment = float(realignment)
        self.granularity_weights = {"fine": float(fine_weight), "coarse": float(coarse_weight)}
        self.ot_reg = float(ot_reg)
        self.granularities = [name for name, used in (("fine", use_fine), ("coarse", use_coarse)) if used]
        self.use_injection = use_injection
        self.use_ot_realignment = use_ot_realignment
        self.use_reliability = use_reliability
        self.search_backend = search_backend
        self.knowledge_base: Any = None  # a hf_atr.knowledge.KnowledgeBase, set by the refresh callback

    def _retrieve(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        granularity: str,
        audio_ids: Sequence[str] | None,
    ) -> dict[str, torch.Tensor]:
        """Entries retrieved by each query modality: ``"<query>_<side>"`` → ``(batch, K, dim)``, no gradient.

        Fine neighbours are ``K`` distinct clips other than the sample's own (by ``audio_ids``), when the
        base knows the clip of each pair (:class:`~hf_atr.knowledge.knowledge_base.KnowledgeBase`).
        """
        retrieved = {}
        for query_modality, queries in (("audio", audio_embeds), ("text", text_embeds)):
            _, indices = self.knowledge_base.search(
                queries,
                modality=query_modality,
                granularity=granularity,
                k=self.num_neighbours,
                backend=self.search_backend,
                exclude_audio_ids=audio_ids,
            )
            neighbour_audio, neighbour_text = self.knowledge_base.pairs(
                indices, granularity=granularity, device=queries.device, dtype=queries.dtype
            )
            retrieved[f"{query_modality}_audio"] = neighbour_audio
            retrieved[f"{query_modality}_text"] = neighbour_text
        return retrieved

    def _nt_xent(self, similarity: torch.Tensor, scale: Any, other_copies: torch.Tensor) -> torch.Tensor:
        """NT-Xent of Eq. 15 over the rows of a ``(batch, batch)`` similarity, diagonal positives."""
        logits = (scale * similarity).masked_fill(other_copies, float("-inf"))
        return F.cross_entropy(logits, torch.arange(similarity.shape[0], device=similarity.device))

    accepts_negative_audio = False  # its own forward: knowledge-injected similarities of the pairs only

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds``, ``text_embeds``: ``(batch, dim)``, row i of each forms a positive pair."""
        if self.knowledge_base is None:
            logger.warning_once(
                "ask: no knowledge base is set (objective.knowledge_base is None); using the plain contrastive "
                "loss. Add a KnowledgeBaseRefreshCallback to the trainer or set objective.knowledge_base."
            )
            output = super().forward(audio_embeds, text_embeds, batch=batch, model=model)
            output.logs["knowledge_base"] = 0.0
            return output
        check_pair_embeddings(audio_embeds, text_embeds, self.name)
        if audio_embeds.shape[1] != self.knowledge_base.dim:
            raise ValueError(
                f"ask: embeddings have dim {audio_embeds.shape[1]} but the knowledge base has dim "
                f"{self.knowledge_base.dim}; rebuild it with the current model."
            )
        batch_size = audio_embeds.shape[0]
        device = audio_embeds.device
        audio_ids = batch_audio_ids(batch)
        if self.knowledge_base.clip_ids is None:
            logger.warning_once(
                "ask: the knowledge base does not know the clip of its pairs (built without audio_ids), so a "
                "sample's own clip can be among its neighbours; build it with KnowledgeBase.from_dataset or "
                "pass audio_ids to KnowledgeBase.from_embeddings."
            )
        scale = self.logit_scale(model)
        other_copies = other_copies_mask(audio_ids, batch_size, device)
        direction_losses = {"t2a": audio_embeds.new_zeros(()), "a2t": audio_embeds.new_zeros(())}
        modulations = {"t2a": audio_embeds.new_ones(()), "a2t": audio_embeds.new_ones(())}
        logs: dict[str, torch.Tensor | float] = {"knowledge_base": 1.0}
        for granularity in self.granularities:
            retrieved = self._retrieve(audio_embeds.detach(), text_embeds.detach(), granularity, audio_ids)
            if self.use_injection:
                injected_audio = inject_knowledge(
                    audio_embeds, retrieved["audio_audio"], self.injection_ratio
                )
                injected_text = inject_knowledge(text_embeds, retrieved["text_text"], self.injection_ratio)
            else:
                injected_audio, injected_text = audio_embeds, text_embeds
            similarity = pair_similarity(injected_audio, injected_text, model)
            similarity_a2t = similarity.T
            if self.use_ot_realignment:
                plan = optimal_transport_realignment(similarity, self.ot_reg)
                similarity, similarity_a2t = (
                    realigned_similarity(similarity, plan, self.realignment),
                    realigned_similarity(similarity_a2t, plan.T, self.realignment),
                )
            for direction, direction_similarity in (("t2a", similarity), ("a2t", similarity_a2t)):
                term = self._nt_xent(direction_similarity, scale, other_copies)
                direction_losses[direction] = direction_losses[direction] + term
                logs[f"loss_{direction}_{granularity}"] = term.detach()
            if self.use_reliability:
                # T→A: audio side of the text-retrieved pairs, checked against the audio retrieved by u_i (Eq. 10-12).
                log_potential_t2a = log_knowledge_potential(
                    audio_embeds,
                    retrieved["text_audio"],
                    reliability_weights(retrieved["text_audio"], retrieved["audio_audio"]),
                )
                log_potential_a2t = log_knowledge_potential(
                    text_embeds,
                    retrieved["audio_text"],
                    reliability_weights(retrieved["audio_text"], retrieved["text_text"]),
                )
                for direction, log_potential in (("t2a", log_potential_t2a), ("a2t", log_potential_a2t)):
                    reliability_term = -log_potential.mean()  # F_g, Eq. 16
                    modulations[direction] = (
                        modulations[direction] + self.granularity_weights[granularity] * reliability_term
                    )
                    logs[f"reliability_{direction}_{granularity}"] = reliability_term.detach()
        modulated = {
            direction: modulations[direction] * direction_losses[direction] for direction in direction_losses
        }
        loss = (modulated["t2a"] + modulated["a2t"]) / 2  # Eq. 18
        for direction in ("t2a", "a2t"):
            logs[f"loss_{direction}"] = modulated[direction].detach()
            logs[f"modulation_{direction}"] = modulations[direction].detach()
        return ObjectiveOutput(loss=loss, logs=logs)
