from __future__ import annotations

import json

import pytest
import torch
from tiny_models import make_model, make_processor
from transformers import (
    AutoConfig,
    AutoModel,
    BertConfig,
    BertModel,
    ClapAudioConfig,
    WhisperConfig,
    XLMRobertaConfig,
)

import hf_atr  # noqa: F401  (registers the Auto classes)
from hf_atr import AtrConfig, build_objective
from hf_atr.configuration_atr import CLAP_AUDIO_MODEL_TYPE, FORMAT_VERSION, migrate_config_dict


def test_defaults_build_ast_and_bert_subconfigs():
    config = AtrConfig()
    assert config.audio_config.model_type == "audio-spectrogram-transformer"
    assert config.text_config.model_type == "bert"
    assert config.objective == {"name": "contrastive"}
    assert config.scoring == "cosine"


def test_subconfigs_from_dicts_resolve_any_model_type():
    config = AtrConfig(
        audio_config={"model_type": "whisper", "d_model": 32},
        text_config={"model_type": "xlm-roberta", "hidden_size": 32},
    )
    assert isinstance(config.audio_config, WhisperConfig)
    assert isinstance(config.text_config, XLMRobertaConfig)
    assert config.audio_config.hidden_size == 32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scoring": "inner"}, "`scoring` must be one of ('cosine', 'euclidean', 'mahalanobis', 'dot')"),
        ({"audio_pooling": "attention"}, "`audio_pooling` must be one of ('mean', 'cls', 'max', 'pooler')"),
        ({"text_pooling": "lasttoken"}, "`text_pooling` must be one of ('mean', 'cls', 'max', 'pooler')"),
        ({"projection": "mlp3"}, "`projection` must be one of ('linear', 'mlp')"),
        (
            {"projection_hidden_act": "relu7"},
            "`projection_hidden_act` must be a transformers activation name",
        ),
        ({"projection_dim": 0}, "`projection_dim` must be a positive integer"),
        (
            {"objective": {"name": "nope"}},
            "Unknown objective 'nope'. Registered objectives: ask, cacl, contrastive, dart, iot",
        ),
        ({"objective": {"temperature": 0.1}}, "must be a dict with a 'name' key"),
        ({"objective": {"name": "triplet", "margn": 0.1}}, "unknown hyperparameter(s) ['margn']; it accepts"),
        (
            {"audio_window_attention": "flash"},
            "`audio_window_attention` must be one of ('eager', 'sdpa'), got 'flash'.",
        ),
        (
            {"audio_window_attention": "sdpa"},
            "`audio_window_attention='sdpa'` applies to CLAP's HTS-AT audio tower (a ClapAudioConfig, model_type "
            "'clap_audio_model'); this audio tower's model_type is 'audio-spectrogram-transformer'. Leave",
        ),
    ],
)
def test_invalid_values_fail_at_construction_with_allowed_values(kwargs, message):
    with pytest.raises(ValueError) as error:
        AtrConfig(**kwargs)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        ({"name": "contrastive"}, "cosine"),
        ({"name": "triplet"}, "cosine"),
        ({"name": "kcl"}, "cosine"),
        ({"name": "ask"}, "cosine"),
        ({"name": "iot"}, "euclidean"),  # DART Eq. 4, m-LTM Eq. 9 with M = I
        ({"name": "iot_partial", "mass": 0.8}, "euclidean"),
        ({"name": "dart"}, "euclidean"),  # its default base is iot
        ({"name": "dart", "base": "contrastive"}, "cosine"),
        ({"name": "dart", "base": {"name": "iot_partial", "mass": 0.9}}, "euclidean"),
    ],
)
def test_scoring_defaults_to_the_metric_of_the_objective_s_paper(tmp_path, objective, expected):
    assert AtrConfig(objective=objective).scoring == expected
    chosen = "cosine" if expected == "euclidean" else "euclidean"
    config = AtrConfig(objective=objective, scoring=chosen)
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).scoring == chosen  # an explicit choice survives a reload


def test_round_trip_through_autoconfig(tmp_path):
    config = AtrConfig(
        text_config=BertConfig(hidden_size=32, num_attention_heads=2),
        projection_dim=24,
        scoring="mahalanobis",
        objective={"name": "triplet", "margin": 0.3},
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, AtrConfig)
    assert loaded.projection_dim == 24
    assert loaded.scoring == "mahalanobis"
    assert loaded.objective == {"name": "triplet", "margin": 0.3}
    assert loaded.text_config.hidden_size == 32


def test_saved_config_with_an_objective_not_installed_here_loads_with_a_warning(tmp_path, caplog):
    saved = AtrConfig(projection_dim=24).to_dict()
    saved["objective"] = {"name": "plugin_loss", "margin": 0.1}
    with caplog.at_level("WARNING"):
        loaded = AtrConfig.from_dict(saved)
    assert loaded.objective == {"name": "plugin_loss", "margin": 0.1} and loaded.projection_dim == 24
    assert "Unknown objective 'plugin_loss'" in caplog.text and "training it needs" in caplog.text
    with pytest.raises(ValueError, match="Unknown objective 'plugin_loss'"):
        build_objective(loaded)
    with pytest.raises(ValueError, match="Unknown objective 'plugin_loss'"):
        AtrConfig(objective={"name": "plugin_loss"})  # a new config still fails at once


def test_model_trained_with_a_plugin_objective_loads_and_encodes_without_the_plugin(tmp_path, caplog):
    processor = make_processor()
    model = make_model(processor=processor).eval()
    model.save_pretrained(tmp_path)
    config_path = tmp_path / "config.json"
    saved = json.loads(config_path.read_text())
    saved["objective"] = {"name": "plugin_loss"}
    config_path.write_text(json.dumps(saved))
    with caplog.at_level("WARNING"):
        loaded = AutoModel.from_pretrained(tmp_path)
    assert "Unknown objective 'plugin_loss'" in caplog.text
    tokens = processor(text=["a dog barks"])
    with torch.no_grad():
        torch.testing.assert_close(loaded.get_text_features(**tokens), model.get_text_features(**tokens))


def test_configs_carry_their_format_version_and_older_formats_are_migrated(tmp_path):
    AtrConfig().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["format_version"] == FORMAT_VERSION == 3
    # As written before formats were versioned, by a version that already had the CLAP-style options.
    unversioned = AtrConfig(projection_dim=8, projection="mlp", separate_logit_scales=True).to_dict()
    del unversioned["format_version"]
    assert migrate_config_dict(unversioned)["format_version"] == 3
    loaded = AtrConfig.from_dict(unversioned)
    assert (loaded.projection_dim, loaded.projection, loaded.separate_logit_scales) == (8, "mlp", True)
    with pytest.raises(ValueError, match="saved in format 4, but this hf-atr reads formats up to 3; upgrade"):
        AtrConfig.from_dict({**unversioned, "format_version": 4})


@pytest.mark.parametrize("format_version", [0, 1])
def test_a_config_saved_without_scoring_before_format_2_keeps_cosine(format_version):
    # Up to format 1 a missing `scoring` meant cosine whatever the objective; format 2 defaults to the paper's.
    saved = AtrConfig(objective={"name": "iot"}).to_dict()
    del saved["scoring"]
    if format_version == 0:
        del saved["format_version"]
    else:
        saved["format_version"] = format_version
    assert AtrConfig.from_dict(saved).scoring == "cosine"
    assert AtrConfig.from_dict({**saved, "scoring": "mahalanobis"}).scoring == "mahalanobis"
    assert AtrConfig.from_dict({**saved, "format_version": 2}).scoring == "euclidean"


def test_a_saved_config_without_scoring_whose_objective_is_not_installed_says_what_to_set():
    saved = {**AtrConfig().to_dict(), "objective": {"name": "plugin_loss"}}
    del saved["scoring"]
    with pytest.raises(ValueError, match=r"no `scoring`, and its objective \{'name': 'plugin_loss'\} is not"):
        AtrConfig.from_dict(saved)


def test_options_added_later_default_to_the_behaviour_of_configs_saved_without_them(tmp_path):
    config = AtrConfig(text_config=BertConfig(hidden_size=32, num_attention_heads=2), projection_dim=24)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    later_options = (
        "text_pooling_normalize",
        "projection",
        "projection_hidden_act",
        "separate_logit_scales",
        "freeze_audio",
        "freeze_text",
    )
    for option in (*later_options, "format_version"):  # as saved before these options and versioning
        del saved[option]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.projection, loaded.separate_logit_scales, loaded.text_pooling_normalize) == (
        "linear",
        False,
        False,
    )
    assert (loaded.freeze_audio, loaded.freeze_text, loaded.text_pooling) == (False, False, "mean")


def test_a_built_tower_keeps_its_attention_implementation_in_the_composite_config():
    tower = BertModel(
        BertConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, attn_implementation="eager")
    )
    config = AtrConfig(text_config=tower.config)
    assert tower.config._attn_implementation == "eager"
    assert config.text_config is tower.config


def test_the_window_attention_is_a_clap_audio_towers_choice():
    assert ClapAudioConfig.model_type == CLAP_AUDIO_MODEL_TYPE
    config = AtrConfig(audio_config=ClapAudioConfig(), audio_pooling="pooler", audio_window_attention="sdpa")
    assert AtrConfig.from_dict(config.to_dict()).audio_window_attention == "sdpa"
    assert AtrConfig().audio_window_attention == "eager"
