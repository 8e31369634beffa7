"""Triplet ranking objective with hardest negatives (VSE++)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .batch import batch_audio_ids, check_pair_embeddings, same_clip_mask
from .contrastive import pair_similarity
from .registry import Objective, ObjectiveOutput, register_objective


@register_objective("triplet")
class TripletObjective(Objective):
    r"""Bidirectional hinge triplet loss (Faghri et al., VSE++, BMVC 2018, Eq. 4–5).

    With ``s(t, a)`` the scoring head's similarity and ``m`` the margin, for every positive pair
    ``(t_i, a_i)``:

    .. math::
        \ell_i = [m - s(t_i, a_i) + s(t_i, a_j)]_+ + [m - s(t_i, a_i) + s(t_j, a_i)]_+ ,

    where with ``max_violation=True`` ``j`` is the hardest in-batch negative of each direction (VSE++),
    and otherwise the hinge is summed over all negatives (VSE0). The loss is the batch mean of ``ℓ_i``.
    Other rows of the same clip are never negatives.

    Args:
        margin: hinge margin ``m`` (default 0.2).
        max_violation: hardest negative only (default True) or sum over negatives.
    """

    description = "hinge triplet loss on the hardest in-batch negatives (VSE++)"
    citation = (
        "Faghri, Fleet, Kiros, Fidler. VSE++: Improving Visual-Semantic Embeddings with Hard Negatives. "
        "BMVC 2018. arXiv:1707.05612",
    )

    reads_logit_bias = False

    def logit_scales_read(self) -> frozenset[str]:
        """None: the loss depends on the similarities alone, never on the head's logit scales."""
        return frozenset()

    def __init__(self, margin: float = 0.2, max_violation: bool = True) -> None:
        super().__init__()
        if not isinstance(margin, (int, float)) or margin < 0:
            raise ValueError(f"triplet: `margin` must be a non-negative number, got {margin!r}.")
        self.margin = float(margin)
        self.max_violation = bool(max_violation)

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds``, ``text_embeds``: ``(batch, dim)``, row i of each forms a positive pair."""
        check_pair_embeddings(audio_embeds, text_embeds, self.name)
        batch_size = audio_embeds.shape[0]
        similarity = pair_similarity(audio_embeds, text_embeds, model)
        positive = similarity.diagonal()
        not_negative = same_clip_mask(batch_audio_ids(batch), batch_size, similarity.device)
        text_anchor_cost = (
            (self.margin + similarity - positive[:, None]).clamp(min=0).masked_fill(not_negative, 0.0)
        )
        audio_anchor_cost = (
            (self.margin + similarity - positive[None, :]).clamp(min=0).masked_fill(not_negative, 0.0)
        )
        if self.max_violation:
            text_anchor_loss = text_anchor_cost.max(dim=1).values
            audio_anchor_loss = audio_anchor_cost.max(dim=0).values
        else:
            text_anchor_loss = text_anchor_cost.sum(dim=1)
            audio_anchor_loss = audio_anchor_cost.sum(dim=0)
        loss = (text_anchor_loss + audio_anchor_loss).mean()
        return ObjectiveOutput(
            loss=loss,
            logs={
                "loss_text_anchor": text_anchor_loss.mean().detach(),
                "loss_audio_anchor": audio_anchor_loss.mean().detach(),
            },
        )
