"""Multilingual objectives of ATRI (ACL 2025): 1-to-K contrastive (KCL), audio-English co-anchor (CACL),
and the ML-CLAP random-language baseline they are compared with.

Multilingual batches carry ``text_embeds`` of shape ``(batch, K, dim)``: row ``i`` holds clip ``i``'s
captions in ``K`` languages (for CACL ``K = 2``: English, then one other language). A clip may lack a
language; ``batch["language_mask"]`` ``(batch, K)`` (bool) marks the captions that are present, and absent
ones take no part in the loss, neither as anchors nor as negatives. The collator fills their slots with a
placeholder caption (see :class:`hf_atr.training.multilingual.MultilingualCollator`), never an empty one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .batch import LANGUAGE_MASK, batch_audio_ids, other_copies_mask
from .contrastive import ContrastiveObjective, pair_similarity
from .registry import ObjectiveOutput, register_objective

ATRI_TEMPERATURE = 0.07
"""τ of every ATRI configuration, fixed (ATRI §5.1, "Implementation details"), for KCL, CACL and the baseline."""
ATRI_CITATION = (
    "Yin, Xie, Yang, Yang, Ru, Zhuang, Liang, Zou. ATRI: Mitigating Multilingual Audio Text Retrieval "
    "Inconsistencies by Reducing Data Distribution Errors. ACL 2025. arXiv:2502.14627"
)


def masked_symmetric_info_nce(
    logits: torch.Tensor,
    row_present: torch.Tensor,
    column_present: torch.Tensor,
    other_copies: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Summed InfoNCE terms of ATRI Eq. (10)/(11)/(13) in both directions, over groups of in-batch pairs.

    ``logits[g, i, j] = s(u_i, v_j) / t`` for group ``g`` (a language in KCL, a modality pair in CACL).
    Pair ``(u_i, v_i)`` counts when both are present; the candidates of an anchor are the present items of
    the other side, minus the other rows of the same clip (duplicates are never negatives).

    Args:
        logits: ``(groups, batch, batch)`` scaled similarities, rows ``u``, columns ``v``.
        row_present: ``(groups, batch)`` bool, ``u_i`` exists.
        column_present: ``(groups, batch)`` bool, ``v_j`` exists.
        other_copies: ``(batch, batch)`` bool, rows ``i != j`` holding the same clip.

    Returns:
        ``(u_to_v, v_to_u, pairs)``, each ``(groups,)``: the summed negative log-likelihoods
        :math:`-\sum_i \log \frac{\exp(l_{ii})}{\sum_j \exp(l_{ij})}` of each direction over the counted
        pairs, and the number of counted pairs.
    """
    counted = row_present & column_present
    # Mask only inside counted rows: a fully masked row would give a NaN gradient even when discarded.
    u_to_v_excluded = (other_copies[None] | ~column_present[:, None, :]) & counted[:, :, None]
    v_to_u_excluded = (other_copies[None] | ~row_present[:, None, :]) & counted[:, :, None]
    u_to_v_logits = logits.masked_fill(u_to_v_excluded, float("-inf"))
    v_to_u_logits = logits.transpose(1, 2).masked_fill(v_to_u_excluded, float("-inf"))
    positives = logits.diagonal(dim1=1, dim2=2)
    u_to_v_nll = u_to_v_logits.logsumexp(dim=2) - positives
    v_to_u_nll = v_to_u_logits.logsumexp(dim=2) - positives
    zero = positives.new_zeros(())
    return (
        torch.where(counted, u_to_v_nll, zero).sum(dim=1),
        torch.where(counted, v_to_u_nll, zero).sum(dim=1),
        counted.sum(dim=1),
    )


def language_mask_of(
    batch: Mapping[str, Any] | None, shape: tuple[int, int], device: torch.device, name: str
) -> torch.Tensor:
    """``batch["language_mask"]`` checked to be a ``(batch, K)`` bool tensor; all True when the batch has none."""
    mask = None if batch is None else batch.get(LANGUAGE_MASK)
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool or tuple(mask.shape) != shape:
        raise ValueError(
            f"Objective {name!r}: batch['language_mask'] must be a bool tensor of shape (batch, K) = {shape}, "
            f"got {mask.dtype} {tuple(mask.shape)}."
        )
    return mask


def _check_multilingual_embeddings(
    audio_embeds: torch.Tensor, text_embeds: torch.Tensor, name: str, captions_per_audio: int | None = None
) -> None:
    if audio_embeds.dim() != 2 or text_embeds.dim() != 3 or text_embeds.shape[0] != audio_embeds.shape[0]:
        raise ValueError(
            f"Objective {name!r} expects audio_embeds (batch, dim) and text_embeds (batch, K, dim) with one row of "
            f"captions per clip, got {tuple(audio_embeds.shape)} and {tuple(text_embeds.shape)}. Train it with "
            "hf_atr.training.multilingual.MultilingualCollator, whose captions the trainer groups per clip."
        )
    if captions_per_audio is not None and text_embeds.shape[1] != captions_per_audio:
        raise ValueError(
            f"Objective {name!r} expects {captions_per_audio} captions per clip (English, then one other language), "
            f"got text_embeds {tuple(text_embeds.shape)}; use MultilingualCollator(mode={name!r})."
        )


class AtriContrastiveObjective(ContrastiveObjective):
    """Contrastive objectives of ATRI's experiments, at ATRI's fixed temperature by default (unregistered base).

    Args:
        temperature: ``τ``, fixed at ATRI's 0.07 by default (ATRI §5.1); ``None`` uses the scoring head's
            learnable logit scale instead (CLIP), as :class:`~hf_atr.objectives.contrastive.ContrastiveObjective`.
    """

    def __init__(self, temperature: float | None = ATRI_TEMPERATURE) -> None:
        super().__init__(temperature=temperature)


@register_objective("random_language")
class RandomLanguageObjective(AtriContrastiveObjective):
    r"""The ML-CLAP baseline (ATRI Eq. 4–5): symmetric InfoNCE where each clip's caption is in one random language.

    The objective is the plain contrastive loss on ``(batch, dim)`` pairs; what makes it ML-CLAP is the data:
    every epoch draws one language per (clip, caption) — see
    :class:`hf_atr.training.multilingual.RandomLanguageDataset`. Registered under its own name so that
    configurations and logs say which training scheme was used.

    Args:
        temperature: fixed ``τ = 0.07`` by default, as ATRI trains its baseline (§5.1); ``None`` for the
            scoring head's learnable scale.

    Example::

        dataset = RandomLanguageDataset(features["train"], languages=LANGUAGES)
        objective = build_objective({"name": "random_language"})
    """

    description = "contrastive learning on one random caption language per step (ATRI baseline)"
    citation = (ATRI_CITATION,)
    training_view = "random_language"
    needs_whole_corpus = True  # per-epoch language draws over every caption slot


@register_objective("kcl")
class KclObjective(AtriContrastiveObjective):
    r"""1-to-K contrastive learning (ATRI Eq. 9–11): every clip against its captions in all K languages.

    .. math::
        L_{kcl} = \frac{1}{2NK}\Big(-\sum_{k,i} \log \frac{e^{s(a_i,t_{ik})/\tau}}{\sum_j e^{s(a_i,t_{jk})/\tau}}
        -\sum_{k,i} \log \frac{e^{s(t_{ik},a_i)/\tau}}{\sum_j e^{s(t_{ik},a_j)/\tau}}\Big)

    Each language forms its own in-batch InfoNCE (the audio of clip ``i`` competes with the language-``k``
    captions of the other clips, never with other languages). Absent captions
    (``batch["language_mask"]`` False) are dropped and the normaliser ``2NK`` becomes twice the number of
    present captions; other rows of the same clip (``batch["audio_ids"]``) are never negatives.

    Args:
        temperature: fixed ``τ``, ATRI's 0.07 by default (§5.1); ``None`` uses the scoring head's learnable
            scale instead, as :class:`~hf_atr.objectives.contrastive.ContrastiveObjective` does by default.

    Example::

        output = build_objective({"name": "kcl"})(audio_embeds, text_embeds,   # (B, D), (B, K, D)
                                                  batch={"audio_ids": ids, "language_mask": mask})
    """

    description = "K-language contrastive learning over all caption translations (ATRI)"
    citation = (ATRI_CITATION,)
    training_view = "all_languages"
    needs_whole_corpus = True  # each English caption slot of every clip once per epoch, with its translations

    learned_logit_scales = frozenset({"logit_scale"})  # both directions use it, never audio_logit_scale

    accepts_negative_audio = False  # its own forward: (batch, K, dim) captions, no negative rows

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds`` ``(batch, dim)``; ``text_embeds`` ``(batch, K, dim)``, ``[i, k]`` = clip i in language k."""
        _check_multilingual_embeddings(audio_embeds, text_embeds, self.name)
        batch_size, languages, _ = text_embeds.shape
        device = audio_embeds.device
        present = language_mask_of(batch, (batch_size, languages), device, self.name)
        # (batch * K, batch) → (K, audio i, text j): one scoring-head call for all languages.
        similarity = pair_similarity(audio_embeds, text_embeds.reshape(batch_size * languages, -1), model)
        logits = self.logit_scale(model) * similarity.view(batch_size, languages, batch_size).permute(1, 2, 0)
        other_copies = other_copies_mask(batch_audio_ids(batch), batch_size, device)
        audio_present = torch.ones(languages, batch_size, dtype=torch.bool, device=device)
        audio_to_text, text_to_audio, pairs = masked_symmetric_info_nce(
            logits, audio_present, present.T, other_copies
        )
        total_pairs = int(pairs.sum())
        if total_pairs == 0:
            raise ValueError(f"Objective {self.name!r}: batch['language_mask'] marks no caption as present.")
        loss = (audio_to_text.sum() + text_to_audio.sum()) / (2 * total_pairs)  # ATRI Eq. (9)
        return ObjectiveOutput(
            loss=loss,
            logs={
                "loss_a2t": audio_to_text.detach().sum() / total_pairs,
                "loss_t2a": text_to_audio.detach().sum() / total_pairs,
                "present_fraction": total_pairs / (batch_size * languages),
            },
        )


@register_objective("cacl")
class CaclObjective(AtriContrastiveObjective):
    r"""Audio-English co-anchor contrastive learning (ATRI Eq. 12–13).

    Each clip comes with its English caption ``e_i`` and a caption ``o_i`` in one random other language:

    .. math::
        L_{cacl} = \frac{1}{6N}\big(L^{ae} + L^{ao} + L^{eo}\big),

    each :math:`L^{uv}` the summed symmetric InfoNCE of Eq. (13) between audio–English, audio–other and
    English–other (so the other language is pulled towards both audio and English). Similarities come
    from the model's scoring head for all three pairs, at one temperature. A clip whose other-language
    caption is absent (``batch["language_mask"][:, 1]`` False) keeps its audio–English term only; the
    normaliser ``6N`` becomes twice the number of counted pairs.

    Args:
        temperature: fixed ``τ``, ATRI's 0.07 by default (§5.1); ``None`` uses the scoring head's learnable
            scale instead.

    Example::

        output = build_objective({"name": "cacl"})(audio_embeds, text_embeds,  # (B, D), (B, 2, D)
                                                   batch={"audio_ids": ids, "language_mask": mask})
    """

    description = "contrastive learning with a cross-language consistency term (ATRI)"
    citation = (ATRI_CITATION,)
    training_view = "english_and_random_language"
    needs_whole_corpus = True  # per-epoch language draws over every caption slot

    learned_logit_scales = frozenset({"logit_scale"})  # both directions use it, never audio_logit_scale

    accepts_negative_audio = False  # its own forward: (batch, K, dim) captions, no negative rows

    def forward(
        self,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        batch: Mapping[str, Any] | None = None,
        model: nn.Module | None = None,
    ) -> ObjectiveOutput:
        """``audio_embeds`` ``(batch, dim)``; ``text_embeds`` ``(batch, 2, dim)``: English, then the other language."""
        _check_multilingual_embeddings(audio_embeds, text_embeds, self.name, captions_per_audio=2)
        batch_size = audio_embeds.shape[0]
        device = audio_embeds.device
        present = language_mask_of(batch, (batch_size, 2), device, self.name)
        english, other = text_embeds[:, 0], text_embeds[:, 1]
        # pair_similarity(v, u) is (n_u, n_v): rows are the anchors u of L^{uv}.
        logits = self.logit_scale(model) * torch.stack(
            [
                pair_similarity(english, audio_embeds, model),
                pair_similarity(other, audio_embeds, model),
                pair_similarity(other, english, model),
            ]
        )
        audio_present = torch.ones(batch_size, dtype=torch.bool, device=device)
        row_present = torch.stack([audio_present, audio_present, present[:, 0]])
        column_present = torch.stack([present[:, 0], present[:, 1], present[:, 1]])
        other_copies = other_copies_mask(batch_audio_ids(batch), batch_size, device)
        forward_nll, backward_nll, pairs = masked_symmetric_info_nce(
            logits, row_present, column_present, other_copies
        )
        total_pairs = int(pairs.sum())
        if total_pairs == 0:
            raise ValueError(f"Objective {self.name!r}: batch['language_mask'] marks no caption as present.")
        pair_losses = forward_nll + backward_nll
        loss = pair_losses.sum() / (2 * total_pairs)  # ATRI Eq. (12): 1/(6N) when nothing is missing
        per_pair = pair_losses.detach() / (2 * pairs.clamp(min=1))
        return ObjectiveOutput(
            loss=loss,
            logs={
                "loss_audio_english": per_pair[0],
                "loss_audio_other": per_pair[1],
                "loss_english_other": per_pair[2],
            },
        )
