"""Training keeps its random crops (CLAP rand_trunc's crop, fusion's views and is_longer mark, Whisper's dither), drawn
from seeded generators: a long clip shows other crops in another epoch, and a resumed run sees the crops and the
model inputs of the uninterrupted one, bit for bit."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from tiny_models import (
    make_model,
    make_processor,
    raw_audio_dataset,
    save_tiny_clap_checkpoint,
    training_args,
)

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.features import batched_features_for
from hf_atr.training.waveform_collator import WaveformCollator

CLIPS_SECONDS = [2.5, 0.5, 3.0, 2.0]
"""Four clips, two captions each: eight pairs, two batches of four per epoch."""


@dataclass
class RecordingCollator(WaveformCollator):
    """A WaveformCollator that keeps what it made: per batch, each clip's waveform and random choices."""

    made: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def __call__(self, rows):
        batch = super().__call__(rows)
        for item, audio_id in enumerate(batch["audio_ids"]):
            length = int(batch["waveform_lengths"][item])
            choices = {name: value[item] for name, value in batch["feature_random_choices"].items()}
            self.made.append({"audio_id": audio_id, "waveform": batch["waveforms"][item, :length], **choices})
        return batch


def _model_and_processor(family, directory):
    if family.startswith("clap"):
        save_tiny_clap_checkpoint(directory, fused=family == "clap_fused")
        return AtrDualEncoderModel.from_clap(directory), AtrProcessor.from_clap(directory)
    processor = make_processor("whisper")
    processor.feature_extractor.dither = 0.01
    return make_model("whisper", processor=processor), processor


def _train(family, tmp_path, output, resume=None):
    """Train 2 epochs (4 steps, a checkpoint after the first epoch); the collator's items and the model's audio
    inputs, step by step."""
    model, processor = _model_and_processor(family, tmp_path / f"{output}-model")
    collator = RecordingCollator(processor, seed=3)
    inputs: list[dict[str, torch.Tensor]] = []

    def record(module, args, kwargs):
        if module.training:
            inputs.append(
                {name: kwargs[name].clone() for name in ("input_features", "is_longer") if name in kwargs}
            )

    model.register_forward_pre_hook(record, with_kwargs=True)
    args = training_args(
        tmp_path / output,
        per_device_train_batch_size=4,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        seed=3,
    )
    trainer = AtrTrainer(
        model=model,
        args=args,
        train_dataset=raw_audio_dataset(CLIPS_SECONDS),
        processing_class=processor,
        data_collator=collator,
        audio_features="device",
    )
    trainer.train(resume_from_checkpoint=resume)
    return collator.made, inputs


def _same(first, second):
    assert first.keys() == second.keys()
    for name in first:
        if isinstance(first[name], torch.Tensor):
            torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)
        else:
            assert first[name] == second[name]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["clap", "clap_fused", "whisper_dither"])
def test_crops_change_with_the_epoch_and_a_resumed_run_sees_the_same(family, tmp_path):
    made, inputs = _train(family, tmp_path, "full")
    pairs_per_epoch = 2 * len(CLIPS_SECONDS)
    assert len(made) == 2 * pairs_per_epoch and len(inputs) == 4
    resumed_made, resumed_inputs = _train(
        family, tmp_path, "resumed", resume=str(tmp_path / "full" / "checkpoint-2")
    )
    # The resumed run trains the second epoch: the same crops and the same model inputs as the full run's.
    assert len(resumed_made) == pairs_per_epoch and len(resumed_inputs) == 2
    for expected, actual in zip(made[pairs_per_epoch:], resumed_made):
        _same(expected, actual)
    for expected, actual in zip(inputs[2:], resumed_inputs):
        _same(expected, actual)
    if family == "whisper_dither":
        # Training dithers (inference does not): the first clip's features are not the undithered ones.
        _, processor = _model_and_processor(family, tmp_path / "reference")
        plain = batched_features_for(processor.feature_extractor).featurize_arrays([made[0]["waveform"]])
        assert (inputs[0]["input_features"][0] - plain["input_features"][0]).abs().max() > 1e-2
        return
    # A long clip shows other crops in the other epoch (rand_trunc: its waveform; fusion: its views' starts).
    by_epoch = [
        {item["audio_id"]: item for item in made[start : start + pairs_per_epoch]} for start in (0, 8)
    ]
    for audio_id in ("clip0", "clip2"):  # 2.5 s and 3 s, the window is 1 s
        first, second = by_epoch[0][audio_id], by_epoch[1][audio_id]
        if family == "clap":
            assert not torch.equal(first["waveform"], second["waveform"])
        else:
            assert not torch.equal(first["fusion_starts"], second["fusion_starts"])
