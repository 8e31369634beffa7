"""What the CLAP and PE-Audio conversions share: renaming a checkpoint's keys."""

from __future__ import annotations

from hf_atr.models.checkpoint_conversion import renamed_key
from hf_atr.models.clap.convert_clap_checkpoint import clap_to_atr_key
from hf_atr.models.pe_audio.convert_pe_audio_checkpoint import pe_audio_to_atr_key

EXACT = {"logit_scale": "scoring_head.logit_scale"}
PREFIXES = {"audio_encoder.": "audio_model.", "audio_head.": "audio_projection.", "audio_": "other."}


def test_exact_names_first_then_the_first_matching_prefix_else_no_place():
    assert renamed_key("logit_scale", EXACT, PREFIXES) == "scoring_head.logit_scale"
    assert renamed_key("audio_encoder.layers.0.weight", EXACT, PREFIXES) == "audio_model.layers.0.weight"
    assert renamed_key("audio_head.proj.weight", EXACT, PREFIXES) == "audio_projection.proj.weight"
    assert renamed_key("audio_other.weight", EXACT, PREFIXES) == "other.other.weight"
    assert renamed_key("logit_scale_a", EXACT, PREFIXES) is None  # exact names are not prefixes
    assert renamed_key("text_model.embeddings.weight", EXACT, PREFIXES) is None


def test_the_converters_keys():
    assert clap_to_atr_key("logit_scale_a") == "scoring_head.audio_logit_scale"
    assert pe_audio_to_atr_key("text_audio_logit_bias") == "scoring_head.logit_bias"
    assert pe_audio_to_atr_key("text_audio_head.proj.weight") == "text_projection.proj.weight"
    assert pe_audio_to_atr_key("audio_encoder.norm.weight") == "audio_model.norm.weight"
    assert pe_audio_to_atr_key("video_encoder.norm.weight") is None
