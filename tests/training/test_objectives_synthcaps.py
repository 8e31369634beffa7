"""Each pair objective trains the demo's tiny model on real synthcaps audio for 40 steps: loss falls, R@1 beats chance.

The one "trains past chance" test of the objectives (the multilingual ones: ``test_multilingual.py``).
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainingArguments

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.data.schema import all_captions
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.objectives.ask import AskObjective
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback

NUM_TEST = 24


@pytest.fixture(scope="module")
def synthcaps_features():
    corpus = load_synthcaps(num_train=96, num_validation=8, num_test=NUM_TEST)
    tokenizer = train_caption_tokenizer(all_captions(corpus["train"]), vocab_size=1000)
    processor = AtrProcessor(tiny_feature_extractor(), tokenizer)
    return processor, processor.extract_audio_features(corpus)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "scoring"),
    [
        ({"name": "contrastive"}, "cosine"),
        ({"name": "triplet"}, "cosine"),
        ({"name": "iot"}, "euclidean"),
        ({"name": "iot"}, "mahalanobis"),
        ({"name": "iot_partial"}, "euclidean"),
        ({"name": "dart"}, "euclidean"),
        ({"name": "dart", "base": "contrastive"}, "cosine"),
        ({"name": "ask"}, "cosine"),
    ],
    ids=lambda value: str(value),
)
def test_objective_trains_past_chance_on_synthcaps(tmp_path, synthcaps_features, objective, scoring):
    processor, features = synthcaps_features
    name = objective["name"]
    torch.manual_seed(0)
    config = tiny_model_config(
        processor.feature_extractor, len(processor.tokenizer), objective=objective, scoring=scoring
    )
    model = AtrDualEncoderModel(config)
    callbacks, ask_objective = [], None
    if name == "ask":
        ask_objective = AskObjective(num_prototypes=16)
        callbacks = [
            KnowledgeBaseRefreshCallback(ask_objective, processor, features["train"], show_progress=False)
        ]
    trainer = AtrTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=16,
            learning_rate=2e-3,
            warmup_steps=5,
            max_steps=40,
            logging_steps=10,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=features["train"],
        eval_dataset=features["test"],
        processing_class=processor,
        objective=ask_objective,
        callbacks=callbacks,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    assert trainer.evaluate()["eval_t2a_R@1"] > 2 / NUM_TEST
    if scoring == "mahalanobis":
        metric = model.scoring_head.metric_matrix.detach()
        assert torch.equal(metric, metric.T) and torch.linalg.eigvalsh(metric).min() >= -1e-6
