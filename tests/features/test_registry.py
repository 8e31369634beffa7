from __future__ import annotations

import logging

import pytest
from transformers import (
    ASTFeatureExtractor,
    ClapFeatureExtractor,
    Wav2Vec2FeatureExtractor,
    WhisperFeatureExtractor,
)

from hf_atr.features import (
    AstFbankFeatures,
    BatchedFeatureExtractor,
    ClapLogMelFeatures,
    ClipWindow,
    WhisperLogMelFeatures,
    batched_features_class,
    batched_features_for,
    register_batched_features,
    registry,
    supported_extractors,
)


@pytest.mark.parametrize(
    ("extractor", "implementation"),
    [
        (ASTFeatureExtractor(max_length=77), AstFbankFeatures),
        (WhisperFeatureExtractor(chunk_length=2), WhisperLogMelFeatures),
        (ClapFeatureExtractor(truncation="rand_trunc"), ClapLogMelFeatures),
    ],
)
def test_supported_extractors_get_their_batched_twin_with_their_settings(extractor, implementation):
    features = batched_features_for(extractor)
    assert type(features) is implementation and type(extractor) in supported_extractors()
    assert features.sampling_rate == extractor.sampling_rate
    expected_window = {
        AstFbankFeatures: 76 * 160 + 400,
        WhisperLogMelFeatures: 32000,
        ClapLogMelFeatures: 480000,
    }
    assert features.window_samples == expected_window[implementation]


def test_unsupported_extractor_gives_none_and_logs_once(caplog):
    class OddExtractor(Wav2Vec2FeatureExtractor):
        pass

    with caplog.at_level(logging.INFO, logger=registry.__name__):
        assert batched_features_for(OddExtractor()) is None
        assert batched_features_for(OddExtractor()) is None
    messages = [record.getMessage() for record in caplog.records if "OddExtractor" in record.getMessage()]
    assert len(messages) == 1 and "using the transformers extractor" in messages[0]


def test_a_new_family_plugs_in_with_one_call(monkeypatch):
    monkeypatch.setattr(registry, "_IMPLEMENTATIONS", dict(registry._IMPLEMENTATIONS))

    class PannsLikeExtractor(Wav2Vec2FeatureExtractor):
        pass

    class PannsLikeFeatures(AstFbankFeatures):
        @classmethod
        def from_extractor(cls, extractor):
            return AstFbankFeatures.from_extractor(ASTFeatureExtractor(sampling_rate=extractor.sampling_rate))

    register_batched_features(PannsLikeExtractor, PannsLikeFeatures)
    assert isinstance(batched_features_for(PannsLikeExtractor(sampling_rate=32000)), AstFbankFeatures)
    with pytest.raises(
        ValueError, match="PannsLikeExtractor already uses PannsLikeFeatures; pass exist_ok=True"
    ):
        register_batched_features(PannsLikeExtractor, AstFbankFeatures)
    register_batched_features(PannsLikeExtractor, AstFbankFeatures, exist_ok=True)
    with pytest.raises(TypeError, match="is not a BatchedFeatureExtractor subclass"):
        register_batched_features(PannsLikeExtractor, dict)


def test_each_class_declares_its_window_without_being_built(monkeypatch):
    """The registry's class of an extractor declares the window it reads (what ``extractor_window`` reports)."""

    def refuse(extractor):
        raise AssertionError("built")

    monkeypatch.setattr(
        WhisperLogMelFeatures, "from_extractor", classmethod(lambda cls, extractor: refuse(extractor))
    )
    whisper = WhisperFeatureExtractor(chunk_length=2)
    assert batched_features_class(whisper) is WhisperLogMelFeatures
    assert WhisperLogMelFeatures.clip_window(whisper) == ClipWindow(32000, True)
    assert ClapLogMelFeatures.clip_window(ClapFeatureExtractor(truncation="fusion")) == ClipWindow(
        480000, False
    )
    assert batched_features_class(Wav2Vec2FeatureExtractor()) is None
    assert BatchedFeatureExtractor.clip_window(Wav2Vec2FeatureExtractor()) == ClipWindow(None, False)
