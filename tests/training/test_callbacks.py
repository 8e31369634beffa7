"""KnowledgeBaseRefreshCallback: builds the ASK base at train begin, refreshes it on schedule, all ranks agree;
ModelCardCallback: collects the training facts the card shows."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from PIL import Image
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr.knowledge.knowledge_base import KnowledgeBase
from hf_atr.metrics.ranks import TIE_RULE
from hf_atr.model_card import TRAINING_CURVES_FILE, write_model_card
from hf_atr.objectives.ask import AskObjective
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.plots.training import CALLBACK_TERMS, training_curves
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback, ModelCardCallback
from hf_atr.training.trainer import AtrTrainer

TESTS_DIR = Path(__file__).resolve().parents[1]


def train_with_refresh(tmp_path, dataset, *, args_overrides, **callback_kwargs):
    processor = make_processor()
    model = make_model(processor=processor)
    objective = AskObjective(temperature=0.1, num_neighbours=4, num_prototypes=4)
    callback = KnowledgeBaseRefreshCallback(
        objective, processor, dataset, show_progress=False, **callback_kwargs
    )
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, **args_overrides),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        callbacks=[callback],
    )
    bases = []
    original_replace = callback._replace

    def recording_replace(model, state, reason):
        original_replace(model, state, reason)
        bases.append(objective.knowledge_base)

    callback._replace = recording_replace
    trainer.train()
    return trainer, objective, callback, bases


def test_refresh_every_steps_rebuilds_and_logs_drift(tmp_path):
    dataset = feature_dataset(16)  # 32 caption pairs, 4 steps per epoch at batch 8
    trainer, objective, callback, bases = train_with_refresh(
        tmp_path,
        dataset,
        args_overrides={"max_steps": 6, "learning_rate": 1e-2},
        every_epochs=None,
        every_steps=2,
    )
    # Built at train begin, refreshed at steps 2 and 4; not after the last step (6).
    assert [record["step"] for record in callback.history] == [0, 2, 4]
    assert "kb_drift" not in callback.history[0]
    for record in callback.history[1:]:
        assert math.isfinite(record["kb_drift"]) and record["kb_drift"] > 0
    assert objective.knowledge_base is bases[-1]
    assert bases[0].num_pairs == 32 and bases[0].num_prototypes == 4
    assert not torch.equal(bases[0].tensors["fine_audio"], bases[-1].tensors["fine_audio"])
    logged_drifts = [entry["kb_drift"] for entry in trainer.state.log_history if "kb_drift" in entry]
    assert logged_drifts == [record["kb_drift"] for record in callback.history[1:]]
    ask_logs = [entry for entry in trainer.state.log_history if "ask/knowledge_base" in entry]
    assert ask_logs and all(entry["ask/knowledge_base"] == 1.0 for entry in ask_logs)
    assert all(math.isfinite(entry["ask/loss_t2a_fine"]) for entry in ask_logs)
    # The model card's training curves draw the drift the callback recorded.
    drift_panel = training_curves(trainer.state.log_history, "ask").terms[CALLBACK_TERMS["kb_drift"]]
    assert drift_panel["kb_drift"].values.tolist() == logged_drifts


def test_refresh_every_epoch(tmp_path):
    dataset = feature_dataset(16)
    _, _, callback, bases = train_with_refresh(
        tmp_path, dataset, args_overrides={"max_steps": -1, "num_train_epochs": 3}, every_epochs=2
    )
    # Epoch ends at steps 4, 8, 12: the period of 2 epochs refreshes at step 8; step 12 ends training.
    assert [record["step"] for record in callback.history] == [0, 8]
    assert len(bases) == 2 and bases[0] is not bases[1]


def test_no_refresh_keeps_the_initial_base(tmp_path):
    dataset = feature_dataset(16)
    _, objective, callback, bases = train_with_refresh(
        tmp_path, dataset, args_overrides={"max_steps": 6}, every_steps=2, refresh=False
    )
    assert [record["step"] for record in callback.history] == [0]
    assert objective.knowledge_base is bases[0]


def test_an_existing_base_is_kept_at_train_begin(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    objective = AskObjective(temperature=0.1, num_neighbours=2, num_prototypes=2)
    given = KnowledgeBase.from_embeddings(torch.randn(10, 16), torch.randn(10, 16), num_prototypes=2)
    objective.knowledge_base = given
    callback = KnowledgeBaseRefreshCallback(objective, processor, feature_dataset(8), refresh=False)
    AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=2),
        train_dataset=feature_dataset(8),
        processing_class=processor,
        objective=objective,
        callbacks=[callback],
    ).train()
    assert objective.knowledge_base is given and callback.history == []


def test_constructor_checks():
    processor = make_processor()
    dataset = feature_dataset(4)
    with pytest.raises(TypeError, match="the 'ask' objective"):
        KnowledgeBaseRefreshCallback(ContrastiveObjective(), processor, dataset)
    with pytest.raises(ValueError, match="`every_steps` must be a positive int or None"):
        KnowledgeBaseRefreshCallback(AskObjective(), processor, dataset, every_steps=0)
    with pytest.raises(ValueError, match="give `every_epochs` or `every_steps`"):
        KnowledgeBaseRefreshCallback(AskObjective(), processor, dataset, every_epochs=None)


DISTRIBUTED_WORKER = """
import sys
sys.path.insert(0, {tests_dir!r})
import torch.distributed as dist
from tiny_models import feature_dataset
from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.objectives.ask import AskObjective
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback, ModelCardCallback

dist.init_process_group("gloo")
model_dir = f"{{sys.argv[1]}}/model"
processor = AtrProcessor.from_pretrained(model_dir)
callback = KnowledgeBaseRefreshCallback(
    AskObjective(num_prototypes=4), processor, feature_dataset(11), show_progress=False
)
base = callback.build(AtrDualEncoderModel.from_pretrained(model_dir))
base.save(f"{{sys.argv[1]}}/rank{{dist.get_rank()}}.safetensors")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_every_rank_holds_the_base_of_the_whole_dataset(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    worker = tmp_path / "worker.py"
    # 11 clips: shards of 6 and 5 clips (12 and 10 pairs) exercise the padded all-gather.
    worker.write_text(textwrap.dedent(DISTRIBUTED_WORKER.format(tests_dir=str(TESTS_DIR))))
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(worker),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rank_bases = [KnowledgeBase.load(tmp_path / f"rank{rank}.safetensors") for rank in range(2)]
    for key, tensor in rank_bases[0].tensors.items():
        assert torch.equal(rank_bases[1].tensors[key], tensor), f"ranks disagree on {key}"
    single = KnowledgeBaseRefreshCallback(
        AskObjective(num_prototypes=4), processor, feature_dataset(11), show_progress=False
    ).build(model)
    for key, tensor in single.tensors.items():
        torch.testing.assert_close(rank_bases[0].tensors[key], tensor, rtol=1e-5, atol=1e-5, msg=key)


@pytest.mark.slow
def test_resume_continues_with_the_checkpointed_base_and_matches_an_uninterrupted_run(tmp_path):
    dataset = feature_dataset(16)

    def run(output_dir, resume=None):
        processor = make_processor()
        model = make_model(processor=processor, seed=0)
        objective = AskObjective(temperature=0.1, num_neighbours=4, num_prototypes=4)
        callback = KnowledgeBaseRefreshCallback(
            objective, processor, dataset, show_progress=False, every_epochs=None, every_steps=2
        )
        trainer = AtrTrainer(
            model=model,
            args=training_args(output_dir, max_steps=6, save_strategy="steps", save_steps=3),
            train_dataset=dataset,
            processing_class=processor,
            objective=objective,
            callbacks=[callback],
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer, objective

    full, full_objective = run(tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoint-3"
    saved = KnowledgeBase.load(checkpoint / "knowledge_base.safetensors")
    resumed, resumed_objective = run(tmp_path / "run", resume=str(checkpoint))
    assert set(saved.tensors) == set(full_objective.knowledge_base.tensors)
    for name, tensor in full_objective.knowledge_base.tensors.items():
        torch.testing.assert_close(resumed_objective.knowledge_base.tensors[name], tensor)
    for (name, expected), actual in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(
            actual, expected, msg=lambda m, name=name: f"{name} differs after resume: {m}"
        )


def test_callback_collects_training_facts_for_the_card(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=4, learning_rate=1e-3),
        train_dataset=feature_dataset(32),
        eval_dataset=feature_dataset(8),
        processing_class=processor,
        callbacks=[ModelCardCallback(training_data="synthcaps")],
    )
    trainer.train()
    trainer.evaluate()
    collected = model.model_card_data
    assert collected["training_provenance"] is None  # the training data recorded none
    assert collected["eval_protocol"]["clips"] == 8 and collected["eval_protocol"]["tie_rule"] == TIE_RULE
    assert collected["training_data"] == "synthcaps"
    assert collected["global_step"] == 4
    assert collected["hyperparameters"]["learning_rate"] == 1e-3
    assert collected["hyperparameters"]["per_device_train_batch_size"] == 8
    assert 0.0 <= collected["eval_metrics"]["t2a_R@1"] <= 1.0
    text = write_model_card(model, tmp_path / "card").read_text()
    assert "- steps: 4" in text and "- learning_rate: 0.001" in text and "On synthcaps (8 clips):" in text
    # The history the callback kept is the trainer's own, drawn beside the card.
    assert collected["log_history"] is trainer.state.log_history
    assert (
        "![Training curves: loss, objective terms and evaluation over optimizer steps](training_curves.png)"
        in text
    )
    assert "and R@k and mAP@10 (%, mean over languages) at each evaluation during training" in text
    assert Image.open(tmp_path / "card" / TRAINING_CURVES_FILE).format == "PNG"
