"""Map a transformers ``PeAudioModel`` checkpoint (Meta's Perception Encoder audio-text, ``facebook/pe-av-*``) onto
an hf-atr dual encoder.

Every tensor has one place in :class:`~hf_atr.AtrDualEncoderModel` configured by
:func:`atr_config_kwargs_from_pe_audio`:

=========================================  ==============================================================
``PeAudioModel``                           hf-atr
=========================================  ==============================================================
``audio_encoder.*`` (``PeAudioEncoder``)   ``audio_model.*``, ``audio_pooling="pooler"`` (its class token)
``text_model.*`` (ModernBERT)              ``text_model.*``, ``text_pooling="cls"`` (first token of the last
                                           hidden state, which equals PE's ``hidden_states[-1][:, 0]``)
``audio_head.layer_norm/proj.*``           ``audio_projection.layer_norm/proj.*`` (``projection_layer_norm``)
``text_audio_head.layer_norm/proj.*``      ``text_projection.layer_norm/proj.*``
``text_audio_logit_scale`` ``(1,)``        ``scoring_head.logit_scale`` ``()`` (``logit_scale_form="raw"``)
``text_audio_logit_bias`` ``(1,)``         ``scoring_head.logit_bias`` ``()`` (``logit_bias=True``)
=========================================  ==============================================================

PE-Audio scores ``audio · text × scale + bias`` on embeddings it does not normalise: ``scoring="dot"``. This module
imports no hf-atr model code, so the dual encoder's ``from_pe_audio`` can use it from below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import transformers

from ...lazy import get_logger
from ..checkpoint_conversion import check_loading_info, convert_state_dict, renamed_key

if TYPE_CHECKING:
    from transformers import PeAudioConfig, PeAudioModel

logger = get_logger(__name__)

PE_AUDIO_KEY_PREFIXES = {
    "audio_encoder.": "audio_model.",
    "text_model.": "text_model.",
    "audio_head.": "audio_projection.",
    "text_audio_head.": "text_projection.",
}
PE_AUDIO_SCALAR_KEYS = {
    "text_audio_logit_scale": "scoring_head.logit_scale",
    "text_audio_logit_bias": "scoring_head.logit_bias",
}
"""PE-Audio's ``(1,)`` logit parameters and the 0-dim hf-atr parameters they become."""
PE_AUDIO_FIXED_CONFIG_FIELDS = (
    "audio_config",
    "text_config",
    "projection_dim",
    "audio_pooling",
    "text_pooling",
    "text_pooling_normalize",
    "projection",
    "projection_layer_norm",
    "separate_logit_scales",
    "scoring",
    "logit_scale_form",
    "logit_bias",
)
"""AtrConfig fields a PE-Audio checkpoint determines; ``from_pe_audio`` refuses other values for them."""
HUB_OPTIONS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
"""``from_pretrained`` options that also say where the checkpoint's ``config.json`` is."""
PE_AUDIO_DEFAULT_OBJECTIVE = {"name": "sigmoid"}
"""The objective PE-Audio was trained with (SigLIP's), the default of a converted model."""


class PeAudioCheckpointError(ValueError):
    """A PE-Audio checkpoint whose tensors do not all land in the hf-atr model (or that loaded incompletely)."""


def atr_config_kwargs_from_pe_audio(pe_config: PeAudioConfig) -> dict[str, Any]:
    """The :class:`~hf_atr.AtrConfig` fields that reproduce ``PeAudioModel`` (:data:`PE_AUDIO_FIXED_CONFIG_FIELDS`)."""
    return {
        "audio_config": pe_config.audio_config,
        "text_config": pe_config.text_config,
        "projection_dim": pe_config.text_config.hidden_size,
        "audio_pooling": "pooler",
        "text_pooling": "cls",
        "text_pooling_normalize": False,
        "projection": "linear",
        "projection_layer_norm": True,
        "separate_logit_scales": False,
        "scoring": "dot",
        "logit_scale_form": "raw",
        "logit_bias": True,
    }


PE_AUDIO_FRAME_LEVEL_ARCHITECTURE = "PeAudioFrameLevelModel"
"""The ``architectures`` entry of a frame-level checkpoint: the same weights, trained to score text per frame."""


def is_frame_level(pe_config: PeAudioConfig) -> bool:
    """Whether the checkpoint was saved as a ``PeAudioFrameLevelModel`` (its ``config.json`` says so)."""
    return PE_AUDIO_FRAME_LEVEL_ARCHITECTURE in (pe_config.architectures or [])


def pe_audio_frame_rate(pe_name_or_path: str | os.PathLike, pe_config: PeAudioConfig, **kwargs: Any) -> float:
    """Frames per second of the checkpoint's audio encoder: its extractor's rate over the encoder's hop (the DAC
    strides' product; 48,000 / 1920 = 25 for ``facebook/pe-av-*``). The rate is read from the checkpoint's
    ``preprocessor_config.json`` (the model config's DAC rate is not the waveforms').

    Raises:
        PeAudioCheckpointError: the extractor's hop is not the encoder's (its frames would not be the model's).
    """
    extractor = transformers.PeAudioFeatureExtractor.from_pretrained(pe_name_or_path, **kwargs)
    hop = int(pe_config.audio_config.dac_config.hop_length)
    if int(extractor.hop_length) != hop:
        raise PeAudioCheckpointError(
            f"{pe_name_or_path}: the feature extractor pads to multiples of {extractor.hop_length} samples but the "
            f"audio encoder reads one frame per {hop}; frame times would be wrong."
        )
    return extractor.sampling_rate / hop


def load_pe_audio_checkpoint(pe_name_or_path: str | os.PathLike, **kwargs: Any) -> PeAudioModel:
    """``PeAudioModel.from_pretrained`` that raises :class:`PeAudioCheckpointError` instead of filling missing weights.

    Keyword arguments go to ``from_pretrained`` (``revision``, ``cache_dir``, ``dtype``, ...). Shape mismatches are
    collected (``ignore_mismatched_sizes``) so that the error names them, then refused like missing weights.
    """
    hub_options = {key: kwargs[key] for key in HUB_OPTIONS if key in kwargs}
    config_dict, _ = transformers.PeAudioConfig.get_config_dict(pe_name_or_path, **hub_options)
    if config_dict.get("model_type") != transformers.PeAudioConfig.model_type:
        raise PeAudioCheckpointError(
            f"{pe_name_or_path} holds a {config_dict.get('model_type')!r} model, not a PE-Audio checkpoint "
            f"(model_type {transformers.PeAudioConfig.model_type!r}, as facebook/pe-av-small, -base and -large)."
        )
    # Through transformers' lazy module: PE-Audio's modeling code loads when a checkpoint is converted.
    pe_model, loading_info = transformers.PeAudioModel.from_pretrained(
        pe_name_or_path, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
    )
    check_loading_info(loading_info, str(pe_name_or_path), "PeAudioModel", PeAudioCheckpointError)
    warn_if_logit_scale_not_positive(pe_model.text_audio_logit_scale.item(), str(pe_name_or_path))
    return pe_model


def warn_if_logit_scale_not_positive(scale: float, source: str) -> None:
    """Warn when a checkpoint's raw ``text_audio_logit_scale`` is 0 or less (0 is PE-Audio's initialisation).

    Logits ``scale · a·t + bias`` are then all equal to the bias (0) or rank pairs opposite to their similarity
    (< 0), so the pipeline's ``classify`` (a softmax over logits) would be uniform or inverted. Retrieval, the
    evaluators and the index rank by similarity and are unaffected, and the ``sigmoid`` objective learns the scale
    from there, so the checkpoint is converted, not refused.
    """
    if scale > 0:
        return
    effect = "are all equal to the bias" if scale == 0 else "rank every pair opposite to its similarity"
    logger.warning(
        f"{source}: text_audio_logit_scale is {scale:g} (0 at PE-Audio's initialisation; this checkpoint's scale is "
        f"not positive), so the converted model's logits {effect} and zero-shot classification through them "
        "(pipeline classify) is meaningless until training makes the scale positive. Retrieval, evaluation and the "
        "index rank by similarity and are unaffected; the sigmoid objective learns the scale."
    )


def pe_audio_to_atr_key(pe_key: str) -> str | None:
    """The hf-atr key of a ``PeAudioModel`` state-dict key, or ``None`` when it has no place."""
    return renamed_key(pe_key, PE_AUDIO_SCALAR_KEYS, PE_AUDIO_KEY_PREFIXES)


def convert_pe_audio_state_dict(
    pe_state: Mapping[str, torch.Tensor],
    atr_shapes: Mapping[str, torch.Size | tuple[int, ...]],
    source: str = "the PE-Audio checkpoint",
) -> dict[str, torch.Tensor]:
    """``PeAudioModel`` tensors under their hf-atr keys, every key accounted for; the ``(1,)`` scale and bias as
    the head's 0-dim parameters.

    Raises:
        PeAudioCheckpointError: naming PE-Audio keys without a place, hf-atr keys no PE-Audio tensor fills, and
            shape mismatches.
    """
    scalars_as_stored = {
        key: tensor.reshape(()) if key in PE_AUDIO_SCALAR_KEYS and tensor.numel() == 1 else tensor
        for key, tensor in pe_state.items()
    }
    return convert_state_dict(
        scalars_as_stored,
        atr_shapes,
        pe_audio_to_atr_key,
        family="PE-Audio",
        fresh_keys=(),
        source=source,
        error_class=PeAudioCheckpointError,
    )


__all__ = [
    "PE_AUDIO_DEFAULT_OBJECTIVE",
    "PE_AUDIO_FRAME_LEVEL_ARCHITECTURE",
    "PE_AUDIO_FIXED_CONFIG_FIELDS",
    "PeAudioCheckpointError",
    "atr_config_kwargs_from_pe_audio",
    "convert_pe_audio_state_dict",
    "is_frame_level",
    "load_pe_audio_checkpoint",
    "pe_audio_frame_rate",
    "pe_audio_to_atr_key",
    "warn_if_logit_scale_not_positive",
]
