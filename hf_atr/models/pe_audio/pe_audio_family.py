"""PE-Audio's family module (:mod:`hf_atr.models.checkpoint_families`): a ``PeAudioModel`` checkpoint read into the
parts of an hf-atr dual encoder, and its raw-waveform feature extractor and tokenizer."""

from __future__ import annotations

import os
from typing import Any

import transformers

from ..checkpoint_conversion import ConvertedCheckpoint
from .convert_pe_audio_checkpoint import (
    PE_AUDIO_DEFAULT_OBJECTIVE,
    PE_AUDIO_FIXED_CONFIG_FIELDS,
    PeAudioCheckpointError,
    atr_config_kwargs_from_pe_audio,
    convert_pe_audio_state_dict,
    is_frame_level,
    load_pe_audio_checkpoint,
    pe_audio_frame_rate,
)

FIXED_CONFIG_FIELDS = PE_AUDIO_FIXED_CONFIG_FIELDS


def load_model_parts(pe_name_or_path: str | os.PathLike, **kwargs: Any) -> ConvertedCheckpoint:
    """The towers, config fields and tensors of a ``PeAudioModel`` checkpoint (:func:`load_pe_audio_checkpoint`;
    keyword arguments go to its ``from_pretrained``). Its defaults: the sigmoid objective, and for a
    ``PeAudioFrameLevelModel`` checkpoint the encoder's frame rate (``audio_frame_rate``)."""
    pe_model = load_pe_audio_checkpoint(pe_name_or_path, **kwargs)
    defaults: dict[str, Any] = {"objective": dict(PE_AUDIO_DEFAULT_OBJECTIVE)}
    if is_frame_level(pe_model.config):
        defaults["audio_frame_rate"] = pe_audio_frame_rate(pe_name_or_path, pe_model.config)
    return ConvertedCheckpoint(
        config=atr_config_kwargs_from_pe_audio(pe_model.config),
        audio_model=pe_model.audio_encoder,
        text_model=pe_model.text_model,
        state_dict=pe_model.state_dict(),
        convert=convert_pe_audio_state_dict,
        defaults=defaults,
    )


def load_processor_parts(pe_name_or_path: str | os.PathLike, **kwargs: Any) -> tuple[Any, Any]:
    """The ``(PeAudioFeatureExtractor, tokenizer)`` of a PE-Audio checkpoint (keyword arguments go to both
    ``from_pretrained``). The extractor reflect-pads each 48-kHz clip to a multiple of its hop (1920 samples) and
    marks that padding valid; its ``padding_mask`` reaches the model as ``audio_attention_mask``.

    Raises:
        PeAudioCheckpointError: the checkpoint's extractor is not a ``PeAudioFeatureExtractor``.
    """
    # PeAudioProcessor.from_pretrained would read any extractor's settings into a PeAudioFeatureExtractor.
    feature_extractor = transformers.AutoFeatureExtractor.from_pretrained(pe_name_or_path, **kwargs)
    if not isinstance(feature_extractor, transformers.PeAudioFeatureExtractor):
        raise PeAudioCheckpointError(
            f"{pe_name_or_path} has a {type(feature_extractor).__name__}, not a PeAudioFeatureExtractor: it is "
            "not a PE-Audio checkpoint."
        )
    return feature_extractor, transformers.AutoTokenizer.from_pretrained(pe_name_or_path, **kwargs)


__all__ = ["load_model_parts", "load_processor_parts"]
