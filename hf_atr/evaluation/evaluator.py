"""Encode an evaluation set once (:mod:`hf_atr.encoding`) and compute retrieval metrics (DESIGN.md, "Data flow" 7)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..encoding import caption_table, encode_audio, encode_text
from ..ot import sinkhorn_log_plan
from ..processing_atr import AtrProcessor
from .retrieval import retrieval_metrics, retrieval_metrics_from_embeddings

SCORING_MODES = ("head", "ot_plan")


def head_similarity(model: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(text (n, d), audio (m, d)) -> (n, m)`` CPU scores from the model's scoring head, on the head's device."""
    head = model.scoring_head
    device = head.logit_scale.device

    @torch.no_grad()
    def similarity(text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        return head.similarity(text_embeds.to(device), audio_embeds.to(device)).cpu()

    return similarity


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


class RetrievalEvaluator:
    """Retrieval metrics of a model on one evaluation set: encode every clip and caption once, then score.

    Args:
        dataset: shared-schema dataset with precomputed audio features (or raw ``audio``).
        processor: the model's :class:`~hf_atr.AtrProcessor` (tokenises captions, featurises raw audio).
        languages: caption languages to evaluate (``None``: English). With several, per-language keys
            carry a ``/<lang>`` suffix, un-suffixed keys are the mean over languages, and ``MRV`` is added.

    Calling it with a model returns the flat dict of
    :func:`~hf_atr.evaluation.retrieval.retrieval_metrics_from_embeddings`; scores come from the model's
    scoring head (cosine, or negative Euclidean/Mahalanobis distance), or with ``scoring="ot_plan"``
    from the entropic OT plan between all captions of a language and all clips (m-LTM Eq. 5,
    regularisation ``ot_reg``), see :func:`ot_plan_scores`.
    """

    def __init__(
        self,
        dataset: Any,
        processor: AtrProcessor,
        *,
        languages: Sequence[str] | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        scoring: str = "head",
        ot_reg: float = 0.05,
    ) -> None:
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}.")
        self.scoring = scoring
        self.ot_reg = ot_reg
        self.dataset = dataset
        self.processor = processor
        self.languages = list(languages) if languages else None
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.table = caption_table(dataset, self.languages)

    def __call__(self, model: Any) -> dict[str, float]:
        audio_embeds = encode_audio(
            model, self.processor, self.dataset, batch_size=self.batch_size, show_progress=self.show_progress
        )
        text_embeds = encode_text(
            model,
            self.processor,
            self.table.captions,
            batch_size=4 * self.batch_size,
            show_progress=self.show_progress,
        )
        multilingual = self.languages is not None and len(self.languages) > 1
        metadata = {
            "languages": self.table.languages if multilingual else None,
            "caption_groups": self.table.caption_groups if multilingual else None,
        }
        if self.scoring == "ot_plan":
            scores = ot_plan_scores(model, text_embeds, audio_embeds, self.table.languages, reg=self.ot_reg)
            return retrieval_metrics(scores, self.table.text_to_audio, **metadata)
        score_fn = None if model.config.scoring == "cosine" else head_similarity(model)
        with torch.no_grad():
            return retrieval_metrics_from_embeddings(
                audio_embeds,
                text_embeds,
                self.table.text_to_audio,
                score_fn=score_fn,
                **metadata,
            )
