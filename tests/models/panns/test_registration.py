from __future__ import annotations

from tiny_models import tiny_panns_config, tiny_panns_feature_extractor
from transformers import AutoConfig, AutoFeatureExtractor, AutoModel, AutoModelForAudioClassification

import hf_atr  # noqa: F401  (arranges the deferred registration)
from hf_atr.models.panns import PannsConfig, PannsFeatureExtractor, register_panns
from hf_atr.models.panns.modeling_panns import PannsForAudioClassification, PannsModel


def test_auto_classes_resolve_panns_without_remote_code(tmp_path):
    register_panns()  # idempotent
    config = tiny_panns_config("resnet38")
    assert isinstance(AutoConfig.for_model("panns"), PannsConfig)
    assert type(AutoModel.from_config(config)) is PannsModel
    assert type(AutoModelForAudioClassification.from_config(config)) is PannsForAudioClassification
    PannsModel(config).save_pretrained(tmp_path)
    tiny_panns_feature_extractor().save_pretrained(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)) is PannsModel
    assert type(AutoFeatureExtractor.from_pretrained(tmp_path)) is PannsFeatureExtractor
    assert type(AutoConfig.from_pretrained(tmp_path)) is PannsConfig
