"""The pairwise sigmoid objective of SigLIP (PE-Audio's training loss)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .batch import batch_audio_ids, check_pair_embeddings, same_clip_mask
from .registry import Objective, ObjectiveOutput, register_objective

SIGLIP_CITATION = "Zhai, Mustafa, Kolesnikov, Beyer. Sigmoid Loss for Language Image Pre-Training. ICCV 2023. arXiv:2303.15343"
SIGLIP_LOGIT_SCALE_INIT = math.log(10.0)
"""SigLIP §3.2: ``t' = log 10`` (the factor ``t = exp(t') = 10``)."""
SIGLIP_LOGIT_BIAS_INIT = -10.0
"""SigLIP §3.2: ``b = −10``, so that the many negatives start with a small loss."""


@register_objective("sigmoid")
class SigmoidObjective(Objective):
    r"""SigLIP's sigmoid loss (Zhai et al., ICCV 2023, Eq. 1): every caption/clip pair is a binary decision, with
    no softmax over the batch.

    .. math::
        L = -\frac{1}{|B|} \sum_{i=1}^{|B|} \sum_{j=1}^{|B|} \log \sigma\big(z_{ij} (t\, x_i \cdot y_j + b)\big),

    with ``t · x_i·y_j + b`` the scoring head's logit of caption ``i`` and clip ``j`` (its scale and bias, SigLIP's
    ``t = exp(t')`` and ``b``: :meth:`~hf_atr.scoring_head.AtrScoringHead.forward`), ``z_ij = +1`` when row ``j``
    holds the clip of row ``i`` (equal ``batch["audio_ids"]``: a clip drawn with two of its captions is a positive
    of both) and ``−1`` otherwise. New models start at SigLIP's ``t' = log 10``, ``b = −10``
    (``AtrConfig`` takes them from :attr:`paper_logit_scale_init` / :attr:`paper_logit_bias_init`); a model
    converted from PE-Audio starts from its checkpoint's. Without a model the loss uses those initial values.

    Under several processes the trainer hands every rank the global batch (:mod:`hf_atr.distributed`), so the sum
    runs over every rank's positives and negatives, as the paper's chunked implementation does.

    At ``b = −10`` almost only the positives have a gradient, all of it attraction with no softmax to subtract the
    batch mean: where captions are alike the first gradients are larger than the contrastive objective's (6.5× in
    the tiny test towers' audio bias gradients), so float16 loss scaling may skip a first step more, as designed.

    Not transformers' ``PeAudioModel(return_loss=True)``: it uses ``eye(n)`` labels, 0 and 1 where Eq. 1 has −1
    and +1. There every negative pair contributes ``−log σ(0 · logit) = log 2``, a constant with no gradient, so
    only the positives are trained: it is not a sigmoid contrastive loss. Here negatives are pushed apart.

    Example::

        objective = build_objective({"name": "sigmoid"})
        output = objective(audio_embeds, text_embeds, batch={"audio_ids": ids}, model=model)
        output.loss.backward()
    """

    description = "pairwise sigmoid loss over in-batch pairs (SigLIP)"
    citation = (SIGLIP_CITATION,)
    paper_logit_scale_init = SIGLIP_LOGIT_SCALE_INIT
    paper_logit_bias_init = SIGLIP_LOGIT_BIAS_INIT

    def logit_scales_read(self) -> frozenset[str]:
        """``{"logit_scale"}``: one symmetric decision per pair, scaled by the head's (text→audio) scale."""
        return frozenset({"logit_scale"})

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: dict[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        check_pair_embeddings(audio_embeds, text_embeds, self.name)
        batch_size = audio_embeds.shape[0]
        if model is None:
            logits = math.exp(SIGLIP_LOGIT_SCALE_INIT) * text_embeds @ audio_embeds.T + SIGLIP_LOGIT_BIAS_INIT
        else:
            logits = model.scoring_head(text_embeds, audio_embeds)  # t · x_i·y_j + b, (n_text, n_audio)
        positives = same_clip_mask(batch_audio_ids(batch), batch_size, audio_embeds.device)
        labels = positives.to(logits.dtype) * 2 - 1  # z_ij: +1 on the same clip, −1 elsewhere
        pair_losses = -F.logsigmoid(labels * logits)  # Eq. 1
        loss = pair_losses.sum() / batch_size
        with torch.no_grad():
            positive_loss = pair_losses[positives].sum() / batch_size
        return ObjectiveOutput(
            loss=loss,
            logs={"loss_positives": positive_loss, "loss_negatives": (loss.detach() - positive_loss)},
        )


__all__ = ["SIGLIP_CITATION", "SigmoidObjective"]
