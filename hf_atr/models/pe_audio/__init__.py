"""Conversion of transformers ``PeAudioModel`` checkpoints (Perception Encoder audio-text) into hf-atr dual encoders.

Used by :meth:`hf_atr.AtrDualEncoderModel.from_pe_audio` and :meth:`hf_atr.AtrProcessor.from_pe_audio` through its
family module, :mod:`~hf_atr.models.pe_audio.pe_audio_family`; the towers themselves are transformers'
``PeAudioEncoder`` and ModernBERT.
"""

from __future__ import annotations

from .convert_pe_audio_checkpoint import (
    PE_AUDIO_DEFAULT_OBJECTIVE,
    PE_AUDIO_FIXED_CONFIG_FIELDS,
    PeAudioCheckpointError,
    atr_config_kwargs_from_pe_audio,
    convert_pe_audio_state_dict,
    load_pe_audio_checkpoint,
)

__all__ = [
    "PE_AUDIO_DEFAULT_OBJECTIVE",
    "PE_AUDIO_FIXED_CONFIG_FIELDS",
    "PeAudioCheckpointError",
    "atr_config_kwargs_from_pe_audio",
    "convert_pe_audio_state_dict",
    "load_pe_audio_checkpoint",
]
