"""freeze_audio / freeze_text: a frozen tower costs no optimizer state and does not change in training."""

from __future__ import annotations

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrDualEncoderModel, AtrTrainer


def _parameter_ids(module: torch.nn.Module) -> set[int]:
    return {id(parameter) for parameter in module.parameters()}


@pytest.mark.parametrize(
    ("frozen", "trained"), [("text_model", "audio_model"), ("audio_model", "text_model")]
)
def test_frozen_tower_has_no_optimizer_state_and_stays_identical(tmp_path, frozen, trained):
    processor = make_processor()
    model = make_model(processor=processor, **{f"freeze_{frozen.split('_')[0]}": True})
    frozen_before = {key: tensor.clone() for key, tensor in getattr(model, frozen).state_dict().items()}
    trained_before = {key: tensor.clone() for key, tensor in getattr(model, trained).state_dict().items()}
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=3),
        train_dataset=feature_dataset(24),
        processing_class=processor,
    )
    trainer.train()
    optimized = {id(parameter) for group in trainer.optimizer.param_groups for parameter in group["params"]}
    with_state = {id(parameter) for parameter in trainer.optimizer.state}
    assert not optimized & _parameter_ids(getattr(model, frozen))
    assert not with_state & _parameter_ids(getattr(model, frozen))
    unread = {id(parameter) for module in model.unread_modules() for parameter in module.parameters()}
    assert unread and not optimized & unread  # BERT's pooler: the model pools by mean
    assert _parameter_ids(getattr(model, trained)) - unread <= optimized
    for key, tensor in getattr(model, frozen).state_dict().items():  # weights and buffers
        assert torch.equal(tensor, frozen_before[key]), key
    assert any(
        not torch.equal(tensor, trained_before[key])
        for key, tensor in getattr(model, trained).state_dict().items()
    )


def test_frozen_tower_stays_in_eval_mode_and_builds_no_graph(processor):
    model = make_model(processor=processor, freeze_audio=True).train()
    assert not model.audio_model.training and model.text_model.training
    inputs = processor(audio=[torch.zeros(16000).numpy()], text=["a dog"], return_tensors="pt")
    output = model(**inputs)
    assert output.audio_model_output.last_hidden_state.grad_fn is None
    assert output.audio_embeds.requires_grad  # the projection still trains
    assert output.text_model_output.last_hidden_state.grad_fn is not None


def test_freezing_survives_save_and_load(tmp_path, processor):
    make_model(processor=processor, freeze_text=True).save_pretrained(tmp_path)
    loaded = AtrDualEncoderModel.from_pretrained(tmp_path)
    assert loaded.config.freeze_text and not loaded.config.freeze_audio
    assert not any(parameter.requires_grad for parameter in loaded.text_model.parameters())
    assert all(parameter.requires_grad for parameter in loaded.audio_model.parameters())
    assert not loaded.train().text_model.training


def test_from_audio_text_pretrained_takes_the_freeze_options(tmp_path, processor):
    source = make_model(processor=processor)
    source.audio_model.save_pretrained(tmp_path / "audio")
    source.text_model.save_pretrained(tmp_path / "text")
    model = AtrDualEncoderModel.from_audio_text_pretrained(
        str(tmp_path / "audio"), str(tmp_path / "text"), freeze_audio=True
    )
    assert model.config.freeze_audio
    assert not any(parameter.requires_grad for parameter in model.audio_model.parameters())
