from __future__ import annotations

import pytest
from transformers import AutoConfig, BertConfig, WhisperConfig, XLMRobertaConfig

import hf_atr  # noqa: F401  (registers the Auto classes)
from hf_atr import AtrConfig


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
        ({"scoring": "dot"}, "`scoring` must be one of ('cosine', 'euclidean', 'mahalanobis')"),
        ({"audio_pooling": "max"}, "`audio_pooling` must be one of ('mean', 'cls', 'pooler')"),
        ({"projection_dim": 0}, "`projection_dim` must be a positive integer"),
        (
            {"objective": {"name": "nope"}},
            "Unknown objective 'nope'. Registered objectives: ask, cacl, contrastive, dart, iot",
        ),
        ({"objective": {"temperature": 0.1}}, "must be a dict with a 'name' key"),
        ({"objective": {"name": "triplet", "margn": 0.1}}, "unknown hyperparameter(s) ['margn']; it accepts"),
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
