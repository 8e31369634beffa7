"""How an ATR user trains each objective (data, collator, callbacks), shared by the training tests and the
multi-process workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tiny_models import LANGUAGES, feature_dataset, make_model, multilingual_features

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.objectives.registry import build_objective
from hf_atr.training.objective_setup import objective_training_setup


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
    """``(objective, train_dataset, data_collator, callbacks)`` for objective ``name``, from the library's
    :func:`~hf_atr.training.objective_setup.objective_training_setup` (kcl, cacl and random_language train on
    clips with translations in :data:`LANGUAGES`).

    ``knowledge_base`` (ASK): ``"callback"`` builds it with the model being trained, as a user does;
    ``"fixed"`` sets one from seeded random embeddings (no encoding: works for any model dtype).
    """
    objective = build_objective({"name": name, **({"num_prototypes": 4} if name == "ask" else {})})
    multilingual = name in ("kcl", "cacl", "random_language")
    clips = multilingual_features(num_clips) if multilingual else feature_dataset(num_clips)
    setup = objective_training_setup(
        objective, clips, processor, languages=LANGUAGES if multilingual else None
    )
    callbacks = setup.callbacks
    if name == "ask" and knowledge_base == "fixed":
        generator = torch.Generator().manual_seed(0)
        audio, text = torch.randn(2, 2 * num_clips, 16, generator=generator)
        ids = [f"clip{index % num_clips}" for index in range(2 * num_clips)]
        objective.knowledge_base = KnowledgeBase.from_embeddings(audio, text, audio_ids=ids, num_prototypes=4)
        callbacks = []
    return objective, setup.train_dataset, setup.data_collator, callbacks


def exact_model(processor, name: str, seed: int = 0):
    """The tiny AST + BERT model for objective ``name`` in float64 with dropout off."""
    model = make_model(processor=processor, objective={"name": name}, seed=seed)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.double()
