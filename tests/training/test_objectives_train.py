"""Every registered pair objective trains a tiny dual encoder past chance through AtrTrainer (issue 7 'Tests')."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrTrainer

OBJECTIVES = [
    ({"name": "contrastive"}, "cosine"),
    ({"name": "triplet", "margin": 0.2}, "cosine"),
    ({"name": "iot", "reg": 0.05}, "euclidean"),
    ({"name": "iot", "reg": 0.05}, "mahalanobis"),
    ({"name": "iot_partial", "reg": 0.05, "mass": 0.95}, "euclidean"),
    ({"name": "dart"}, "euclidean"),
    ({"name": "dart", "base": "contrastive"}, "cosine"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "scoring"), OBJECTIVES, ids=lambda value: str(value))
def test_objective_lowers_its_loss_and_beats_chance(tmp_path, objective, scoring):
    processor = make_processor()
    model = make_model(processor=processor, scoring=scoring, objective=objective)
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=40, learning_rate=3e-3, logging_steps=5),
        train_dataset=feature_dataset(64),
        eval_dataset=feature_dataset(16, seed=1),
        processing_class=processor,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    assert trainer.evaluate()["eval_t2a_R@5"] > 2 * 5 / 16
    if scoring == "mahalanobis":
        metric = model.scoring_head.metric_matrix.detach()
        torch.testing.assert_close(metric, metric.T)
        assert torch.linalg.eigvalsh(metric).min() >= -1e-5


@pytest.mark.slow
def test_iot_training_at_small_epsilon_stays_finite(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean", objective={"name": "iot", "reg": 0.01})
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=15, logging_steps=5),
        train_dataset=feature_dataset(64),
        processing_class=processor,
    )
    trainer.train()
    assert all(math.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())
