from __future__ import annotations

import json
import os
import stat
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrTrainer
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.objectives.registry import Objective, ObjectiveOutput
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.non_finite import NonFiniteLossError, finite_or_zero
from hf_atr.training.objective_checkpoints import OBJECTIVE_STATE_NAME
from hf_atr.training.trainer_setup import pins_memory
from hf_atr.training.waveform_collator import WaveformCollator


class CountingContrastive(ContrastiveObjective):
    """Contrastive objective with state: a buffer counting training batches (stands in for EMA statistics)."""

    def __init__(self) -> None:
        super().__init__(temperature=0.1)
        self.register_buffer("batches_seen", torch.zeros((), dtype=torch.long))

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        if audio_embeds.requires_grad:
            self.batches_seen += 1
        return super().forward(audio_embeds, text_embeds, batch=batch, model=model)


def test_training_lowers_the_loss_and_logs_objective_terms(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=24),
        train_dataset=feature_dataset(64),
        processing_class=processor,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]
    logged = [entry for entry in trainer.state.log_history if "contrastive/loss_t2a" in entry]
    assert logged and all(np.isfinite(entry["contrastive/loss_a2t"]) for entry in logged)


@pytest.mark.parametrize("objective", [{"name": "contrastive"}, {"name": "triplet"}], ids=lambda o: o["name"])
def test_mahalanobis_matrix_is_symmetric_psd_after_adam_steps_whatever_the_objective(tmp_path, objective):
    """The model keeps M PSD (m-LTM §3.2): a matrix that small Adam steps cannot repair comes out projected."""
    processor = make_processor()
    model = make_model(processor=processor, scoring="mahalanobis", objective=objective)
    dim = model.config.projection_dim
    skew = torch.triu(torch.full((dim, dim), 0.3), diagonal=1)
    with torch.no_grad():
        model.scoring_head.metric_matrix.copy_(
            torch.diag(torch.linspace(-0.5, 1.0, dim)) + skew - 0.5 * skew.T
        )
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=3, learning_rate=1e-3),
        train_dataset=feature_dataset(24),
        processing_class=processor,
    )
    trainer.train()
    metric = model.scoring_head.metric_matrix.detach()
    assert torch.equal(metric, metric.T)
    assert torch.linalg.eigvalsh(metric).min() >= -1e-6
    assert trainer.optimizer.state[model.scoring_head.metric_matrix]["step"] == 3  # Adam moved it


def test_evaluate_reports_retrieval_metrics(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path),
        processing_class=processor,
        eval_dataset=feature_dataset(16),
    )
    metrics = trainer.evaluate()
    for key in ("eval_t2a_R@1", "eval_a2t_R@10", "eval_t2a_mAP@10", "eval_a2t_recall_fraction@5"):
        assert 0.0 <= metrics[key] <= 1.0


@pytest.mark.slow
def test_resume_restores_parameters_and_objective_state(tmp_path):
    processor = make_processor()
    dataset = feature_dataset(48)

    def run(output_dir, resume=None):
        objective = CountingContrastive()
        trainer = AtrTrainer(
            model=make_model(processor=processor, seed=0),
            args=training_args(output_dir, max_steps=8, save_strategy="steps", save_steps=4),
            train_dataset=dataset,
            processing_class=processor,
            objective=objective,
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer, objective

    uninterrupted, uninterrupted_objective = run(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-4"
    assert (checkpoint / OBJECTIVE_STATE_NAME).is_file()
    resumed, resumed_objective = run(tmp_path / "resumed", resume=str(checkpoint))
    assert resumed_objective.batches_seen.item() == uninterrupted_objective.batches_seen.item() == 8
    for (name, expected), actual in zip(
        uninterrupted.model.state_dict().items(), resumed.model.state_dict().values()
    ):
        torch.testing.assert_close(
            actual, expected, msg=lambda m, name=name: f"parameter {name} differs after resume: {m}"
        )


def test_memory_is_pinned_for_an_accelerator_only(tmp_path, recwarn):
    processor = make_processor()
    args = training_args(tmp_path, use_cpu=False, max_steps=4, per_device_train_batch_size=4)
    assert args.dataloader_pin_memory  # transformers' default, also on a machine without an accelerator
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=args,
        train_dataset=feature_dataset(4),  # 2 epochs: torch's DataLoader warned at each
        processing_class=processor,
    )
    trainer.train()
    assert not [warning for warning in recwarn if "pin_memory" in str(warning.message)]
    assert trainer.args.dataloader_pin_memory is (trainer.args.device.type != "cpu")
    cuda = torch.device("cuda", 0)
    assert pins_memory(SimpleNamespace(dataloader_pin_memory=True, device=cuda))
    assert not pins_memory(SimpleNamespace(dataloader_pin_memory=False, device=cuda))
    assert not pins_memory(SimpleNamespace(dataloader_pin_memory=True, device=torch.device("cpu")))


def test_checkpoint_files_get_the_permissions_the_umask_allows(tmp_path):
    processor = make_processor()
    previous = os.umask(0o022)
    try:
        AtrTrainer(
            model=make_model(processor=processor, seed=0),
            args=training_args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2),
            train_dataset=feature_dataset(16),
            processing_class=processor,
            objective=CountingContrastive(),
        ).train()
    finally:
        os.umask(previous)
    checkpoint = tmp_path / "checkpoint-2"
    for name in (OBJECTIVE_STATE_NAME, "model.safetensors"):
        assert stat.S_IMODE((checkpoint / name).stat().st_mode) == 0o644, name


def test_resuming_a_stateful_objective_without_its_state_fails(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=2),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        objective=CountingContrastive(),
    )
    trainer.train()
    (tmp_path / "checkpoint-2" / OBJECTIVE_STATE_NAME).unlink()
    with pytest.raises(FileNotFoundError, match="has no objective.safetensors"):
        trainer._load_from_checkpoint(str(tmp_path / "checkpoint-2"))


class PairwiseSquaredError(Objective):
    """Loss that decomposes over rows, so gradient accumulation must reproduce the large-batch update exactly."""

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        return ObjectiveOutput(loss=((audio_embeds - text_embeds) ** 2).sum(-1).mean())


def test_gradient_accumulation_matches_one_large_batch(tmp_path):
    processor = make_processor()
    dataset = feature_dataset(16)
    results = []
    for batch_size, accumulation in ((8, 1), (4, 2)):
        model = make_model(processor=processor, seed=0)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        trainer = AtrTrainer(
            model=model,
            args=training_args(
                tmp_path / f"{batch_size}",
                per_device_train_batch_size=batch_size,
                gradient_accumulation_steps=accumulation,
                max_steps=2,
                optim="sgd",
                lr_scheduler_type="constant",
                learning_rate=0.5,
            ),
            train_dataset=dataset,
            processing_class=processor,
            objective=PairwiseSquaredError(),
        )
        trainer.train()
        results.append({name: tensor.clone() for name, tensor in trainer.model.state_dict().items()})
    for name, tensor in results[0].items():
        torch.testing.assert_close(results[1][name], tensor, atol=1e-5, rtol=1e-4, msg=f"{name} differs")


class ExplodingObjective(Objective):
    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        return ObjectiveOutput(loss=(audio_embeds.sum() * float("nan")), logs={"term": float("nan")})


def test_non_finite_loss_names_the_step_and_objective(tmp_path):
    processor = make_processor()
    objective = ExplodingObjective()
    objective.name = "exploding"
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        objective=objective,
    )
    with pytest.raises(
        NonFiniteLossError, match=r"Non-finite loss at step 0 \(objective 'exploding'; its terms"
    ):
        trainer.train()


def test_non_finite_embeddings_are_named(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    with torch.no_grad():
        model.audio_projection.weight.fill_(float("nan"))
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path),
        train_dataset=feature_dataset(16),
        processing_class=processor,
    )
    with pytest.raises(
        NonFiniteLossError, match=r"Non-finite audio_embeds at step 0 \(objective 'contrastive'\)"
    ):
        trainer.train()


@pytest.mark.parametrize("embedding_chunk_size", [None, 4], ids=["whole", "cached"])
def test_non_finite_steps_can_be_skipped_and_are_counted(tmp_path, embedding_chunk_size):
    processor = make_processor()
    model = make_model(processor=processor)
    objective = ExplodingObjective()
    objective.name = "exploding"
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=4, logging_steps=2, optim="sgd", weight_decay=0.0),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        objective=objective,
        skip_non_finite=True,
        embedding_chunk_size=embedding_chunk_size,
    )
    trainer.train()
    assert trainer.skipped_non_finite_steps == 4
    assert [entry["skipped_non_finite_steps"] for entry in trainer.state.log_history if "loss" in entry] == [
        2,
        4,
    ]
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, before[name], msg=f"{name} changed in a skipped step")


def test_a_non_finite_step_raises_before_the_next_checkpoint_is_written(tmp_path):
    """The check is read at the first logging step or checkpoint after the step, not inside it: with a checkpoint
    every step, the error comes before checkpoint-1 exists."""
    processor = make_processor()
    objective = ExplodingObjective()
    objective.name = "exploding"
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=4, logging_steps=3, save_strategy="steps", save_steps=1),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        objective=objective,
    )
    with pytest.raises(
        NonFiniteLossError, match=r"Non-finite loss at step 0 .* read at step 1, no checkpoint"
    ):
        trainer.train()
    assert not list(tmp_path.glob("checkpoint-*"))


def test_non_finite_embeddings_never_reach_an_ot_solver_and_the_step_is_skipped(tmp_path):
    """The OT solvers raise on a non-finite cost (a host check): the trainer hands the objective finite
    embeddings (NaN entries zeroed) and decides the skip on the device."""
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot"})
    with torch.no_grad():
        model.audio_projection.weight.fill_(float("nan"))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=3, logging_steps=2, optim="sgd", weight_decay=0.0),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        skip_non_finite=True,
    )
    trainer.train()
    assert trainer.skipped_non_finite_steps == 3
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(
            tensor, before[name], equal_nan=True, msg=f"{name} changed in a skipped step"
        )


def test_finite_or_zero_passes_finite_tensors_through_and_zeroes_the_rest():
    finite = torch.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
    same, all_finite = finite_or_zero(finite)
    assert torch.equal(same, finite) and all_finite.dim() == 0 and bool(all_finite)
    same.sum().backward()
    assert torch.equal(finite.grad, torch.ones(2, 2))
    broken = torch.tensor([[1.0, float("nan")], [float("inf"), 4.0]])
    cleaned, all_finite = finite_or_zero(broken)
    assert cleaned.tolist() == [[1.0, 0.0], [0.0, 4.0]] and not bool(all_finite)


def test_unchecked_steps_are_read_once_their_limit_is_reached(tmp_path, monkeypatch):
    """A run that never logs (or saves) still raises, after ``UNCHECKED_STEPS_LIMIT`` steps at the latest."""
    monkeypatch.setattr("hf_atr.training.non_finite.UNCHECKED_STEPS_LIMIT", 2)
    processor = make_processor()
    objective = ExplodingObjective()
    objective.name = "exploding"
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=6, logging_strategy="no"),
        train_dataset=feature_dataset(16),
        processing_class=processor,
        objective=objective,
    )
    with pytest.raises(
        NonFiniteLossError, match=r"Non-finite loss at step 0 .* read at step 1, no checkpoint"
    ):
        trainer.train()


def test_trainer_requires_a_processor(tmp_path):
    with pytest.raises(ValueError, match="needs `processing_class=AtrProcessor"):
        AtrTrainer(model=make_model(), args=training_args(tmp_path))


def test_trainer_state_is_json_logged(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=4),
        train_dataset=feature_dataset(16),
        processing_class=processor,
    )
    trainer.train()
    state = json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text())
    assert any("contrastive/loss_t2a" in entry for entry in state["log_history"])


def test_a_few_dozen_steps_beat_chance_on_retrieval(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=40, learning_rate=3e-3),
        train_dataset=feature_dataset(64),
        eval_dataset=feature_dataset(16, seed=1),
        processing_class=processor,
    )
    before = trainer.evaluate()["eval_t2a_R@5"]
    trainer.train()
    after = trainer.evaluate()["eval_t2a_R@5"]
    chance = 5 / 16
    assert after > max(before, 2 * chance)


def test_saved_model_gets_a_card_with_the_training_run(tmp_path):
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=4),
        train_dataset=feature_dataset(16),
        processing_class=processor,
    )
    trainer.train()
    trainer.save_model(tmp_path / "final")
    card = (tmp_path / "final" / "README.md").read_text()
    assert "- steps: 4" in card and "contrastive" in card


class LearnableMarginObjective(Objective):
    def __init__(self) -> None:
        super().__init__()
        self.margin = torch.nn.Parameter(torch.tensor(0.1))

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        return ObjectiveOutput(loss=self.margin * (audio_embeds - text_embeds).pow(2).sum())


def test_objective_parameters_outside_the_optimizer_are_refused(tmp_path):
    processor = make_processor()
    with pytest.raises(
        ValueError, match=r"has trainable parameters \['margin'\], which the Trainer's optimizer"
    ):
        AtrTrainer(
            model=make_model(processor=processor),
            args=training_args(tmp_path),
            processing_class=processor,
            objective=LearnableMarginObjective(),
        )


def test_audio_feature_options_are_checked(tmp_path):
    processor = make_processor()
    with pytest.raises(ValueError, match="audio_features must be one of \\('device', 'collator'\\) or None"):
        AtrTrainer(
            model=make_model(), args=training_args(tmp_path), processing_class=processor, audio_features="gpu"
        )
    with pytest.raises(
        ValueError, match="audio_features='device' needs a collator that prepares waveforms.*AtrDataCollator"
    ):
        AtrTrainer(
            model=make_model(),
            args=training_args(tmp_path),
            processing_class=processor,
            audio_features="device",
            data_collator=AtrDataCollator(processor),
        )
    default = AtrTrainer(
        model=make_model(), args=training_args(tmp_path), processing_class=processor, audio_features="device"
    )
    assert (
        isinstance(default.data_collator, WaveformCollator)
        and default.data_collator.seed == default.args.seed
    )
    assert default.device_features is default.data_collator.features
    with pytest.raises(ValueError, match="dataloader_persistent_workers=True keeps each worker's first copy"):
        AtrTrainer(
            model=make_model(),
            args=training_args(tmp_path, dataloader_num_workers=2, dataloader_persistent_workers=True),
            train_dataset=feature_dataset(4),
            processing_class=processor,
            audio_features="device",
        )


def test_int16_waveform_batches_are_left_to_accelerators_unless_asked_for(tmp_path):
    """On the CPU the trainer has the workers scale 16-bit PCM (int16 saves no copy there); asked for, int16
    batches train, scaled on the device."""
    from tiny_models import raw_audio_dataset

    processor = make_processor()
    automatic = WaveformCollator(processor)
    AtrTrainer(
        model=make_model(), args=training_args(tmp_path), processing_class=processor, data_collator=automatic
    )
    assert automatic.int16_batches is False
    asked = WaveformCollator(processor, int16_batches=True)
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=4),
        train_dataset=raw_audio_dataset([0.5, 0.8, 1.2, 0.6]),
        processing_class=processor,
        data_collator=asked,
    )
    dtypes = []
    training_step = trainer.training_step

    def recording_step(model, inputs, *args, **kwargs):
        dtypes.append(inputs["waveforms"].dtype)
        return training_step(model, inputs, *args, **kwargs)

    trainer.training_step = recording_step
    assert asked.int16_batches is True and trainer.device_features is asked.features
    assert trainer.train().training_loss > 0 and dtypes == [torch.int16] * 2


def test_a_dataset_saved_with_nested_list_features_trains_as_one_stored_as_arrays(tmp_path):
    """Datasets whose features an older hf-atr saved as nested lists: they load, batch to the same numbers as
    the same features stored as ``Array2D`` (read in one gather), and train to the same losses."""
    from datasets import Array2D, List, Value, load_from_disk

    nested = feature_dataset(16)  # Dataset.from_dict infers nested lists, as Dataset.map did
    assert nested.features["input_values"] == List(List(Value("float32")))
    nested.save_to_disk(str(tmp_path / "nested"))
    nested.cast_column("input_values", Array2D((100, 32), "float32")).save_to_disk(str(tmp_path / "arrays"))
    processor = make_processor()
    batches, losses = {}, {}
    for storage in ("nested", "arrays"):
        clips = load_from_disk(str(tmp_path / storage))
        args = training_args(tmp_path / f"run-{storage}", max_steps=4, logging_steps=1)
        trainer = AtrTrainer(
            model=make_model(processor=processor), args=args, train_dataset=clips, processing_class=processor
        )
        batches[storage] = next(iter(trainer.get_train_dataloader()))
        trainer.train()
        losses[storage] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert batches["arrays"].keys() == batches["nested"].keys()
    for name, value in batches["nested"].items():
        if torch.is_tensor(value):
            assert value.dtype == batches["arrays"][name].dtype and torch.equal(
                value, batches["arrays"][name]
            ), name
        else:
            assert value == batches["arrays"][name], name
    assert len(losses["nested"]) == 4
    torch.testing.assert_close(losses["arrays"], losses["nested"])


def test_the_names_that_left_the_trainer_module_warn_at_their_old_path():
    import hf_atr.training.trainer as trainer_module
    from hf_atr.training.device_inputs import AUDIO_FEATURE_SOURCES

    with pytest.deprecated_call(match="moved to `hf_atr.training.non_finite.NonFiniteLossError`"):
        assert trainer_module.NonFiniteLossError is NonFiniteLossError
    with pytest.deprecated_call(match="hf_atr.training.objective_checkpoints.OBJECTIVE_STATE_NAME"):
        assert trainer_module.OBJECTIVE_STATE_NAME == OBJECTIVE_STATE_NAME
    with pytest.deprecated_call(match="hf_atr.training.device_inputs.AUDIO_FEATURE_SOURCES"):
        assert trainer_module.AUDIO_FEATURE_SOURCES is AUDIO_FEATURE_SOURCES
    with pytest.raises(AttributeError):
        trainer_module.nothing_here  # noqa: B018
