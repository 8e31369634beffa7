"""A PANNs audio tower inside the dual encoder: build, featurise, train, save and reload through the Auto classes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from panns_reference import tiny_official_state
from tiny_models import (
    WORD_CLASSES,
    make_model,
    make_processor,
    random_waveforms,
    tiny_panns_config,
    tiny_panns_feature_extractor,
    tiny_text_config,
    training_args,
)
from transformers import AutoModel, AutoProcessor, BertModel

from hf_atr import AtrDualEncoderModel, AtrTrainer
from hf_atr.models.panns.convert_panns_checkpoint import convert_panns_checkpoint
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.models.panns.modeling_panns import PannsModel


def tone_clips(count: int, seed: int = 0) -> tuple[list[np.ndarray], list[list[str]]]:
    """Noise plus a class-specific tone; captions name the class."""
    waveforms = random_waveforms(count, seed=seed)
    time = np.arange(waveforms[0].size) / 16000
    captions = []
    for index, waveform in enumerate(waveforms):
        label = index % len(WORD_CLASSES)
        waveform += (0.5 * np.sin(2 * np.pi * 300 * (label + 1) * time)).astype(np.float32)
        captions.append([f"a {WORD_CLASSES[label]} sound"])
    return waveforms, captions


def test_pooler_pooling_gives_the_panns_embedding():
    processor = make_processor("panns")
    model = make_model("panns", processor=processor, audio_pooling="pooler").eval()
    assert type(model.audio_model) is PannsModel
    waveforms, captions = tone_clips(3)
    inputs = processor(audio=waveforms, text=[caption[0] for caption in captions])
    assert set(inputs) >= {"input_features", "input_ids"} and inputs["input_features"].shape == (3, 101, 32)
    with torch.no_grad():
        outputs = model(**inputs)
        embedding = model.audio_model(inputs["input_features"]).pooler_output
    expected = torch.nn.functional.normalize(model.audio_projection(embedding), dim=-1)
    torch.testing.assert_close(outputs.audio_embeds, expected)
    assert outputs.logits_per_text.shape == (3, 3)


@pytest.mark.slow
def test_trains_saves_and_reloads_through_auto_classes(tmp_path):
    processor = make_processor("panns")
    model = make_model("panns", processor=processor, audio_pooling="pooler")
    waveforms, captions = tone_clips(16)
    features = processor(audio=waveforms, return_tensors="np")["input_features"]
    dataset = Dataset.from_dict(
        {"audio_id": [f"clip{i}" for i in range(16)], "captions": captions, "input_features": list(features)}
    )
    before = model.audio_model.conv_block1.conv1.weight.detach().clone()
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path / "run", max_steps=3, logging_steps=1),
        train_dataset=dataset,
        processing_class=processor,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert not torch.equal(model.audio_model.conv_block1.conv1.weight, before)

    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    reloaded = AutoModel.from_pretrained(tmp_path / "model").eval()
    reloaded_processor = AutoProcessor.from_pretrained(tmp_path / "model")
    assert type(reloaded.audio_model) is PannsModel
    assert type(reloaded_processor.feature_extractor) is PannsFeatureExtractor
    inputs = reloaded_processor(audio=waveforms[:4], text=[caption[0] for caption in captions[:4]])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).audio_embeds, model(**inputs).audio_embeds)
        torch.testing.assert_close(reloaded(**inputs).logits_per_text, model(**inputs).logits_per_text)


@pytest.mark.slow
def test_a_converted_checkpoint_is_a_starting_point(tmp_path):
    state = tiny_official_state("resnet38")
    torch.save({"model": state}, tmp_path / "ResNet38.pth")
    convert_panns_checkpoint(
        tmp_path / "ResNet38.pth",
        tmp_path / "panns",
        config=tiny_panns_config("resnet38"),
        feature_extractor=tiny_panns_feature_extractor(),
    )
    BertModel(tiny_text_config("bert", 200)).save_pretrained(tmp_path / "bert")
    model = AtrDualEncoderModel.from_audio_text_pretrained(
        str(tmp_path / "panns"), str(tmp_path / "bert"), audio_pooling="pooler", projection_dim=8
    )
    assert type(model.audio_model) is PannsModel
    assert model.config.audio_pooling == "pooler"  # an AtrConfig field, not a backbone argument
    assert torch.equal(model.audio_model.resnet.layer3[1].conv2.weight, state["resnet.layer3.1.conv2.weight"])
    assert torch.equal(model.audio_model.fc1.bias, state["fc1.bias"])
