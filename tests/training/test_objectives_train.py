"""Every registered objective trains through AtrTrainer under mixed precision on CPU, with finite losses.

``TrainingArguments(bf16=True, use_cpu=True)`` runs the model's forward under bfloat16 autocast
(accelerate); the objective must still see float32 embeddings with autocast off.
``fp16=True`` is accepted on CPU, but accelerate applies neither autocast nor gradient scaling there (it enables
both only on accelerators): the forward runs in float32, which is checked. Its CUDA path (float16 autocast of the
forward, ``GradScaler`` loss scaling and unscaling before clipping and the step) is run here with torch's CPU
equivalents of the same classes: ``accelerator.native_amp`` on, so accelerate wraps the forward in
``torch.autocast("cpu", dtype=torch.float16)``, and a ``torch.amp.GradScaler("cpu")`` as its scaler. Gradient-cached
steps run under both. Training past chance is tested on real synthcaps audio in ``test_objectives_synthcaps.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, training_args
from training_setups import objective_setup

from hf_atr import AtrTrainer
from hf_atr.objectives.registry import available_objectives, default_scoring

FLOAT16_INIT_SCALE = 2.0**10
FLOAT16_INIT_SCALES = {"sigmoid": 2.0**9}
"""Loss scales under which the first steps' scaled gradients stay finite on the tiny towers. At SigLIP's initial
bias (b = -10) only positive pairs have a gradient, all of it attraction with no softmax to subtract the batch mean;
the tiny BERT's captions are near parallel (mean cosine 0.98), so every clip is pulled the same way and the audio
tower's bias gradients add up over the batch (measured on 8 of these clips: layer 0's ``o_proj.bias`` gets 65.7
in float32, contrastive 10.1), which at 2**10 exceeds float16's 65504 in the float16 reduction and makes
GradScaler skip the step, as designed."""


def train_three_steps(
    tmp_path, name: str, embedding_chunk_size=None, cpu_float16_amp: bool = False, **precision
):
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(name, processor)
    model = make_model(processor=processor, objective={"name": name})
    seen = []
    objective.register_forward_pre_hook(
        lambda module, inputs: seen.append(
            (inputs[0].dtype, inputs[1].dtype, torch.is_autocast_enabled("cpu"))
        )
    )
    model.audio_projection.register_forward_hook(  # in training steps (not ASK's knowledge-base encoding)
        lambda module, inputs, output: seen.append(("forward", output.dtype)) if module.training else None
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
    if cpu_float16_amp:
        trainer.accelerator.native_amp = (
            True  # what accelerate sets for fp16 on CUDA, read when the model is prepared
        )
        trainer.accelerator.scaler = torch.amp.GradScaler(
            "cpu", init_scale=FLOAT16_INIT_SCALES.get(name, FLOAT16_INIT_SCALE)
        )
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    trainer.train()
    return trainer, seen, initial


def assert_trained(trainer, initial: dict) -> None:
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    parameters = trainer.model.state_dict()
    assert all(torch.isfinite(value).all() for value in parameters.values() if value.is_floating_point())
    for module in ("audio_projection.weight", "text_projection.weight"):
        assert not torch.equal(parameters[module], initial[module]), f"{module} did not change"


def objective_inputs(seen: list) -> set:
    return {record for record in seen if record[0] != "forward"}


def forward_dtypes(seen: list) -> set:
    return {record[1] for record in seen if record[0] == "forward"}


CHUNKING = pytest.mark.parametrize("embedding_chunk_size", [None, 3], ids=["whole batch", "gradient cached"])


@CHUNKING
@pytest.mark.parametrize("name", available_objectives())
def test_every_objective_trains_under_bf16_on_cpu_in_float32(tmp_path, name, embedding_chunk_size):
    trainer, seen, initial = train_three_steps(tmp_path, name, embedding_chunk_size, bf16=True)
    assert trainer.accelerator.mixed_precision == "bf16"
    assert forward_dtypes(seen) == {torch.bfloat16}
    assert objective_inputs(seen) == {(torch.float32, torch.float32, False)}
    assert_trained(trainer, initial)


@CHUNKING
@pytest.mark.parametrize("name", available_objectives())
def test_every_objective_trains_under_float16_autocast_with_gradient_scaling(
    tmp_path, name, embedding_chunk_size
):
    """accelerate's fp16 path (autocast + GradScaler) with the CPU's float16 autocast and CPU GradScaler."""
    trainer, seen, initial = train_three_steps(
        tmp_path, name, embedding_chunk_size, cpu_float16_amp=True, fp16=True
    )
    scaler = trainer.accelerator.scaler
    assert trainer.accelerator.mixed_precision == "fp16"
    assert forward_dtypes(seen) == {torch.float16}
    assert objective_inputs(seen) == {(torch.float32, torch.float32, False)}
    # Finite scaled gradients: no step skipped, the scale kept, and the steps applied unscaled gradients.
    assert (
        scaler.get_scale() == FLOAT16_INIT_SCALES.get(name, FLOAT16_INIT_SCALE) and scaler._scale is not None
    )
    assert_trained(trainer, initial)


def test_fp16_on_cpu_as_accelerate_sets_it_up_trains_in_float32(tmp_path):
    trainer, seen, initial = train_three_steps(tmp_path, "iot", fp16=True)
    assert trainer.accelerator.scaler is None and not trainer.accelerator.native_amp
    assert forward_dtypes(seen) == {torch.float32}
    assert objective_inputs(seen) == {(torch.float32, torch.float32, False)}
    assert_trained(trainer, initial)


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
