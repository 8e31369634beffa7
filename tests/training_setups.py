"""How an ATR user trains each objective (data, collator, callbacks), shared by the training tests and the
multi-process workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tiny_models import LANGUAGES, feature_dataset, make_model, multilingual_features

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.objectives.registry import build_objective
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.multilingual import MultilingualCollator, RandomLanguageDataset


@dataclass
class Float64Batches:
    """A collator whose floating tensors come out in float64 (for exactness checks of a float64 model)."""

    collator: Any

    def __call__(self, rows):
        batch = self.collator(rows)
        return {
            key: value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value
            for key, value in batch.items()
        }


def objective_setup(name: str, processor, num_clips: int = 24, knowledge_base: str = "callback"):
    """``(objective, train_dataset, data_collator, callbacks)`` for objective ``name``.

    ``knowledge_base`` (ASK): ``"callback"`` builds it with the model being trained, as a user does;
    ``"fixed"`` sets one from seeded random embeddings (no encoding: works for any model dtype).
    """
    objective = build_objective({"name": name})
    if name == "kcl":
        return (
            objective,
            multilingual_features(num_clips),
            MultilingualCollator(processor, languages=LANGUAGES),
            [],
        )
    if name == "cacl":
        clips = RandomLanguageDataset(multilingual_features(num_clips), LANGUAGES, include_english=False)
        return objective, clips, MultilingualCollator(processor, languages=LANGUAGES, mode="cacl"), []
    if name == "random_language":
        clips = RandomLanguageDataset(multilingual_features(num_clips), LANGUAGES)
        return objective, clips, AtrDataCollator(processor), []
    dataset = feature_dataset(num_clips)
    callbacks = []
    if name == "ask":
        objective = build_objective({"name": "ask", "num_prototypes": 4})
        if knowledge_base == "callback":
            callbacks = [
                KnowledgeBaseRefreshCallback(
                    objective, processor, dataset, refresh=False, show_progress=False
                )
            ]
        else:
            generator = torch.Generator().manual_seed(0)
            audio, text = torch.randn(2, 2 * num_clips, 16, generator=generator)
            ids = [f"clip{index % num_clips}" for index in range(2 * num_clips)]
            objective.knowledge_base = KnowledgeBase.from_embeddings(
                audio, text, audio_ids=ids, num_prototypes=4
            )
    return objective, dataset, None, callbacks


def exact_model(processor, name: str, seed: int = 0):
    """The tiny AST + BERT model for objective ``name`` in float64 with dropout off."""
    model = make_model(processor=processor, objective={"name": name}, seed=seed)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.double()
