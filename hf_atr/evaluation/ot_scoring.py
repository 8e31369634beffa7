"""Evaluation scores from optimal transport: the entropic OT plan between all captions and clips (m-LTM Eq. 5),
and the plan of one evaluation batch as the model's objective computes it (for the report page).

The solvers are :mod:`hf_atr.ot`'s; the batch plan is the objective's own (``transport_log_plan`` of ``iot``,
``iot_partial`` and of ``dart``'s instance-level base) on its ground cost
(:func:`~hf_atr.objectives.mltm.ground_cost`), built from the model's config by the objective registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..encoding import encode_text
from ..lazy import get_logger
from ..objectives.mltm import ground_cost
from ..objectives.registry import build_objective
from ..ot import sinkhorn_log_plan
from ..processing_atr import AtrProcessor
from .report import BatchTransport

logger = get_logger(__name__)

TRANSPORT_BATCH_SIZE = 32
"""Clips in the evaluation batch whose transport plan the report draws."""
SIMILARITY_LABELS = {
    "cosine": "cosine similarity",
    "dot": "dot product",
    "euclidean": "− Euclidean distance",
    "mahalanobis": "− Mahalanobis distance",
}


@torch.no_grad()
def ot_plan_scores(
    model: Any,
    text_embeds: torch.Tensor,
    audio_embeds: torch.Tensor,
    languages: Sequence[str],
    *,
    reg: float = 0.05,
    max_iter: int = 5000,
    tol: float = 1e-6,
) -> torch.Tensor:
    """``(n_text, n_audio)`` retrieval scores from the entropic OT plan (m-LTM Eq. 5).

    Each language's captions and all clips get uniform marginals and the plan of Eq. 3 under the
    model's ground metric; a caption's clips (and a clip's captions) are ranked by their coupling
    ``log π_ij``. Needs the whole score matrix of one language in memory (fine for test sets).
    """
    device = model.scoring_head.logit_scale.device
    scores = torch.empty(text_embeds.shape[0], audio_embeds.shape[0])
    language_of_text = list(languages)
    audio = audio_embeds.to(device)
    for language in dict.fromkeys(language_of_text):
        rows = torch.tensor([index for index, code in enumerate(language_of_text) if code == language])
        cost = model.scoring_head.distance(text_embeds[rows].to(device), audio)
        log_plan = sinkhorn_log_plan(cost.float(), reg, max_iter=max_iter, tol=tol, grad_mode="none")
        scores[rows] = log_plan.cpu()
    return scores


@torch.no_grad()
def batch_transport(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    audio_embeds: torch.Tensor,
    *,
    size: int = TRANSPORT_BATCH_SIZE,
    ot_reg: float | None = None,
) -> BatchTransport | None:
    """The scores and the transport plan of one evaluation batch: the first `size` clips and their first captions.

    The plan is the one the model's objective computes on a training batch (``objective.transport_log_plan`` on
    the ground cost of :func:`~hf_atr.objectives.mltm.ground_cost`: ``iot`` and ``iot_partial``, and ``dart``
    whose instance-level base is one of them), with the objective's own ε, mass and solver (:mod:`hf_atr.ot`);
    with ``ot_reg`` (an evaluator scoring by OT plan), the balanced entropic plan of m-LTM Eq. 5 at that ε
    instead, as :func:`ot_plan_scores` computes it.

    Args:
        audio_embeds: `(n_clips, dim)` the dataset's audio embeddings (rows in dataset order).
        size: clips in the batch (fewer if the dataset has fewer).
        ot_reg: ε of the evaluator's OT-plan scoring, or None.

    Returns:
        None when the model's objective has no batch transport plan (and ``ot_reg`` is None), or when its
        objective is a plugin that is not installed here.
    """
    transport_log_plan, method = _objective_transport(model) if ot_reg is None else (None, None)
    if ot_reg is not None:
        method = f"balanced entropic OT with uniform marginals, ε = {ot_reg:g} (m-LTM Eq. 5, the evaluator's scoring)"
    elif transport_log_plan is None:
        return None
    first_captions = dataset.select(range(min(size, len(dataset))))["captions"]
    rows = [row for row, captions in enumerate(first_captions) if captions]
    if len(rows) < 2:
        return None
    text_embeds = encode_text(model, processor, [first_captions[row][0] for row in rows])
    audio_embeds = audio_embeds[rows]
    device = model.scoring_head.logit_scale.device
    audio_embeds, text_embeds = audio_embeds.to(device), text_embeds.to(device)
    if ot_reg is not None:
        log_plan = sinkhorn_log_plan(
            model.scoring_head.distance(text_embeds, audio_embeds).float(), ot_reg, grad_mode="none"
        )
    else:
        log_plan = transport_log_plan(ground_cost(audio_embeds.float(), text_embeds.float(), model)).T
    scores = model.scoring_head.similarity(text_embeds, audio_embeds)
    return BatchTransport(
        scores=scores.cpu().numpy(),
        plan=log_plan.exp().cpu().numpy(),
        score_label=SIMILARITY_LABELS[model.config.scoring],
        method=method,
    )


def _objective_transport(model: Any) -> tuple[Callable[[torch.Tensor], torch.Tensor] | None, str | None]:
    """The batch transport of the model's objective (its own, or its instance-level base's) and its description."""
    try:
        objective = build_objective(model.config)
    except (KeyError, ValueError) as error:
        logger.info(f"No transport plan in the report: the model's objective cannot be built here ({error}).")
        return None, None
    for owner in (objective, getattr(objective, "base", None)):
        plan = getattr(owner, "transport_log_plan", None)
        if plan is not None:
            settings = ", ".join(
                f"{name} = {getattr(owner, name):g}" for name in ("reg", "mass") if hasattr(owner, name)
            )
            whose = (
                f"the `{owner.name}` objective's plan"
                if owner is objective
                else f"the plan of `{objective.name}`'s instance-level base `{owner.name}`"
            )
            return plan, f"{whose}, {settings}"
    return None, None


__all__ = ["SIMILARITY_LABELS", "TRANSPORT_BATCH_SIZE", "batch_transport", "ot_plan_scores"]
