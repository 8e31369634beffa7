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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from ..data.schema import ENGLISH
from ..objectives.registry import Objective
from ..processing_atr import AtrProcessor
from .callbacks import KnowledgeBaseRefreshCallback
from .collator import CaptionPairDataset
from .multilingual import MultilingualCollator, RandomLanguageDataset


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
) -> ObjectiveTrainingSetup:
    """The training view of ``clips`` (shared-schema rows with audio features) that ``objective`` needs.

    Args:
        objective: the objective :class:`~hf_atr.AtrTrainer` will train with (pass the same instance to it:
            ASK's callback sets its knowledge base).
        languages: the caption languages trained on (ISO 639-3; ``None``: English). ``kcl`` / ``cacl`` /
            ``random_language`` draw their languages from them.
        seed: seeds the random language draws and the knowledge base's clustering.
        show_progress: progress bars while ASK's knowledge base is encoded.
    """
    languages = list(languages) if languages else [ENGLISH]
    name = objective.name
    if name == "kcl":
        return ObjectiveTrainingSetup(
            CaptionPairDataset(clips, languages=[ENGLISH]),
            MultilingualCollator(processor, languages=languages),
        )
    if name == "cacl":
        return ObjectiveTrainingSetup(
            RandomLanguageDataset(clips, languages, seed=seed, include_english=False),
            MultilingualCollator(processor, languages=languages, mode="cacl"),
        )
    if name == "random_language":
        return ObjectiveTrainingSetup(RandomLanguageDataset(clips, languages, seed=seed))
    if name == "ask":
        refresh = KnowledgeBaseRefreshCallback(
            objective, processor, clips, show_progress=show_progress, seed=seed
        )
        return ObjectiveTrainingSetup(clips, callbacks=[refresh])
    return ObjectiveTrainingSetup(clips)


__all__ = ["ObjectiveTrainingSetup", "objective_training_setup"]
