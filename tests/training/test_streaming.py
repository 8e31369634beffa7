"""Streamed training: the same batches as map-style training, seeded per-epoch draws, exact resume from shards."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import torch
from datasets import Dataset
from synthetic_audio import synthetic_clip
from tiny_models import feature_dataset, make_model, make_processor, training_args
from transformers import TrainerCallback

from hf_atr import AtrTrainer
from hf_atr.data.audio import encode_wav
from hf_atr.data.schema import atr_features, finalize_audio_column
from hf_atr.data.shards import load_audio_text_shards, write_audio_text_shards
from hf_atr.training.streaming import StreamingPairs
from hf_atr.training.waveform_collator import WaveformCollator


def _recorded_batches(trainer: AtrTrainer) -> list:
    """Record (audio_id, caption_index) of every item the objective trains on."""
    seen = []
    forward = trainer.objective.forward

    def recording_forward(audio_embeds, text_embeds, *, batch=None, model=None):
        seen.append(list(zip(batch["audio_ids"], batch["caption_indices"].tolist())))
        return forward(audio_embeds, text_embeds, batch=batch, model=model)

    trainer.objective.forward = recording_forward
    return seen


def _train(train_dataset, output_dir, **arguments):
    """Four steps without dropout (the map-style loader draws worker seeds from torch's generator every epoch,
    the stream's from its own, so dropout masks would differ while the data do not)."""
    processor = make_processor()
    model = make_model(processor=processor, seed=0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    trainer = AtrTrainer(
        model=model,
        args=training_args(output_dir, max_steps=4, **arguments),
        train_dataset=train_dataset,
        processing_class=processor,
    )
    seen = _recorded_batches(trainer)
    trainer.train()
    return seen, model.state_dict()


def test_streamed_run_equals_the_map_style_run_on_the_same_order_of_items(tmp_path):
    clips = feature_dataset(12)
    map_seen, map_parameters = _train(clips, tmp_path / "map", train_sampling_strategy="sequential")
    stream = StreamingPairs(clips.to_iterable_dataset(num_shards=3), captions="all", shuffle_buffer_size=0)
    stream_seen, stream_parameters = _train(stream, tmp_path / "stream", dataloader_num_workers=2)
    assert stream_seen == map_seen and len(map_seen) == 4
    assert map_seen[0][:3] == [("clip0", 0), ("clip0", 1), ("clip1", 0)]
    for name, expected in map_parameters.items():
        torch.testing.assert_close(stream_parameters[name], expected, rtol=0, atol=0, msg=name)


def _items(stream: StreamingPairs, count: int) -> list[dict]:
    items = iter(stream)
    return [next(items) for _ in range(count)]


def test_one_random_caption_per_clip_per_epoch_seeded():
    clips = Dataset.from_dict(
        {
            "audio_id": [f"c{i}" for i in range(10)],
            "captions": [[f"a{i}", f"b{i}", f"c{i}"] for i in range(10)],
        }
    ).to_iterable_dataset(num_shards=2)
    stream = StreamingPairs(clips, seed=1, shuffle_buffer_size=4)
    items = _items(stream, 30)
    epochs = [items[start : start + 10] for start in (0, 10, 20)]
    for epoch, epoch_items in enumerate(epochs):
        assert sorted(item["audio_id"] for item in epoch_items) == sorted(f"c{i}" for i in range(10))
        assert {item["epoch"] for item in epoch_items} == {epoch}
    draws = [{item["audio_id"]: item["caption_index"] for item in epoch_items} for epoch_items in epochs]
    assert draws[0] != draws[1] and set(draws[0].values()) == {0, 1, 2}  # a new draw each epoch
    assert [item["audio_id"] for item in epochs[0]] != [item["audio_id"] for item in epochs[1]]  # reshuffled
    again = _items(StreamingPairs(clips, seed=1, shuffle_buffer_size=4), 30)
    assert [(i["audio_id"], i["caption_index"]) for i in again] == [
        (i["audio_id"], i["caption_index"]) for i in items
    ]
    other_seed = _items(StreamingPairs(clips, seed=2, shuffle_buffer_size=4), 10)
    assert [i["audio_id"] for i in other_seed] != [i["audio_id"] for i in epochs[0]]


def test_all_captions_once_per_epoch_spread_by_the_shuffle_buffer():
    clips = Dataset.from_dict(
        {
            "audio_id": [f"c{i}" for i in range(6)],
            "captions": [[f"a{i}", f"b{i}"] for i in range(6)],
            "translations": [{"fra": [f"x{i}"]} for i in range(6)],
        }
    ).to_iterable_dataset(num_shards=2)
    stream = StreamingPairs(clips, captions="all", languages=["eng", "fra"], shuffle_buffer_size=8)
    epoch = _items(stream, 18)
    pairs = Counter((item["audio_id"], item["caption_language"], item["caption_index"]) for item in epoch)
    assert len(pairs) == 18 and set(pairs.values()) == {1}
    neighbours = sum(a["audio_id"] == b["audio_id"] for a, b in zip(epoch, epoch[1:]))
    assert neighbours < 12  # expanded in clip order, 12 of the 17 neighbours would share a clip


def test_processes_split_the_shards():
    clips = feature_dataset(8).to_iterable_dataset(num_shards=4)
    stream = StreamingPairs(clips, shuffle_buffer_size=0)
    per_rank = [{item["audio_id"] for item in _items(stream.for_process(rank, 2), 4)} for rank in range(2)]
    assert per_rank[0].isdisjoint(per_rank[1]) and per_rank[0] | per_rank[1] == {f"clip{i}" for i in range(8)}
    with pytest.raises(ValueError, match="The stream has 4 shards, which 3 processes cannot split evenly"):
        stream.for_process(0, 3)


def test_bad_streams_and_options_are_named(tmp_path):
    with pytest.raises(TypeError, match="StreamingPairs streams a datasets.IterableDataset, got Dataset"):
        StreamingPairs(feature_dataset(2))
    stream = feature_dataset(2).to_iterable_dataset()
    with pytest.raises(ValueError, match="captions must be one of"):
        StreamingPairs(stream, captions="first")
    with pytest.raises(ValueError, match="shuffle_buffer_size must be a non-negative int or None, got -1"):
        StreamingPairs(stream, shuffle_buffer_size=-1)
    uncaptioned = Dataset.from_dict({"audio_id": ["x"], "captions": [[]]}).to_iterable_dataset()
    with pytest.raises(ValueError, match="Clip 'x' has no captions in the languages"):
        _items(StreamingPairs(uncaptioned), 1)
    anonymous = Dataset.from_dict({"captions": [["a dog"]]}).to_iterable_dataset()
    with pytest.raises(ValueError, match="A streamed clip has no 'audio_id'"):
        _items(StreamingPairs(anonymous), 1)
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=1, accelerator_config={"dispatch_batches": True}),
        train_dataset=stream,
        processing_class=processor,
    )
    with pytest.raises(ValueError, match="dispatch_batches=True is not used with streamed training"):
        trainer.get_train_dataloader()


FILE_RATE = 22050


def _audio_clips(count: int) -> Dataset:
    """Clips 0.6–2.4 s long (the tiny AST's window is 1 s), stored as WAV at another rate than the model's."""
    rows = {"audio": [], "audio_id": [], "captions": []}
    for index in range(count):
        waveform = synthetic_clip(int((0.6 + 0.3 * index) * FILE_RATE), FILE_RATE, seed=index)
        rows["audio"].append({"bytes": encode_wav(waveform, FILE_RATE), "path": f"{index}.wav"})
        rows["audio_id"].append(f"clip{index}")
        rows["captions"].append([f"a sound number {index}", f"sound {index} again"])
    return finalize_audio_column(Dataset.from_dict(rows, features=atr_features()))


class KillAfter(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"killed after step {self.step}")


@pytest.mark.slow
def test_killed_streamed_run_from_shards_resumes_to_the_same_parameters(tmp_path, caplog):
    """WebDataset shards → stream → waveforms decoded and randomly cropped in 2 workers → features on the device."""
    shards = write_audio_text_shards(_audio_clips(8), tmp_path / "shards", num_shards=4).files

    def run(output_dir, resume=None, kill_after=None):
        processor = make_processor()
        model = make_model(processor=processor, seed=0)
        trainer = AtrTrainer(
            model=model,
            args=training_args(
                output_dir,
                max_steps=6,
                per_device_train_batch_size=3,
                save_strategy="steps",
                save_steps=2,
                dataloader_num_workers=2,
            ),
            train_dataset=StreamingPairs(load_audio_text_shards(shards), shuffle_buffer_size=4, seed=5),
            processing_class=processor,
            audio_features="device",
            callbacks=[KillAfter(kill_after)] if kill_after else [],
        )
        seen = _recorded_batches(trainer)
        trainer.train(resume_from_checkpoint=resume)
        return seen, model.state_dict()

    with caplog.at_level(logging.WARNING):
        seen, parameters = run(tmp_path / "full")
    crops = [
        record
        for record in caplog.records
        if "were longer than the feature extractor's window" in record.getMessage()
    ]
    assert len(crops) == 1 and "random offset" in crops[0].getMessage()
    assert len({audio_id for batch in seen for audio_id, _ in batch}) == 8  # past one epoch of 8 clips
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", kill_after=3)
    resumed_seen, resumed = run(tmp_path / "killed", resume=str(tmp_path / "killed" / "checkpoint-2"))
    assert resumed_seen == seen[2:]
    for name, expected in parameters.items():
        torch.testing.assert_close(resumed[name], expected, rtol=0, atol=0, msg=name)


def test_device_features_train_like_the_extractor_and_cache_gradients_alike(tmp_path):
    """Clips within the window: on-device features equal the extractor's, so training matches precomputed
    features; gradient caching moves each chunk's waveforms to the device and gives the same update."""
    processor = make_processor()
    clips = _audio_clips(3)  # 0.6, 0.9, 1.2 s: the last is cropped (start crop: what the extractor reads)
    precomputed = processor.extract_audio_features(clips)

    def train(dataset, output_dir, **options):
        model = make_model(processor=processor, seed=0)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        trainer = AtrTrainer(
            model=model,
            args=training_args(
                output_dir, max_steps=2, optim="sgd", learning_rate=0.1, per_device_train_batch_size=6
            ),
            train_dataset=dataset,
            processing_class=processor,
            **options,
        )
        trainer.train()
        return model.state_dict()

    reference = train(precomputed, tmp_path / "precomputed")
    on_device = train(clips, tmp_path / "device", data_collator=WaveformCollator(processor, crop="start"))
    cached = train(
        clips,
        tmp_path / "cached",
        data_collator=WaveformCollator(processor, crop="start"),
        embedding_chunk_size=2,
    )
    for name, expected in reference.items():
        torch.testing.assert_close(on_device[name], expected, rtol=1e-4, atol=1e-4, msg=name)
        torch.testing.assert_close(cached[name], on_device[name], rtol=1e-5, atol=1e-6, msg=name)
    initial = make_model(processor=processor, seed=0).audio_projection.weight.detach()
    assert not torch.allclose(reference["audio_projection.weight"], initial)
