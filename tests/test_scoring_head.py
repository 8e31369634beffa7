"""The scoring head's dot-product scoring, raw or log scale, logit bias, and config format 3."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_model, make_processor, random_waveforms
from transformers import AutoModel

from hf_atr import AtrConfig, AtrDualEncoderModel, AtrScoringHead, build_objective
from hf_atr.audio_batches import model_audio_inputs
from hf_atr.configuration_atr import migrate_config_dict
from hf_atr.encoding import encode_labels, encode_text
from hf_atr.scoring_head import MAX_LOGIT_SCALE


def _inputs(processor):
    return processor(
        audio=random_waveforms(3), text=["a dog barks", "birds sing", "a siren wails"], return_tensors="pt"
    )


def test_dot_scoring_keeps_embeddings_unnormalised_and_logits_are_raw_scale_times_dot_plus_bias():
    processor = make_processor()
    model = make_model(processor=processor, scoring="dot", logit_scale_form="raw", logit_bias=True).eval()
    with torch.no_grad():
        model.scoring_head.logit_scale.fill_(-0.7)  # a raw scale may be negative: no log form
        model.scoring_head.logit_bias.fill_(1.3)
        output = model(**_inputs(processor))
        audio_inputs = processor(audio=random_waveforms(3), return_tensors="pt")
        projected = model.audio_projection(model.get_audio_features(**audio_inputs, project=False))
    assert not torch.allclose(output.audio_embeds.norm(dim=-1), torch.ones(3))
    torch.testing.assert_close(output.audio_embeds, projected)
    expected = -0.7 * output.text_embeds @ output.audio_embeds.T + 1.3
    torch.testing.assert_close(output.logits_per_text, expected)
    torch.testing.assert_close(output.logits_per_audio, expected.T)


def test_log_scale_is_capped_and_raw_scale_is_not():
    log_head = AtrScoringHead("cosine", dim=3, logit_scale_init=10.0)
    raw_head = AtrScoringHead("cosine", dim=3, logit_scale_init=math.log(500.0), scale_form="raw")
    assert log_head.scale().item() == MAX_LOGIT_SCALE
    assert raw_head.logit_scale.item() == pytest.approx(500.0)  # stored as the factor itself
    assert raw_head.scale().item() == pytest.approx(500.0)


@pytest.mark.parametrize("objective", ["contrastive", "sigmoid"])
def test_logit_scale_init_is_the_log_of_the_initial_factor_in_both_forms(objective):
    """SigLIP's t' = log 10 (or CLIP's log(1/0.07)) starts the factor at 10 (1/0.07) whether stored as a log or raw."""
    factors = {}
    for form in ("log", "raw"):
        model = make_model(objective={"name": objective}, logit_scale_form=form)
        stored = model.scoring_head.logit_scale.item()
        assert stored == pytest.approx(model.config.logit_scale_init if form == "log" else factors["log"])
        factors[form] = model.scoring_head.scale().item()
    expected = {"contrastive": 1 / 0.07, "sigmoid": 10.0}[objective]
    assert factors["log"] == pytest.approx(expected) and factors["raw"] == pytest.approx(expected)
    largest = AtrConfig(logit_scale_form="raw", logit_scale_init=88.72)
    assert math.isfinite(AtrScoringHead("dot", 3, largest.logit_scale_init, scale_form="raw").scale().item())


def test_a_head_without_bias_scores_bit_for_bit_as_before_and_a_bias_shifts_every_logit():
    torch.manual_seed(0)
    text, audio = torch.randn(4, 6), torch.randn(5, 6)
    plain = AtrScoringHead("euclidean", dim=6, logit_scale_init=1.0)
    biased = AtrScoringHead("euclidean", dim=6, logit_scale_init=1.0, bias_init=-2.5)
    assert torch.equal(plain(text, audio), plain.scale() * plain.similarity(text, audio))  # no "+ 0" added
    assert plain.bias().item() == 0.0
    torch.testing.assert_close(biased(text, audio), plain(text, audio) - 2.5)
    torch.testing.assert_close(biased.audio_logits(audio, text), plain.audio_logits(audio, text) - 2.5)


def test_dot_scoring_refuses_objectives_that_transport_on_a_ground_metric(tmp_path):
    message = (
        "scoring='dot' (unnormalised embeddings, PE-Audio) has no ground metric, and objective 'iot' transports on "
        "one (its paper's: 'euclidean'); train a dot-scored model with an objective on similarities (e.g. "
        "'sigmoid', 'contrastive'), or choose scoring 'cosine', 'euclidean' or 'mahalanobis'."
    )
    with pytest.raises(ValueError) as error:
        AtrConfig(scoring="dot", objective={"name": "iot"})
    assert str(error.value) == message
    for name in ("sigmoid", "contrastive", "triplet"):
        assert AtrConfig(scoring="dot", objective={"name": name}).scoring == "dot"
    # A config saved so (before this check) still loads, for search.
    config = AtrConfig(scoring="dot").to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, "objective": {"name": "iot"}}))
    assert AtrConfig.from_pretrained(tmp_path).objective == {"name": "iot"}


def test_dot_scoring_has_no_ground_metric():
    head = AtrScoringHead("dot", dim=3, logit_scale_init=0.0)
    with pytest.raises(
        ValueError, match=r"scoring='dot' \(unnormalised embeddings, PE-Audio\) has no ground metric"
    ):
        head.distance(torch.randn(2, 3), torch.randn(2, 3))


def test_raw_scale_and_bias_survive_save_and_load_and_are_initialised_when_missing(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor, scoring="dot", logit_scale_form="raw", logit_bias=True).eval()
    with torch.no_grad():
        model.scoring_head.logit_scale.fill_(3.0)
        model.scoring_head.logit_bias.fill_(-4.0)
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert (loaded.scoring_head.logit_scale.item(), loaded.scoring_head.logit_bias.item()) == (3.0, -4.0)
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(**_inputs(processor)).logits_per_text, model(**_inputs(processor)).logits_per_text
        )
    weights = load_file(tmp_path / "model.safetensors")
    del weights["scoring_head.logit_scale"], weights["scoring_head.logit_bias"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    reinitialised = AtrDualEncoderModel.from_pretrained(tmp_path)
    assert reinitialised.scoring_head.logit_scale.item() == pytest.approx(
        math.exp(model.config.logit_scale_init)
    )
    assert reinitialised.scoring_head.logit_bias.item() == model.config.logit_bias_init


def test_format_2_configs_migrate_to_a_log_scale_without_bias():
    saved = AtrConfig().to_dict()
    for field in ("logit_scale_form", "logit_bias", "logit_bias_init", "logit_scale_init"):
        del saved[field]
    saved["format_version"] = 2
    migrated = migrate_config_dict(saved)
    assert (migrated["logit_scale_form"], migrated["logit_bias"], migrated["format_version"]) == (
        "log",
        False,
        3,
    )
    assert migrated["logit_scale_init"] == pytest.approx(math.log(1 / 0.07))
    loaded = AtrConfig.from_dict(saved)
    assert (loaded.logit_scale_form, loaded.logit_bias) == ("log", False)
    assert not hasattr(AtrDualEncoderModel(make_model().config).scoring_head, "logit_bias")


def test_a_format_3_config_records_its_resolved_logit_initialisation(tmp_path):
    AtrConfig().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["logit_scale_form"], saved["logit_bias"], saved["logit_bias_init"]) == ("log", False, 0.0)
    assert saved["logit_scale_init"] == pytest.approx(math.log(1 / 0.07))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"logit_scale_form": "exp"}, "`logit_scale_form` must be one of ('log', 'raw'), got 'exp'"),
        ({"logit_bias_init": math.inf}, "`logit_bias_init` must be finite, got inf"),
        ({"logit_scale_init": math.nan}, "`logit_scale_init` must be finite, got nan"),
        (
            {"logit_scale_form": "raw", "logit_scale_init": 89.0},
            "`logit_scale_init` is the log of the initial factor, which a 'raw' head stores as "
            "exp(logit_scale_init); got 89.0, whose exponential exceeds float32 (at most 88.72).",
        ),
    ],
)
def test_invalid_logit_options_fail_with_the_allowed_values(kwargs, message):
    with pytest.raises(ValueError) as error:
        AtrConfig(**kwargs)
    assert message in str(error.value)


def test_a_saved_config_with_unset_logit_options_and_an_uninstalled_objective_says_what_to_set():
    saved = {**AtrConfig().to_dict(), "objective": {"name": "plugin_loss"}}
    del saved["logit_bias"]
    with pytest.raises(ValueError, match=r"leaves \['logit_bias'\] unset, and its objective"):
        AtrConfig.from_dict(saved)


def test_softmax_objectives_do_not_read_the_bias_and_leave_it_frozen_by_the_trainer():
    assert not build_objective({"name": "contrastive"}).logit_bias_read()
    assert not build_objective({"name": "triplet"}).logit_bias_read()
    assert not build_objective({"name": "dart", "base": "contrastive"}).logit_bias_read()


def test_pe_audio_padding_mask_reaches_the_model_as_the_audio_mask():
    features = {"input_values": torch.zeros(1, 1, 1920), "padding_mask": torch.ones(1, 1920)}
    assert sorted(model_audio_inputs(features)) == ["audio_attention_mask", "input_values"]


def test_zero_shot_label_embeddings_of_a_dot_model_are_the_plain_mean_of_their_prompts():
    """A ``dot`` model scores unnormalised embeddings, so a label's prompt ensemble is not re-normalised."""
    processor = make_processor()
    model = make_model(processor=processor, scoring="dot", logit_scale_form="raw", logit_bias=True).eval()
    prompts = ["a {} sound", "This is a sound of {}."]
    labels = encode_labels(model, processor, ["dog", "siren"], prompts)
    texts = ["a dog sound", "This is a sound of dog.", "a siren sound", "This is a sound of siren."]
    expected = encode_text(model, processor, texts).view(2, 2, -1).mean(dim=1)
    torch.testing.assert_close(labels, expected)
    assert not torch.allclose(labels.norm(dim=-1), torch.ones(2))
