"""PE-Audio checkpoints (transformers ``PeAudioModel``) loaded into hf-atr: parity with its ``forward()``."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from ranking_margin import clear_ranking
from safetensors.torch import load_file, save_file
from tiny_models import (
    PE_AUDIO_HOP,
    PE_AUDIO_SAMPLING_RATE,
    make_model,
    make_processor,
    save_tiny_pe_audio_checkpoint,
)
from transformers import AutoModel, AutoProcessor, PeAudioModel, PeAudioProcessor

from hf_atr import AtrDualEncoderModel, AtrProcessor, build_objective
from hf_atr.models.pe_audio import PeAudioCheckpointError, convert_pe_audio_state_dict

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

PARITY_BOUND = 1e-6
CAPTIONS = ["a dog barks", "birds sing then a car passes quietly", "a siren wails"]
CLIP_SAMPLES = (30_000, 12_000, 45_000)
"""Clips of different lengths, none a multiple of the hop: reflect-padded, then padded to the longest."""


@pytest.fixture(scope="module")
def pe_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pe-av-tiny")
    save_tiny_pe_audio_checkpoint(directory)
    return directory


@pytest.fixture(scope="module")
def converted(pe_dir):
    return AtrDualEncoderModel.from_pe_audio(pe_dir), AtrProcessor.from_pe_audio(pe_dir)


def _clips() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(0.1 * rng.standard_normal(samples)).astype(np.float32) for samples in CLIP_SAMPLES]


def _reference(pe_dir):
    """``PeAudioModel.forward()`` on ``PeAudioProcessor``'s inputs, as a transformers user runs it."""
    pe_processor = PeAudioProcessor.from_pretrained(pe_dir)
    audio = pe_processor.feature_extractor(
        _clips(), sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    text = pe_processor.tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = PeAudioModel.from_pretrained(pe_dir).eval()(**audio, **text)
    return audio, text, output


@pytest.mark.slow
def test_embeddings_and_logits_equal_pe_audio_model_forward(pe_dir, converted):
    model, processor = converted
    audio, text, expected = _reference(pe_dir)
    inputs = processor(
        audio=_clips(), text=CAPTIONS, sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    # 30,000 samples are reflect-padded to 30,720, counted valid, then zero-padded (invalid) to the longest
    valid = inputs["audio_attention_mask"].sum(dim=1).tolist()
    assert valid == [30_720, 13_440, 46_080] and inputs["input_values"].shape[-1] % PE_AUDIO_HOP == 0
    assert text["attention_mask"].min() == 0  # padded captions: the mask must be honoured
    torch.testing.assert_close(inputs["input_values"], audio["input_values"], rtol=0, atol=0)
    with torch.no_grad():
        output = model(**inputs)
    assert abs(expected.logits_audio_text).max() > 1.0  # a non-zero scale and bias: parity could fail
    for ours, theirs in (
        (output.audio_embeds, expected.audio_embeds),
        (output.text_embeds, expected.text_audio_embeds),
        (output.logits_per_audio, expected.logits_audio_text),
        (output.logits_per_text, expected.logits_audio_text.T),
    ):
        assert (ours - theirs).abs().max() < PARITY_BOUND


def test_padding_changes_nothing_for_a_clip(converted):
    """A clip's embedding is the same alone and beside a longer clip (the padding mask reaches the encoder)."""
    model, processor = converted
    clips = _clips()
    with torch.no_grad():
        alone = model.get_audio_features(**processor(audio=clips[1:2], sampling_rate=PE_AUDIO_SAMPLING_RATE))
        batched = model.get_audio_features(**processor(audio=clips, sampling_rate=PE_AUDIO_SAMPLING_RATE))
    torch.testing.assert_close(batched[1:2], alone, rtol=1e-5, atol=1e-6)


def test_every_pe_audio_tensor_lands_in_the_model(pe_dir, converted):
    model, _ = converted
    pe_state = PeAudioModel.from_pretrained(pe_dir).state_dict()
    atr_state = model.state_dict()
    assert model.config.scoring == "dot" and model.config.logit_scale_form == "raw"
    assert model.scoring_head.logit_scale.item() == 2.5 and model.scoring_head.logit_bias.item() == -1.5
    assert torch.equal(atr_state["audio_projection.proj.weight"], pe_state["audio_head.proj.weight"])
    assert torch.equal(
        atr_state["text_projection.layer_norm.bias"], pe_state["text_audio_head.layer_norm.bias"]
    )
    assert len(atr_state) == len(pe_state)


def test_converted_model_trains_with_the_sigmoid_objective_from_the_checkpoint_s_scale_and_bias(converted):
    model, processor = converted
    assert model.config.objective == {"name": "sigmoid"}
    objective = build_objective(model.config)
    inputs = processor(
        audio=_clips(), text=CAPTIONS, sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    output = model(**inputs)
    loss = objective(
        output.audio_embeds, output.text_embeds, batch={"audio_ids": ["a", "b", "c"]}, model=model
    )
    logits = output.logits_per_text.detach()
    labels = 2 * torch.eye(3) - 1
    torch.testing.assert_close(loss.loss.detach(), -torch.nn.functional.logsigmoid(labels * logits).sum() / 3)
    model.zero_grad()
    loss.loss.backward()
    assert model.scoring_head.logit_bias.grad is not None and model.scoring_head.logit_bias.grad != 0


def test_saves_and_reloads_through_auto_classes(converted, tmp_path):
    model, processor = converted
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    loaded_processor = AutoProcessor.from_pretrained(tmp_path)
    assert isinstance(loaded, AtrDualEncoderModel) and isinstance(loaded_processor, AtrProcessor)
    inputs = processor(
        audio=_clips(), text=CAPTIONS, sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    reloaded_inputs = loaded_processor(
        audio=_clips(), text=CAPTIONS, sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(**reloaded_inputs).logits_per_audio, model(**inputs).logits_per_audio
        )


@pytest.mark.parametrize(
    ("scale", "effect"),
    [(0.0, "are all equal to the bias"), (-0.5, "rank every pair opposite to its similarity")],
)
def test_a_scale_that_is_not_positive_is_converted_with_a_warning(tmp_path, caplog, scale, effect):
    save_tiny_pe_audio_checkpoint(tmp_path, scale=scale)
    with caplog.at_level(logging.WARNING):
        model = AtrDualEncoderModel.from_pe_audio(tmp_path)
    assert model.scoring_head.logit_scale.item() == scale
    assert (
        f"{tmp_path}: text_audio_logit_scale is {scale:g} (0 at PE-Audio's initialisation; this checkpoint's scale "
        f"is not positive), so the converted model's logits {effect} and zero-shot classification through them "
        "(pipeline classify) is meaningless until training makes the scale positive." in caplog.text
    )
    inputs = AtrProcessor.from_pe_audio(tmp_path)(
        audio=_clips(), text=CAPTIONS, sampling_rate=PE_AUDIO_SAMPLING_RATE, return_tensors="pt"
    )
    with torch.no_grad():
        # Hand-set: without the random class token (it outweighs the audio: similarities within 1e-5 of each
        # other), the embeddings read the clips, and each row's order is clear of rounding.
        model.audio_model.patch_embedder.class_embedding.zero_()
        output = model(**inputs)
    similarity = output.text_embeds @ output.audio_embeds.T
    if scale == 0:
        torch.testing.assert_close(output.logits_per_text, torch.full_like(similarity, -1.5))
    else:  # the logits order every row the other way round
        order = clear_ranking(similarity)
        np.testing.assert_array_equal(clear_ranking(-output.logits_per_text), order)


def test_a_positive_scale_converts_without_a_warning(pe_dir, caplog):
    with caplog.at_level(logging.WARNING):
        AtrDualEncoderModel.from_pe_audio(pe_dir)
    assert "text_audio_logit_scale" not in caplog.text


def test_a_directory_of_another_model_is_named_before_its_weights_are_read(tmp_path):
    make_model().audio_model.save_pretrained(tmp_path / "ast")
    with pytest.raises(PeAudioCheckpointError) as error:
        AtrDualEncoderModel.from_pe_audio(tmp_path / "ast")
    assert str(error.value) == (
        f"{tmp_path / 'ast'} holds a 'audio-spectrogram-transformer' model, not a PE-Audio checkpoint (model_type "
        "'pe_audio', as facebook/pe-av-small, -base and -large)."
    )


def test_options_the_checkpoint_fixes_are_refused(pe_dir):
    with pytest.raises(ValueError, match=r"from_pe_audio: \['scoring'\] are set by the PE-Audio checkpoint"):
        AtrDualEncoderModel.from_pe_audio(pe_dir, scoring="cosine")
    with pytest.raises(ValueError, match=r"scoring='dot' .* has no ground metric, and objective 'dart'"):
        AtrDualEncoderModel.from_pe_audio(pe_dir, objective={"name": "dart"})


def test_missing_unexpected_and_mismatched_weights_are_named(pe_dir, tmp_path):
    weights = load_file(pe_dir / "model.safetensors")
    del weights["audio_head.proj.weight"]
    weights["extra.weight"] = torch.zeros(2)
    weights["text_audio_head.layer_norm.weight"] = torch.zeros(5)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((pe_dir / "config.json").read_text())
    with pytest.raises(PeAudioCheckpointError) as error:
        AtrDualEncoderModel.from_pe_audio(tmp_path)
    message = str(error.value)
    assert "is not a complete PeAudioModel checkpoint for its config" in message
    assert "missing keys: audio_head.proj.weight" in message
    assert "unexpected keys: extra.weight" in message
    assert "text_audio_head.layer_norm.weight (checkpoint (5,) vs model (32,))" in message


def test_state_dict_conversion_names_tensors_without_a_place():
    shapes = {
        "scoring_head.logit_scale": (),
        "scoring_head.logit_bias": (),
        "text_projection.proj.weight": (4, 4),
    }
    state = {
        "text_audio_logit_scale": torch.ones(1),
        "text_audio_logit_bias": torch.ones(1),
        "video_head.proj.weight": torch.ones(2, 2),
        "text_audio_head.proj.weight": torch.ones(3, 4),
    }
    with pytest.raises(PeAudioCheckpointError) as error:
        convert_pe_audio_state_dict(state, shapes)
    message = str(error.value)
    assert "PE-Audio tensors without a place in the hf-atr model: video_head.proj.weight" in message
    assert "text_audio_head.proj.weight ((3, 4) vs text_projection.proj.weight (4, 4))" in message
    del state["video_head.proj.weight"], state["text_audio_head.proj.weight"]
    converted = convert_pe_audio_state_dict(state, {key: shapes[key] for key in list(shapes)[:2]})
    assert converted["scoring_head.logit_scale"].shape == ()


def test_processor_from_a_non_pe_audio_checkpoint_is_refused(tmp_path):
    make_processor().save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match="has a ASTFeatureExtractor, not a PeAudioFeatureExtractor: it is not a PE"
    ):
        AtrProcessor.from_pe_audio(tmp_path)
