"""Gradient caching (GradCache): chunked encoders, whole-batch objective, the same update."""

from __future__ import annotations

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, tiny_panns_config, training_args
from training_setups import Float64Batches, exact_model, objective_setup

from hf_atr import AtrTrainer
from hf_atr.models.panns.modeling_panns import PannsModel
from hf_atr.objectives.registry import available_objectives, build_objective
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.grad_cache import cached_embedding_backward, frozen_batch_norm_statistics, split_batch


def test_split_batch_cuts_clip_rows_and_caption_rows():
    inputs = {
        "input_values": torch.arange(5).view(5, 1),
        "input_ids": torch.arange(10).view(10, 1),  # K = 2 captions per clip
        "attention_mask": torch.ones(10, 1),
        "feature_random_choices": {"is_longer": torch.arange(5)},
        "captions_per_audio": 2,
    }
    chunks = split_batch(inputs, 2, captions_per_audio=2)
    assert [chunk["input_values"].flatten().tolist() for chunk in chunks] == [[0, 1], [2, 3], [4]]
    assert [chunk["input_ids"].flatten().tolist() for chunk in chunks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert chunks[2]["feature_random_choices"]["is_longer"].tolist() == [4]
    assert all(chunk["captions_per_audio"] == 2 for chunk in chunks)


def test_split_batch_names_bad_values():
    with pytest.raises(ValueError, match="embedding_chunk_size must be a positive int, got 0"):
        split_batch({"input_ids": torch.zeros(2, 1)}, 0)
    with pytest.raises(ValueError, match="3 caption rows, not a multiple of captions_per_audio=2"):
        split_batch({"input_ids": torch.zeros(3, 1)}, 1, captions_per_audio=2)
    with pytest.raises(ValueError, match="no 'input_ids' to split"):
        split_batch({"input_values": torch.zeros(3, 1)}, 1)
    with pytest.raises(ValueError, match="embedding_chunk_size must be a positive int, got True"):
        AtrTrainer(
            model=make_model(),
            args=training_args("unused"),
            processing_class=make_processor(),
            embedding_chunk_size=True,
        )


class DropoutEncoder(torch.nn.Module):
    """Two towers with dropout: the second pass must draw the first pass's masks."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 4))
        self.text = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 4))

    def forward(self, chunk):
        return self.audio(chunk["audio"]), self.text(chunk["text"])


def contrastive_loss(audio, text):
    logits = (
        torch.nn.functional.normalize(text, dim=-1) @ torch.nn.functional.normalize(audio, dim=-1).T / 0.1
    )
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(audio)))


def test_cached_gradients_equal_one_backward_through_the_chunks_with_their_dropout_masks():
    torch.manual_seed(0)
    model = DropoutEncoder().double().train()
    batch = {"audio": torch.randn(7, 6, dtype=torch.float64), "text": torch.randn(7, 3, dtype=torch.float64)}
    chunks = split_batch({"input_ids": batch["text"], **batch}, 3)

    torch.manual_seed(1)
    parts = [model(chunk) for chunk in chunks]  # the same draws as the first pass, with a graph
    contrastive_loss(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])).backward()
    expected = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    after_reference = torch.rand(3)
    model.zero_grad()

    torch.manual_seed(1)

    def objective_backward(audio, text):
        loss = contrastive_loss(audio, text)
        loss.backward()
        return loss.detach()

    loss = cached_embedding_backward(
        model, chunks, objective_backward, model=model, devices=[torch.device("cpu")]
    )
    assert loss is not None
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, expected[name], rtol=1e-12, atol=1e-12, msg=name)
    # The random stream continues as after one pass over the chunks.
    torch.testing.assert_close(torch.rand(3), after_reference, rtol=0, atol=0)


def test_skipped_step_leaves_no_gradient():
    model = DropoutEncoder()
    chunks = split_batch(
        {"input_ids": torch.zeros(4, 3), "audio": torch.randn(4, 6), "text": torch.randn(4, 3)}, 2
    )
    assert cached_embedding_backward(model, chunks, lambda a, t: None, model=model, devices=[]) is None
    assert all(parameter.grad is None for parameter in model.parameters())


def test_first_pass_leaves_batch_norm_statistics_to_the_second():
    torch.manual_seed(0)
    config = tiny_panns_config(block_dropout_prob=0.0)
    panns = PannsModel(config).train()
    features = torch.randn(6, 100, 32)
    chunks = split_batch({"input_ids": torch.zeros(6, 1), "input_features": features}, 4)

    def embed(chunk):
        pooled = panns(chunk["input_features"]).last_hidden_state.mean(1)
        return pooled, pooled

    reference = PannsModel(config).train()
    reference.load_state_dict(panns.state_dict())
    for chunk in chunks:  # chunked training without caching: one statistics update per chunk
        reference(chunk["input_features"])

    def objective_backward(audio, text):
        loss = audio.square().sum()
        loss.backward()
        return loss.detach()

    with frozen_batch_norm_statistics(panns):
        panns(features)
    assert int(panns.bn0.num_batches_tracked) == 0  # the context undid the update
    cached_embedding_backward(embed, chunks, objective_backward, model=panns, devices=[])
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(dict(panns.named_buffers())[name], buffer, msg=name)
    assert int(panns.bn0.num_batches_tracked) == len(chunks)


def _train(name: str, embedding_chunk_size, tmp_path, steps: int = 2):
    """Two float64 steps; returns the model, the objective and the number of times the objective ran."""
    processor = make_processor()
    objective, dataset, collator, callbacks = objective_setup(
        name, processor, num_clips=16, knowledge_base="fixed"
    )
    calls = []
    objective.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    model = exact_model(processor, name)
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=steps, per_device_train_batch_size=8),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=Float64Batches(collator or AtrDataCollator(processor)),
        callbacks=callbacks,
        embedding_chunk_size=embedding_chunk_size,
    )
    trainer.train()
    return model, objective, calls


@pytest.mark.parametrize("name", available_objectives())
def test_cached_training_equals_whole_batch_training_in_float64(tmp_path, name):
    whole, whole_objective, whole_calls = _train(name, None, tmp_path / "whole")
    cached, cached_objective, cached_calls = _train(name, 3, tmp_path / "cached")
    assert cached_calls == whole_calls == [8, 8]  # once per step, on the whole batch: never per chunk
    initial = exact_model(make_processor(), name).state_dict()
    moved = False
    for key, expected in whole.state_dict().items():
        torch.testing.assert_close(cached.state_dict()[key], expected, rtol=1e-5, atol=1e-5, msg=key)
        moved = moved or not torch.equal(expected, initial[key])
    assert moved
    # DART's EMA reliabilities and update counter: one update per step, not per chunk.
    for key, expected in whole_objective.state_dict().items():
        torch.testing.assert_close(
            cached_objective.state_dict()[key], expected, rtol=1e-5, atol=1e-5, msg=key
        )
    if name == "dart":
        transport = cached_objective.feature_transport
        assert int(transport.num_updates) == 2 and bool((transport.reliability_ema != 0).any())


def test_ask_knowledge_base_is_refreshed_once_per_step_as_without_caching(tmp_path):
    """ASK's base, re-encoded after every optimizer step, sees the same model with and without caching and is
    rebuilt once per step (never per chunk). Float32 and SGD: the base is encoded from the float32 features."""

    def train(embedding_chunk_size, output_dir):
        processor = make_processor()
        dataset = feature_dataset(16)
        objective = build_objective({"name": "ask", "num_prototypes": 4})
        refresh = KnowledgeBaseRefreshCallback(
            objective, processor, dataset, every_steps=1, show_progress=False
        )
        model = make_model(processor=processor, objective={"name": "ask"}, seed=0)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        trainer = AtrTrainer(
            model=model,
            args=training_args(output_dir, max_steps=3, optim="sgd", learning_rate=0.1),
            train_dataset=dataset,
            processing_class=processor,
            objective=objective,
            callbacks=[refresh],
            embedding_chunk_size=embedding_chunk_size,
        )
        trainer.train()
        return refresh.history, objective.knowledge_base

    whole_history, whole_base = train(None, tmp_path / "whole")
    cached_history, cached_base = train(3, tmp_path / "cached")
    # Built at step 0, rebuilt after steps 1 and 2 (not after the last one, which ends training).
    assert (
        [record["step"] for record in cached_history]
        == [record["step"] for record in whole_history]
        == [0, 1, 2]
    )
    for name, expected in whole_base.tensors.items():
        torch.testing.assert_close(cached_base.tensors[name], expected, rtol=1e-4, atol=1e-5, msg=name)


def test_gradient_scaling_applies_to_every_cached_gradient(tmp_path):
    """fp16 training scales the loss (accelerate's GradScaler; CUDA only, so a CPU scaler stands in here): the
    cached update equals the whole-batch update, scaled and unscaled alike. (SGD: Adam would turn the float32
    round-off of gradients that are zero in exact arithmetic, such as attention key biases', into full steps.)"""

    def train(embedding_chunk_size, output_dir):
        processor = make_processor()
        model = make_model(processor=processor, seed=0)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        trainer = AtrTrainer(
            model=model,
            args=training_args(output_dir, max_steps=2, max_grad_norm=0.0, optim="sgd", learning_rate=0.1),
            train_dataset=feature_dataset(16),
            processing_class=processor,
            embedding_chunk_size=embedding_chunk_size,
        )
        trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
        scaled = []
        backward = trainer.accelerator.backward
        trainer.accelerator.backward = lambda loss, **kw: (scaled.append(True), backward(loss, **kw))
        trainer.train()
        assert scaled and trainer.accelerator.scaler.get_scale() == 2.0**12  # finite gradients, no back-off
        return model.state_dict()

    whole, cached = train(None, tmp_path / "whole"), train(4, tmp_path / "cached")
    for key, expected in whole.items():
        torch.testing.assert_close(cached[key], expected, rtol=1e-4, atol=1e-5, msg=key)
