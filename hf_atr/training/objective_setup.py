"""What each objective trains on: the dataset view, the collator and the callbacks it needs beside AtrTrainer.

Most objectives train on caption pairs (:class:`~hf_atr.AtrTrainer`'s default: a :class:`CaptionPairDataset`
over the training languages and :class:`AtrDataCollator`). ATRI's schemes and ASK need more:

- ``kcl``: each English caption slot once per epoch, batched with its ``K`` translations
  (:class:`MultilingualCollator`, ATRI Eq. 9-11);
- ``cacl``: each slot once per epoch in one random non-English language, with its English caption
  (:class:`RandomLanguageDataset` without English + :class:`MultilingualCollator` in ``cacl`` mode, Eq. 12-13);
- ``random_language``: each slot once per epoch in one random language (the ML-CLAP baseline, Eq. 4-5);
- ``ask``: a knowledge base built from the training clips and refreshed during training
  (:class:`KnowledgeBaseRefreshCallback`, ASK §4.4).

With features on the training device the clips keep their raw audio and a :class:`WaveformCollator` prepares the
waveforms (alone, or inside the multilingual collator). The pair objectives also train from a stream
(:class:`~hf_atr.training.streaming.StreamingPairs`); the four above need the whole training set at hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import IterableDataset as StreamedDataset
from transformers import TrainerCallback

from ..data.schema import ENGLISH
from ..objectives.registry import Objective
from ..processing_atr import AtrProcessor
from .callbacks import KnowledgeBaseRefreshCallback
from .collator import CaptionPairDataset
from .multilingual import MultilingualCollator, RandomLanguageDataset
from .streaming import StreamingPairs
from .waveform_collator import WaveformCollator

WHOLE_CORPUS_OBJECTIVES = ("kcl", "cacl", "random_language", "ask")
"""Objectives whose training view needs the whole training set at hand, not a stream: ATRI's per-epoch language
draws over caption slots, and ASK's knowledge base encoded from the training clips."""


@dataclass
class ObjectiveTrainingSetup:
    """Arguments for :class:`~hf_atr.AtrTrainer`: ``train_dataset``, ``data_collator`` (``None``: the
    trainer's default) and ``callbacks``."""

    train_dataset: Any
    data_collator: Any = None
    callbacks: list[TrainerCallback] = field(default_factory=list)


def objective_training_setup(
    objective: Objective,
    clips: Any,
    processor: AtrProcessor,
    *,
    languages: Sequence[str] | None = None,
    seed: int = 0,
    show_progress: bool = False,
    waveforms: WaveformCollator | None = None,
) -> ObjectiveTrainingSetup:
    """The training view of ``clips`` that ``objective`` needs.

    Args:
        objective: the objective :class:`~hf_atr.AtrTrainer` will train with (pass the same instance to it:
            ASK's callback sets its knowledge base).
        clips: shared-schema rows with audio features (raw ``audio`` with ``waveforms``), or, for the objectives
            not in :data:`WHOLE_CORPUS_OBJECTIVES`, a stream (a ``datasets.IterableDataset`` or
            :class:`~hf_atr.training.streaming.StreamingPairs`).
        languages: the caption languages trained on (ISO 639-3; ``None``: English). ``kcl`` / ``cacl`` /
            ``random_language`` draw their languages from them.
        seed: seeds the random language draws and the knowledge base's clustering.
        show_progress: progress bars while ASK's knowledge base is encoded.
        waveforms: for features on the training device (``AtrTrainer(audio_features="device")``), the collator
            that decodes and crops the clips in the DataLoader workers; it becomes the data collator, or the
            audio part of the multilingual one. ``None``: the rows' precomputed features.

    Raises:
        ValueError: a stream for an objective of :data:`WHOLE_CORPUS_OBJECTIVES`.
    """
    languages = list(languages) if languages else [ENGLISH]
    name = objective.name
    if isinstance(clips, (StreamedDataset, StreamingPairs)) and name in WHOLE_CORPUS_OBJECTIVES:
        raise ValueError(
            f"Objective {name!r} cannot train from a stream: it needs the whole training set at hand (ATRI's "
            "per-epoch language draws, ASK's knowledge base of the training clips). Train it from a map-style "
            "dataset (with audio_features='device' the clips need not fit as features)."
        )
    if name == "kcl":
        return ObjectiveTrainingSetup(
            CaptionPairDataset(clips, languages=[ENGLISH]),
            MultilingualCollator(processor, languages=languages, waveforms=waveforms),
        )
    if name == "cacl":
        return ObjectiveTrainingSetup(
            RandomLanguageDataset(clips, languages, seed=seed, include_english=False),
            MultilingualCollator(processor, languages=languages, mode="cacl", waveforms=waveforms),
        )
    if name == "random_language":
        return ObjectiveTrainingSetup(RandomLanguageDataset(clips, languages, seed=seed), waveforms)
    if name == "ask":
        refresh = KnowledgeBaseRefreshCallback(
            objective, processor, clips, show_progress=show_progress, seed=seed
        )
        return ObjectiveTrainingSetup(clips, waveforms, callbacks=[refresh])
    return ObjectiveTrainingSetup(clips, waveforms)


__all__ = ["WHOLE_CORPUS_OBJECTIVES", "ObjectiveTrainingSetup", "objective_training_setup"]
