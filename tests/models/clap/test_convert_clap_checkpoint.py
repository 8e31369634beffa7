"""CLAP checkpoints (transformers ``ClapModel``, fused and unfused HTS-AT) loaded into hf-atr: exact parity."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file
from tiny_models import WORD_CLASSES, random_waveforms, save_tiny_clap_checkpoint, training_args
from transformers import AutoModel, ClapModel, pipeline

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.models.clap.convert_clap_checkpoint import (
    ClapCheckpointError,
    clap_to_atr_key,
    convert_clap_state_dict,
)

PARITY_BOUND = 1e-5
CAPTIONS = ["a dog barks", "rain falls on a tin roof", "a siren wails", "beep"]
LABELS = ["dog", "siren", "rain", "engine"]


@pytest.fixture(scope="module", params=[False, True], ids=["unfused", "fused"])
def clap_dir(request, tmp_path_factory):
    """A saved random-init ClapModel + ClapProcessor, laid out as laion/clap-htsat-(un)fused."""
    directory = tmp_path_factory.mktemp("fused" if request.param else "unfused")
    save_tiny_clap_checkpoint(directory, fused=request.param)
    return directory


@pytest.fixture(scope="module")
def converted(clap_dir):
    return AtrDualEncoderModel.from_clap(clap_dir), AtrProcessor.from_clap(clap_dir)


def _inputs(processor: AtrProcessor, count: int = 3):
    return processor(audio=random_waveforms(count), text=CAPTIONS, return_tensors="pt")


def _audio_inputs(inputs) -> dict[str, torch.Tensor]:
    return {"input_features": inputs["input_features"], "is_longer": inputs["is_longer"]}


def test_features_and_logits_equal_clap_model(clap_dir, converted):
    model, processor = converted
    clap = ClapModel.from_pretrained(clap_dir).eval()
    inputs = _inputs(processor)
    text_inputs = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    assert inputs["attention_mask"].min() == 0  # padded captions: the mask must be honoured
    with torch.no_grad():
        expected_audio = clap.get_audio_features(**_audio_inputs(inputs)).pooler_output
        expected_text = clap.get_text_features(**text_inputs).pooler_output
        expected = clap(**_audio_inputs(inputs), **text_inputs)
        audio = model.get_audio_features(**_audio_inputs(inputs))
        text = model.get_text_features(**text_inputs)
        output = model(**inputs)
    torch.testing.assert_close(expected_audio.norm(dim=-1), torch.ones(3))
    assert (audio - expected_audio).abs().max() < PARITY_BOUND
    assert (text - expected_text).abs().max() < PARITY_BOUND
    # two different scales (20 for audio, 8 for text): a swap would show here
    assert (output.logits_per_audio - expected.logits_per_audio).abs().max() < 1e-4
    assert (output.logits_per_text - expected.logits_per_text).abs().max() < 1e-4


def test_every_clap_tensor_lands_in_the_model(clap_dir, converted):
    model, _ = converted
    clap_state = ClapModel.from_pretrained(clap_dir).state_dict()
    atr_state = model.state_dict()
    assert set(atr_state) == {clap_to_atr_key(key) for key in clap_state}
    for key, tensor in clap_state.items():
        torch.testing.assert_close(atr_state[clap_to_atr_key(key)], tensor, rtol=0, atol=0)
    assert model.config.projection == "mlp" and model.config.separate_logit_scales


class _UnmarkedClapFeatures:
    """transformers' fused CLAP extractor on short clips without its ``is_longer`` mark: it marks a lone short clip
    (its random mark of one clip in a batch without long clips, for training); hf-atr marks only long clips, as
    LAION-CLAP's own inference does."""

    def __init__(self, extractor):
        self.extractor = extractor
        self.sampling_rate = extractor.sampling_rate

    def __call__(self, *args, **kwargs):
        features = self.extractor(*args, **kwargs)
        assert features["is_longer"].all()  # a lone short clip, marked
        features["is_longer"][:] = False
        return features


def test_zero_shot_classification_equals_the_transformers_pipeline(clap_dir, converted, tmp_path):
    model, processor = converted
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    ours = pipeline("audio-text-retrieval", model=str(tmp_path))
    reference = pipeline("zero-shot-audio-classification", model=str(clap_dir))
    if model.config.audio_config.enable_fusion:
        reference.feature_extractor = _UnmarkedClapFeatures(reference.feature_extractor)
    for clip in random_waveforms(2, seed=3):
        expected = reference(clip, candidate_labels=LABELS, hypothesis_template="This is a sound of {}.")
        result = ours.classify(clip, LABELS, templates="This is a sound of {}.")
        assert [entry["label"] for entry in result] == [entry["label"] for entry in expected]
        scores = {entry["label"]: entry["score"] for entry in expected}
        assert max(abs(entry["score"] - scores[entry["label"]]) for entry in result) < 1e-5


def _clap_feature_dataset(processor: AtrProcessor, count: int) -> Dataset:
    """Clips longer than the extractor's 1 s: every clip ``is_longer`` (fused CLAP's batch norm in the fusion
    block cannot train on a batch with exactly one such clip, see docs/pretrained.md)."""
    features = processor(audio=random_waveforms(count, seed=5, seconds=1.5), return_tensors="np")
    assert features["is_longer"].all()
    labels = [WORD_CLASSES[index % len(WORD_CLASSES)] for index in range(count)]
    return Dataset.from_dict(
        {
            "audio_id": [f"clip{index}" for index in range(count)],
            "captions": [[f"a {label} sound", f"the {label}"] for label in labels],
            "input_features": list(features["input_features"]),
            "is_longer": list(features["is_longer"]),
        }
    )


@pytest.mark.parametrize("objective", [{"name": "contrastive"}, {"name": "iot", "reg": 0.1}])
def test_fine_tuned_clap_reloads_through_automodel_with_identical_features(clap_dir, tmp_path, objective):
    processor = AtrProcessor.from_clap(clap_dir)
    model = AtrDualEncoderModel.from_clap(clap_dir, objective=objective)
    before = {key: tensor.clone() for key, tensor in model.state_dict().items()}
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path / "run", max_steps=2, per_device_train_batch_size=4, learning_rate=1e-3),
        train_dataset=_clap_feature_dataset(processor, 8),
        processing_class=processor,
    )
    trainer.train()
    changed = [key for key, tensor in model.state_dict().items() if not torch.equal(tensor, before[key])]
    assert any(key.startswith("audio_model.") for key in changed)
    assert "scoring_head.audio_logit_scale" in changed or objective["name"] != "contrastive"
    trainer.save_model(tmp_path / "final")
    reloaded = AutoModel.from_pretrained(tmp_path / "final").eval()
    assert (
        isinstance(reloaded, AtrDualEncoderModel) and reloaded.config.objective["name"] == objective["name"]
    )
    model.eval()
    inputs = _inputs(processor)
    with torch.no_grad():
        for name in ("audio_embeds", "text_embeds", "logits_per_audio"):
            torch.testing.assert_close(getattr(reloaded(**inputs), name), getattr(model(**inputs), name))


def test_config_options_on_top_of_clap(clap_dir):
    model = AtrDualEncoderModel.from_clap(clap_dir, scoring="mahalanobis", freeze_text=True)
    torch.testing.assert_close(model.scoring_head.metric_matrix.detach(), torch.eye(24))
    assert not any(parameter.requires_grad for parameter in model.text_model.parameters())


def test_options_the_checkpoint_fixes_are_refused(clap_dir):
    with pytest.raises(
        ValueError, match=r"\['projection', 'projection_dim'\] are set by the CLAP checkpoint"
    ):
        AtrDualEncoderModel.from_clap(clap_dir, projection_dim=8, projection="linear")


def _corrupt_checkpoint(source, target, edit) -> None:
    for item in source.iterdir():
        (target / item.name).write_bytes(item.read_bytes())
    weights = load_file(source / "model.safetensors")
    edit(weights)
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})


def test_missing_unexpected_and_mismatched_weights_are_named(clap_dir, tmp_path):
    def edit(weights):
        del weights["logit_scale_a"]
        del weights["text_projection.linear1.bias"]
        weights["audio_projection.linear2.weight"] = torch.zeros(24, 23)
        weights["text_model.extra_head.weight"] = torch.zeros(2)

    _corrupt_checkpoint(clap_dir, tmp_path, edit)
    with pytest.raises(ClapCheckpointError) as error:
        AtrDualEncoderModel.from_clap(tmp_path)
    message = str(error.value)
    assert f"{tmp_path} is not a complete ClapModel checkpoint" in message
    assert "missing keys: logit_scale_a, text_projection.linear1.bias" in message
    assert "unexpected keys: text_model.extra_head.weight" in message
    assert "audio_projection.linear2.weight (checkpoint (24, 23) vs model (24, 24))" in message


def test_derived_buffers_missing_from_a_checkpoint_are_recomputed(clap_dir, tmp_path):
    key = "audio_model.audio_encoder.layers.0.blocks.0.attention.self.relative_position_index"
    _corrupt_checkpoint(clap_dir, tmp_path, lambda weights: weights.pop(key))
    model = AtrDualEncoderModel.from_clap(tmp_path)
    reference = ClapModel.from_pretrained(clap_dir).state_dict()[key]
    torch.testing.assert_close(model.state_dict()[key], reference, rtol=0, atol=0)


def test_state_dict_conversion_names_tensors_without_a_place():
    atr_shapes = {
        "audio_model.w": (2,),
        "scoring_head.logit_scale": (),
        "text_projection.linear1.weight": (3, 2),
    }
    clap_state = {
        "audio_model.w": torch.zeros(2),
        "logit_scale_t": torch.zeros(()),
        "logit_scale_a": torch.zeros(()),
        "vision_model.w": torch.zeros(1),
    }
    with pytest.raises(ClapCheckpointError) as error:
        convert_clap_state_dict(clap_state, atr_shapes, source="ckpt")
    message = str(error.value)
    assert (
        "CLAP tensors without a place in the hf-atr model: logit_scale_a (→ scoring_head.audio_logit_scale), vision_model.w"
        in message
    )
    assert "hf-atr tensors no CLAP tensor fills: text_projection.linear1.weight" in message


def test_processor_from_a_non_clap_checkpoint_is_refused(tmp_path, processor):
    processor.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has a ASTFeatureExtractor, not a ClapFeatureExtractor"):
        AtrProcessor.from_clap(tmp_path)
