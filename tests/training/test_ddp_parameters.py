"""DDP without waste: every trainable parameter gets a gradient, so DDP runs with find_unused_parameters=False."""

from __future__ import annotations

import pytest
import torch
from tiny_models import (
    make_model,
    make_processor,
    random_waveforms,
    save_tiny_clap_checkpoint,
    training_args,
)
from training_setups import objective_setup
from transformers import TrainerCallback

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.objectives.registry import LOGIT_SCALE_NAMES, available_objectives, build_objective


def _parameters_without_gradient(model) -> list[str]:
    return [
        name
        for name, parameter in model.named_parameters()
        if parameter.requires_grad and parameter.grad is None
    ]


@pytest.mark.parametrize(
    ("audio_family", "text_family"),
    [("ast", "bert"), ("whisper", "xlmr"), ("panns", "bert"), ("clap", "clap")],
)
def test_every_trainable_parameter_of_each_tower_family_gets_a_gradient(tmp_path, audio_family, text_family):
    if audio_family == "clap":
        save_tiny_clap_checkpoint(tmp_path)
        model, processor = AtrDualEncoderModel.from_clap(tmp_path), AtrProcessor.from_clap(tmp_path)
        assert model.config.text_pooling == "pooler" and not model.unread_modules()
    else:
        processor = make_processor(audio_family)
        model = make_model(audio_family, text_family, processor=processor)
        assert model.unread_modules()  # BERT's / XLM-R's pooler; PANNs' fc1 too
    model.train()
    inputs = processor(
        audio=random_waveforms(3, seconds=1.5), text=["a dog barks", "a siren", "beep"], return_tensors="pt"
    )
    outputs = model(**inputs)
    objective = build_objective({"name": "contrastive"})  # reads both logit scales
    objective(outputs.audio_embeds, outputs.text_embeds, model=model).loss.backward()
    assert _parameters_without_gradient(model) == []


def test_unread_modules_follow_the_pooling_and_stay_frozen_after_loading(tmp_path):
    pooled = make_model(text_pooling="pooler")
    assert pooled.unread_modules() == [] and pooled.text_model.pooler.dense.weight.requires_grad
    model = make_model()
    assert model.unread_modules() == [model.text_model.pooler]
    assert not any(parameter.requires_grad for parameter in model.text_model.pooler.parameters())
    model.save_pretrained(tmp_path)
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path)
    assert not loaded.text_model.pooler.dense.weight.requires_grad  # built, loaded, frozen
    torch.testing.assert_close(loaded.text_model.pooler.dense.weight, model.text_model.pooler.dense.weight)
    panns = make_model("panns", processor=make_processor("panns"))
    assert panns.unread_modules() == [panns.audio_model.fc1, panns.text_model.pooler]
    assert make_model(
        "panns", audio_pooling="pooler", processor=make_processor("panns")
    ).audio_model.fc1.weight.requires_grad


class GradientCheck(TrainerCallback):
    """Records, before every optimizer step, the trainable parameters without a gradient."""

    def __init__(self) -> None:
        self.missing: list[list[str]] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.missing.append(_parameters_without_gradient(model))


@pytest.mark.parametrize("name", available_objectives())
def test_every_objective_leaves_no_trainable_parameter_without_gradient(tmp_path, name):
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(
        name, processor, num_clips=16, knowledge_base="fixed"
    )
    model = make_model(processor=processor, objective={"name": name}, separate_logit_scales=True)
    check = GradientCheck()
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=8),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=collator,
        callbacks=[*callbacks, check],
    )
    assert trainer.args.ddp_find_unused_parameters is False
    head = model.scoring_head
    assert {
        scale for scale in LOGIT_SCALE_NAMES if getattr(head, scale).requires_grad
    } == objective.logit_scales_read()
    trainer.train()
    assert check.missing == [[], []]


def test_fused_clap_keeps_searching_for_unused_parameters(tmp_path):
    """The fusion layers run only on batches with a clip longer than the window."""
    save_tiny_clap_checkpoint(tmp_path / "clap", fused=True)
    processor = AtrProcessor.from_clap(tmp_path / "clap")
    fused = AtrTrainer(
        model=AtrDualEncoderModel.from_clap(tmp_path / "clap"),
        args=training_args(tmp_path / "out"),
        processing_class=processor,
    )
    assert fused.args.ddp_find_unused_parameters is True
    explicit = AtrTrainer(
        model=make_model(),
        args=training_args(tmp_path, ddp_find_unused_parameters=True),
        processing_class=processor,
    )
    assert explicit.args.ddp_find_unused_parameters is True
