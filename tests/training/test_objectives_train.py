"""Every registered objective trains through AtrTrainer under mixed precision on CPU, with finite losses.

``TrainingArguments(bf16=True, use_cpu=True)`` runs the model's forward under bfloat16 autocast
(accelerate); the objective must still see float32 embeddings with autocast off (issue 11 §3).
``fp16=True`` is accepted on CPU, but accelerate applies no autocast there (the forward runs in float32) and no
gradient scaling: it is checked to train, which is all it does (gradient scaling with caching is tested in
``test_grad_cache.py`` with a CPU ``GradScaler``). Gradient-cached steps run under bf16 too. Training past chance is tested on real synthcaps audio in
``test_objectives_synthcaps.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, training_args
from training_setups import objective_setup

from hf_atr import AtrTrainer
from hf_atr.objectives.registry import available_objectives, default_scoring


def train_three_steps(tmp_path, name: str, embedding_chunk_size=None, **precision):
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(name, processor)
    model = make_model(processor=processor, objective={"name": name})
    seen = []
    objective.register_forward_pre_hook(
        lambda module, inputs: seen.append(
            (inputs[0].dtype, inputs[1].dtype, torch.is_autocast_enabled("cpu"))
        )
    )
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=3, logging_steps=1, **precision),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=collator,
        callbacks=callbacks,
        embedding_chunk_size=embedding_chunk_size,
    )
    trainer.train()
    return trainer, seen


@pytest.mark.parametrize("embedding_chunk_size", [None, 3], ids=["whole batch", "gradient cached"])
@pytest.mark.parametrize("name", available_objectives())
def test_every_objective_trains_under_bf16_on_cpu_in_float32(tmp_path, name, embedding_chunk_size):
    trainer, seen = train_three_steps(tmp_path, name, embedding_chunk_size, bf16=True)
    assert trainer.accelerator.mixed_precision == "bf16"
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert seen and all(record == (torch.float32, torch.float32, False) for record in seen)
    assert all(torch.isfinite(parameter).all() for parameter in trainer.model.parameters())


def test_fp16_on_cpu_trains_without_autocast(tmp_path):
    trainer, seen = train_three_steps(tmp_path, "iot", fp16=True)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert all(record == (torch.float32, torch.float32, False) for record in seen)


@pytest.mark.slow
def test_iot_training_at_small_epsilon_stays_finite(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot", "reg": 0.01})
    assert model.config.scoring == default_scoring({"name": "iot"}) == "euclidean"
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=15, logging_steps=5),
        train_dataset=feature_dataset(64),
        processing_class=processor,
    )
    trainer.train()
    assert all(math.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())
