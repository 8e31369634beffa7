from __future__ import annotations

import pytest
from tiny_models import tiny_clap_config
from transformers import AutoModel, BertConfig, BertModel, ClapAudioModel, ClapTextModel

from hf_atr import towers
from hf_atr.towers import register_tower, tower_class, tower_from_config, tower_from_pretrained


@pytest.mark.slow
def test_clap_towers_build_although_automodel_cannot():
    config = tiny_clap_config()
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModel.from_config(config.audio_config)
    assert isinstance(tower_from_config(config.audio_config), ClapAudioModel)
    assert isinstance(tower_from_config(config.text_config), ClapTextModel)


def test_other_towers_go_to_automodel():
    assert tower_class("bert") is None
    assert isinstance(tower_from_config(BertConfig(hidden_size=32, num_attention_heads=2)), BertModel)


def test_tower_from_pretrained_loads_a_saved_clap_tower_with_its_weights(tmp_path):
    tower = tower_from_config(tiny_clap_config().audio_config)
    tower.save_pretrained(tmp_path)
    loaded = tower_from_pretrained(tmp_path)
    assert isinstance(loaded, ClapAudioModel)
    for name, tensor in tower.state_dict().items():
        assert (loaded.state_dict()[name] == tensor).all(), name


def test_registered_class_takes_precedence(monkeypatch):
    monkeypatch.setattr(towers, "_registered_tower_classes", {})

    class SmallBert(BertModel):
        pass

    register_tower("bert", SmallBert)
    assert type(tower_from_config(BertConfig(hidden_size=32, num_attention_heads=2))) is SmallBert


def test_register_tower_refuses_bad_arguments():
    with pytest.raises(ValueError, match="model_type must be a non-empty string, got ''"):
        register_tower("", BertModel)
    with pytest.raises(TypeError, match="model_class must be a PreTrainedModel subclass, got <class 'dict'>"):
        register_tower("bert", dict)
