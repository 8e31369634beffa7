"""AtrTrainer under ``TrainingArguments(torch_compile=True)``: every objective, whole and gradient-cached, device
features, resume, save and reload.

The matrix runs on dynamo's ``aot_eager`` backend, which traces the model (forward and backward graphs, as
inductor gets them) but runs the traced aten operations eagerly: with dropout off, the losses and gradient norms
of three steps equal eager training's bit for bit, so any difference is a tracing error (a guard, a lost side
effect, a wrong graph), not rounding. Inductor, which generates C++ on a CPU, is smoke-tested within 1e-4 where a
C++ compiler is found. Every compiled graph is kept (a raised recompile limit, and an error instead of a silent
fall-back to eager when a limit is hit), so that the runs compare compiled code, not eager code twice.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open
from tiny_models import feature_dataset, make_model, make_processor, raw_audio_dataset, training_args
from torch._inductor import config as inductor_config
from training_setups import objective_setup

from hf_atr import AtrConfig, AtrDualEncoderModel, AtrTrainer
from hf_atr.objectives.registry import available_objectives, build_objective
from hf_atr.training.collator import AtrDataCollator, pad_to_length_bucket, text_length_buckets
from hf_atr.training.waveform_collator import WaveformCollator

BUILT_IN = [name for name in available_objectives() if not name.startswith("test_")]


@pytest.fixture(autouse=True)
def keep_every_graph():
    with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
        yield


def without_dropout(model: AtrDualEncoderModel) -> AtrDualEncoderModel:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def with_caption_buckets(collator, processor):
    """``collator`` padding captions as it does under compilation, so that eager runs see the same shapes (a matrix
    product of another shape rounds differently); ``None`` is the trainer's default collator."""
    collator = collator if collator is not None else AtrDataCollator(processor)
    collator.text_length_buckets = text_length_buckets(processor.tokenizer.model_max_length)
    return collator


def train(tmp_path, name: str, backend: str | None, embedding_chunk_size=None, **arguments):
    """Three steps of objective ``name`` (dropout off), eager (``backend=None``) or compiled; returns the trainer
    and ``[(loss, grad_norm)]`` per step."""
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(name, processor, num_clips=16)
    collator = with_caption_buckets(collator, processor)
    arguments = {"max_steps": 3, "logging_steps": 1, **arguments}
    if backend is not None:
        arguments["torch_compile_backend"] = backend
    trainer = AtrTrainer(
        model=without_dropout(make_model(processor=processor, objective={"name": name})),
        args=training_args(tmp_path, **arguments),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=collator,
        callbacks=callbacks,
        embedding_chunk_size=embedding_chunk_size,
    )
    trainer.train()
    return trainer, steps_of(trainer)


def steps_of(trainer: AtrTrainer) -> list[tuple[float, float]]:
    return [(entry["loss"], entry["grad_norm"]) for entry in trainer.state.log_history if "loss" in entry]


def one_objective_per_compiled_graph() -> list[str]:
    """The first built-in objective of each pair of (scoring head, training view): what the compiled model meets.

    The trainer calls the objective eagerly, outside the compiled forward, on the embeddings the forward returns;
    the compiled graphs hold the towers, the projections and the scoring head the objective configures
    (``AtrConfig.scoring``, a learned bias), and see the batches the objective's training view makes (pairs, several
    captions per clip, a knowledge base). Objectives that share both (contrastive and triplet; dart, iot and
    iot_partial) compile the same graphs, and each of them trains eagerly in ``test_objectives_train.py``."""
    first_of = {}
    for name in BUILT_IN:
        config = AtrConfig(objective={"name": name})
        graph = (config.scoring, config.logit_bias, build_objective({"name": name}).training_view)
        first_of.setdefault(graph, name)
    return sorted(first_of.values())


BATCH_LAYOUTS = ["contrastive", "cacl", "ask"]
"""One objective per kind of batch the compiled model meets under gradient caching: clip-caption pairs, several
captions per clip (multilingual), and pairs with a knowledge base encoded by the model being trained. Caching changes
only how the batch reaches the model, chunk by chunk; ``test_grad_cache.py`` checks cached against whole-batch
training for every objective."""

COMPILED_STEPS = [
    *(pytest.param(name, None, id=f"{name}-whole") for name in one_objective_per_compiled_graph()),
    *(pytest.param(name, 4, id=f"{name}-cached") for name in BATCH_LAYOUTS),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "embedding_chunk_size"), COMPILED_STEPS)
def test_compiled_training_equals_eager_bit_for_bit(tmp_path, name, embedding_chunk_size):
    eager, eager_steps = train(tmp_path / "eager", name, None, embedding_chunk_size)
    compiled, compiled_steps = train(tmp_path / "compiled", name, "aot_eager", embedding_chunk_size)
    assert type(compiled.model_wrapped).__name__ == "OptimizedModule"
    assert len(eager_steps) == 3 and compiled_steps == eager_steps


def test_compiled_training_with_device_features_equals_eager(tmp_path):
    def run(folder, backend):
        processor = make_processor()
        arguments = {"torch_compile_backend": backend} if backend else {}
        trainer = AtrTrainer(
            model=without_dropout(make_model(processor=processor)),
            args=training_args(
                tmp_path / folder, max_steps=3, logging_steps=1, per_device_train_batch_size=4, **arguments
            ),
            train_dataset=raw_audio_dataset([0.6, 1.4] * 6),
            processing_class=processor,
            data_collator=with_caption_buckets(WaveformCollator(processor, seed=0), processor),
            audio_features="device",
        )
        trainer.train()
        return steps_of(trainer)

    eager = run("eager", None)
    assert len(eager) == 3 and run("compiled", "aot_eager") == eager


@pytest.mark.slow
def test_compiled_training_resumes_from_a_checkpoint(tmp_path):
    full, _ = train(
        tmp_path / "full", "contrastive", "aot_eager", max_steps=4, save_strategy="steps", save_steps=2
    )
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup("contrastive", processor, num_clips=16)
    resumed = AtrTrainer(
        model=without_dropout(make_model(processor=processor, seed=1)),
        args=training_args(
            tmp_path / "resumed", max_steps=4, logging_steps=1, torch_compile_backend="aot_eager"
        ),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=with_caption_buckets(collator, processor),
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert steps_of(resumed)[-2:] == steps_of(full)[-2:]
    for (name, expected), actual in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(actual, expected), f"{name} differs after a compiled resume"


@pytest.mark.slow
def test_compiled_model_saves_its_own_weight_names_and_reloads(tmp_path):
    trainer, _ = train(tmp_path, "contrastive", "aot_eager", save_strategy="steps", save_steps=3)
    trainer.save_model(str(tmp_path / "final"))
    for weights in (
        tmp_path / "final" / "model.safetensors",
        tmp_path / "checkpoint-3" / "model.safetensors",
    ):
        with safe_open(str(weights), "pt") as file:
            names = list(file.keys())
        assert names and not any("_orig_mod" in name for name in names), weights
    reloaded = AtrDualEncoderModel.from_pretrained(str(tmp_path / "final"))
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_compiling_pads_captions_to_length_buckets(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, torch_compile_backend="aot_eager"),
        train_dataset=feature_dataset(8),
        processing_class=processor,
        data_collator=AtrDataCollator(processor, max_length=40),
    )
    assert trainer.data_collator.text_length_buckets == (16, 32, 40)
    batch = trainer.data_collator([trainer.train_dataset[index] for index in range(4)])
    assert batch["input_ids"].shape[1] == 16
    assert (batch["input_ids"][:, -1] == processor.tokenizer.pad_token_id).all()
    eager = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path),
        train_dataset=feature_dataset(8),
        processing_class=processor,
    )
    assert eager.data_collator.text_length_buckets is None


def test_length_buckets_and_padding():
    assert text_length_buckets(77) == (16, 32, 64, 77)
    assert text_length_buckets(16) == (16,)
    assert text_length_buckets(int(1e30)) == (16, 32, 64, 128, 256, 512)
    tokenizer = make_processor().tokenizer
    encoded = {
        "input_ids": np.array([[5, 6, 7], [5, 6, 0]]),
        "attention_mask": np.array([[1, 1, 1], [1, 1, 0]]),
    }
    padded = pad_to_length_bucket(encoded, (2, 4, 8), tokenizer)
    assert padded["input_ids"].shape == (2, 4) and padded["attention_mask"][:, 3].tolist() == [0, 0]
    assert padded["input_ids"][:, 3].tolist() == [tokenizer.pad_token_id] * 2
    assert pad_to_length_bucket(encoded, (2,), tokenizer)["input_ids"].shape == (
        2,
        3,
    )  # longer than every bucket


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="inductor needs C++")
def test_inductor_training_matches_eager_closely(tmp_path, monkeypatch):
    # A fresh kernel cache: inductor's on-disk cache does not key its C++ kernels by the vector level that
    # ATEN_CPU_CAPABILITY holds torch to, and a kernel built at another level aborted the process when reused.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    # Kernels compiled in this process: a pool of compile workers costs more to start than a tiny model's kernels
    # take to compile, and the suite's own workers already share the cores.
    monkeypatch.setattr(inductor_config, "compile_threads", 1)
    eager, eager_steps = train(tmp_path / "eager", "contrastive", None)
    compiled, compiled_steps = train(tmp_path / "compiled", "contrastive", "inductor")
    np.testing.assert_allclose(np.array(compiled_steps), np.array(eager_steps), rtol=1e-4)
