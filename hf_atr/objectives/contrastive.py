"""Symmetric NT-Xent / InfoNCE contrastive objective (the CLAP / CLIP baseline)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .batch import check_pair_embeddings, clip_id_matches, other_copies_mask, split_negative_audio
from .registry import LOGIT_SCALE_NAMES, Objective, ObjectiveOutput, register_objective

CLIP_CITATION = (
    "Radford et al. Learning Transferable Visual Models From Natural Language Supervision (CLIP). ICML 2021. "
    "arXiv:2103.00020"
)
CLAP_CITATION = (
    "Elizalde et al. CLAP: Learning Audio Concepts From Natural Language Supervision. ICASSP 2023. "
    "arXiv:2206.04769"
)


def pair_similarity(
    audio_embeds: torch.Tensor, text_embeds: torch.Tensor, model: nn.Module | None
) -> torch.Tensor:
    """``(n_text, n_audio)`` unscaled similarity from the model's scoring head, or the inner product without a model."""
    if model is not None:
        return model.scoring_head.similarity(text_embeds, audio_embeds)
    return text_embeds @ audio_embeds.T


@register_objective("contrastive")
class ContrastiveObjective(Objective):
    r"""Symmetric NT-Xent (InfoNCE) over the in-batch pairs, as in CLIP / CLAP.

    With ``S`` the ``(batch, batch)`` text-to-audio similarity and ``t`` the temperature,

    .. math::
        L = \tfrac12\big[\mathrm{CE}(S/t, \mathrm{diag}) + \mathrm{CE}(S^\top/t, \mathrm{diag})\big].

    Rows that are the same clip (equal ``batch["audio_ids"]``) are removed from each other's negatives,
    so a clip drawn with two of its captions is not pushed away from itself.

    Args:
        temperature: fixed temperature ``t``. ``None`` (default) uses the model scoring head's learnable
            ``logit_scale`` (CLIP; with two scales, as CLAP, the audio scale for the audio→text term), or
            ``t = 0.07`` when no model is passed.

    Example::

        objective = build_objective({"name": "contrastive", "temperature": 0.05})
        output = objective(audio_embeds, text_embeds, batch={"audio_ids": ids})
        output.loss.backward()
    """

    description = "symmetric InfoNCE over in-batch pairs (CLIP / CLAP)"
    citation = (CLIP_CITATION, CLAP_CITATION)
    DEFAULT_TEMPERATURE = 0.07

    def __init__(self, temperature: float | None = None) -> None:
        super().__init__()
        if temperature is not None and not (
            isinstance(temperature, (int, float)) and 0 < temperature < math.inf
        ):
            raise ValueError(
                f"contrastive: `temperature` must be a positive number or None, got {temperature!r}."
            )
        self.temperature = temperature

    accepts_negative_audio = True
    reads_logit_bias = False  # a softmax over a row is unchanged by a bias added to every logit
    learned_logit_scales: ClassVar[frozenset[str]] = LOGIT_SCALE_NAMES
    """The head's logit scales the loss reads with the learnable temperature: both here (the audio scale for the
    audio→text term); ``{"logit_scale"}`` in subclasses that scale both directions by it."""

    def logit_scales_read(self) -> frozenset[str]:
        """:attr:`learned_logit_scales` with the learnable temperature (the default), none with a fixed one."""
        return self.learned_logit_scales if self.temperature is None else frozenset()

    def logit_scale(self, model: nn.Module | None) -> torch.Tensor | float:
        """The factor ``1/t`` applied to similarities (the text→audio one when the model has two)."""
        if self.temperature is not None:
            return 1.0 / self.temperature
        if model is not None:
            return model.scoring_head.scale()
        return 1.0 / self.DEFAULT_TEMPERATURE

    def audio_logit_scale(self, model: nn.Module | None) -> torch.Tensor | float:
        """The factor of the audio→text direction: the head's audio scale (CLAP's ``logit_scale_a``)."""
        if self.temperature is None and model is not None:
            return model.scoring_head.audio_scale()
        return self.logit_scale(model)

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds``, ``text_embeds``: ``(batch, dim)``, row i of each forms a positive pair.

        With unpaired audio rows (``batch["negative_audio"]``, moment training's crops outside the moments)
        ``audio_embeds`` is ``(batch + n_negative, dim)``: the negatives join the candidates of every caption in
        the text→audio term, ``CE([S | S_neg]/t, diag)`` with ``S_neg: (batch, n_negative)``, and have no
        audio→text term (they have no caption). A negative with the ``audio_id`` of a row's own clip is not its
        negative.
        """
        rows = split_negative_audio(audio_embeds, batch)
        check_pair_embeddings(rows.paired, text_embeds, self.name)
        batch_size = rows.paired.shape[0]
        similarity = pair_similarity(rows.paired, text_embeds, model)
        other_copies = other_copies_mask(rows.paired_ids, batch_size, similarity.device)
        # Mask after scaling: a masked -inf times the scale would give the scale a NaN gradient.
        logits_per_text = (self.logit_scale(model) * similarity).masked_fill(other_copies, float("-inf"))
        logits_per_audio = (self.audio_logit_scale(model) * similarity.T).masked_fill(
            other_copies.T, float("-inf")
        )
        if rows.negatives.shape[0]:
            own_clip = clip_id_matches(
                rows.paired_ids or [str(row) for row in range(batch_size)],
                rows.negative_ids,
                similarity.device,
            )
            negative_logits = self.logit_scale(model) * pair_similarity(rows.negatives, text_embeds, model)
            logits_per_text = torch.cat(
                [logits_per_text, negative_logits.masked_fill(own_clip, float("-inf"))], dim=1
            )
        targets = torch.arange(batch_size, device=similarity.device)
        text_to_audio = F.cross_entropy(logits_per_text, targets)
        audio_to_text = F.cross_entropy(logits_per_audio, targets)
        loss = (text_to_audio + audio_to_text) / 2
        return ObjectiveOutput(
            loss=loss,
            logs={"loss_t2a": text_to_audio.detach(), "loss_a2t": audio_to_text.detach()},
        )
