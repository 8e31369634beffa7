"""What both evaluators share: an evaluation set whose clips are encoded once per call, by one protocol, and the
protocol entries that encoding fills in.

:class:`ClipEvaluator` is the base of :class:`~hf_atr.evaluation.evaluator.RetrievalEvaluator` and
:class:`~hf_atr.evaluation.zero_shot.ZeroShotEvaluator` (as sentence-transformers' evaluators share
``SentenceEvaluator``): it holds the dataset, the processor and how clips are read (windowing, strictness,
batch size), encodes the clips with :func:`~hf_atr.audio_encoding.encode_evaluation_clips` and records in ``protocol``
the scoring head, the window pooling, the clips cut to the window and those skipped as undecodable. The scores
both evaluators rank come from the model's head (:func:`head_similarity`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..audio_encoding import EvaluatedClips, encode_evaluation_clips
from ..processing_atr import AtrProcessor
from ..windowing import Windowing


def describe_split(split: str | None, capital: bool = True) -> str:
    """``"Split 'test'"`` or ``"The evaluation set"`` (a Dataset without a split name), for messages."""
    if split:
        return f"{'Split' if capital else 'split'} {split!r}"
    return "The evaluation set" if capital else "the evaluation set"


def head_similarity(model: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(text (n, d), audio (m, d)) -> (n, m)`` CPU scores from the model's scoring head, on the head's device."""
    head = model.scoring_head
    device = head.logit_scale.device

    @torch.no_grad()
    def similarity(text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        return head.similarity(text_embeds.to(device), audio_embeds.to(device)).cpu()

    return similarity


@dataclass
class EvaluationReport:
    """What :meth:`RetrievalEvaluator.report <hf_atr.evaluation.evaluator.RetrievalEvaluator.report>` (and
    :meth:`~hf_atr.evaluation.zero_shot.ZeroShotEvaluator.report`) return: the metrics and the path of
    ``report.html``."""

    metrics: dict[str, float]
    path: Path


class ClipEvaluator:
    """An evaluation set whose clips are encoded once per call (module docstring); a subclass sets ``protocol``,
    with the entries of :meth:`encoding_protocol`, before it encodes, and names its :attr:`primary_metric`.

    Args:
        dataset: shared-schema rows with precomputed audio features (or raw ``audio``).
        processor: the model's :class:`~hf_atr.AtrProcessor`.
        batch_size, show_progress: of the clip encoding.
        split: name of the evaluation set, used in messages.
        windowing: ``None``: each clip is one forward pass of what the processor prepares (the model's own
            protocol); a :class:`~hf_atr.windowing.Windowing`: long clips embedded window by window and pooled.
        strict: ``False``: an undecodable clip is left out, named in a warning and in ``protocol["skipped_clips"]``;
            ``True``: it raises :class:`~hf_atr.data.audio_arrays.AudioDecodeError`.

    Raises:
        ValueError: a window the processor's extractor cannot read.
    """

    protocol: dict[str, Any]
    """The JSON-ready record of how the figures are obtained."""
    name: str
    """What its metrics are called among several evaluators (:class:`~hf_atr.AtrTrainer` with a list of them
    reports ``eval_<name>_<metric>``)."""
    primary_metric: str
    """The metric a best model is chosen by (``load_best_model_at_end``), one of the keys a call returns."""
    greater_is_better: bool = True
    """Whether a higher :attr:`primary_metric` is a better model."""

    def __init__(
        self,
        dataset: Any,
        processor: AtrProcessor,
        *,
        batch_size: int,
        show_progress: bool,
        split: str | None,
        windowing: Windowing | None,
        strict: bool,
    ) -> None:
        self.dataset = dataset
        self.processor = processor
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.split = split
        self.windowing = windowing
        self.strict = strict
        if windowing is not None:
            windowing.samples(processor.feature_extractor)  # a window the extractor cannot read fails here

    def encoding_protocol(self) -> dict[str, Any]:
        """The protocol entries of the clip encoding: ``similarity`` (the model's scoring head, filled in by each
        call), ``window_pooling`` (``None``: one forward pass per clip; else ``{"pooling", "window_seconds",
        "hop_seconds"}``), and, filled in by each call, ``clips_cut_to_window`` and ``skipped_clips``."""
        window_pooling = (
            None if self.windowing is None else self.windowing.describe(self.processor.feature_extractor)
        )
        return {
            "similarity": None,
            "window_pooling": window_pooling,
            "clips_cut_to_window": None,
            "skipped_clips": [],
        }

    def encode_clips(self, model: Any) -> EvaluatedClips:
        """Every clip once (:func:`~hf_atr.audio_encoding.encode_evaluation_clips`), with the model's scoring head, the
        clips evaluated, cut and skipped recorded in ``protocol``."""
        self.protocol["similarity"] = model.config.scoring
        clips = encode_evaluation_clips(
            model,
            self.processor,
            self.dataset,
            windowing=self.windowing,
            strict=self.strict,
            batch_size=self.batch_size,
            show_progress=self.show_progress,
            description=f"Evaluating on {describe_split(self.split, capital=False)}",
        )
        self.protocol.update(clips.protocol_entries())
        return clips


__all__ = ["ClipEvaluator", "EvaluationReport", "describe_split", "head_similarity"]
