"""Encode an evaluation set once and compute retrieval metrics (DESIGN.md, "Data flow" 7)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from ..data.schema import ENGLISH, captions_in_language
from ..ot import sinkhorn_log_plan
from ..processing_atr import AtrProcessor, audio_batch
from .retrieval import retrieval_metrics, retrieval_metrics_from_embeddings

SCORING_MODES = ("head", "ot_plan")


@dataclass
class CaptionTable:
    """Every caption of an evaluation set, flattened.

    ``captions[i]`` belongs to clip ``text_to_audio[i]``, is in language ``languages[i]``, and
    ``caption_groups[i]`` is shared by the translations of one English caption (clip, slot).
    """

    captions: list[str]
    text_to_audio: torch.Tensor
    languages: list[str]
    caption_groups: torch.Tensor


def caption_table(dataset: Any, languages: Sequence[str] | None = None) -> CaptionTable:
    """Flatten the ``captions`` (English) and ``translations[lang]`` of a shared-schema dataset.

    Args:
        languages: ISO 639-3 codes to include; ``None`` means English only. Clips without a
            translation in a language are skipped for that language.
    """
    languages = list(languages) if languages else [ENGLISH]
    columns = ["captions"] + (["translations"] if any(lang != ENGLISH for lang in languages) else [])
    missing_columns = [column for column in columns if column not in dataset.column_names]
    if missing_columns:
        raise ValueError(
            f"Evaluation set lacks column(s) {missing_columns} needed for languages {languages}."
        )
    rows = dataset.select_columns(columns)
    slots_per_clip = max((len(captions) for captions in rows["captions"]), default=0)
    captions, text_to_audio, caption_languages, caption_groups = [], [], [], []
    for clip_index, row in enumerate(rows):
        for language in languages:
            for slot, caption in enumerate(captions_in_language(row, language) or []):
                if not isinstance(caption, str) or not caption.strip():
                    raise ValueError(f"Clip {clip_index}: {language} caption {slot} is empty ({caption!r}).")
                captions.append(caption)
                text_to_audio.append(clip_index)
                caption_languages.append(language)
                caption_groups.append(clip_index * slots_per_clip + slot)
    return CaptionTable(
        captions, torch.tensor(text_to_audio), caption_languages, torch.tensor(caption_groups)
    )


@torch.no_grad()
def encode_audio(
    model: Any, processor: AtrProcessor, dataset: Any, *, batch_size: int = 64, show_progress: bool = False
) -> torch.Tensor:
    """``(n_clips, dim)`` audio embeddings of a dataset with precomputed features (or raw ``audio``)."""
    model.eval()
    device = next(model.parameters()).device
    chunks = []
    for start in tqdm(range(0, len(dataset), batch_size), desc="Encoding audio", disable=not show_progress):
        rows = [dataset[index] for index in range(start, min(start + batch_size, len(dataset)))]
        audio_ids = [str(row.get("audio_id", start + offset)) for offset, row in enumerate(rows)]
        inputs = {name: value.to(device) for name, value in audio_batch(processor, rows, audio_ids).items()}
        chunks.append(model.get_audio_features(**inputs).float().cpu())
    return torch.cat(chunks)


@torch.no_grad()
def encode_text(
    model: Any,
    processor: AtrProcessor,
    captions: Sequence[str],
    *,
    batch_size: int = 256,
    show_progress: bool = False,
) -> torch.Tensor:
    """``(n_captions, dim)`` caption embeddings."""
    model.eval()
    device = next(model.parameters()).device
    chunks = []
    for start in tqdm(
        range(0, len(captions), batch_size), desc="Encoding captions", disable=not show_progress
    ):
        tokens = processor(text=list(captions[start : start + batch_size]), return_tensors="pt")
        chunks.append(model.get_text_features(**{k: v.to(device) for k, v in tokens.items()}).float().cpu())
    return torch.cat(chunks)


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
        was_training = model.training
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
        model.train(was_training)
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
