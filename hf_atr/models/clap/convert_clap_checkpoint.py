"""Map a transformers ``ClapModel`` checkpoint (LAION CLAP: HTS-AT + RoBERTa) onto an hf-atr dual encoder.

``laion/clap-htsat-unfused``, ``laion/clap-htsat-fused``, ``laion/larger_clap_general`` / ``_music`` /
``_music_and_speech`` are ``ClapModel`` checkpoints. Every tensor has one place in
:class:`~hf_atr.AtrDualEncoderModel` configured by :func:`atr_config_kwargs_from_clap`:

==========================================  ==========================================
``ClapModel``                                hf-atr
==========================================  ==========================================
``audio_model.*`` (``ClapAudioModel``)       ``audio_model.*``, ``audio_pooling="pooler"``
``text_model.*`` (``ClapTextModel``)         ``text_model.*``, ``text_pooling="pooler"``
``audio_projection.linear1/linear2.*``       ``audio_projection.linear1/linear2.*`` (``projection="mlp"``)
``text_projection.linear1/linear2.*``        ``text_projection.linear1/linear2.*``
``logit_scale_t``                            ``scoring_head.logit_scale`` (``logits_per_text``)
``logit_scale_a``                            ``scoring_head.audio_logit_scale`` (``logits_per_audio``)
==========================================  ==========================================

:func:`check_clap_loading_info` refuses a checkpoint that ``ClapModel.from_pretrained`` loaded with missing,
unexpected or mismatched keys (transformers 5 only warns, and fills missing weights with random values),
and :func:`convert_clap_state_dict` refuses any tensor without a place, naming the keys. This module
imports no hf-atr model code, so the dual encoder's ``from_clap`` can use it from below.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import transformers

from ..checkpoint_conversion import check_loading_info, convert_state_dict, renamed_key

if TYPE_CHECKING:
    from transformers import ClapConfig, ClapModel

CLAP_KEY_PREFIXES = {
    "audio_model.": "audio_model.",
    "text_model.": "text_model.",
    "audio_projection.": "audio_projection.",
    "text_projection.": "text_projection.",
}
CLAP_LOGIT_SCALE_KEYS = {
    "logit_scale_t": "scoring_head.logit_scale",
    "logit_scale_a": "scoring_head.audio_logit_scale",
}
CLAP_FIXED_CONFIG_FIELDS = (
    "audio_config",
    "text_config",
    "projection_dim",
    "audio_pooling",
    "text_pooling",
    "text_pooling_normalize",
    "projection",
    "projection_hidden_act",
    "separate_logit_scales",
    "logit_scale_init",
)
"""AtrConfig fields a CLAP checkpoint determines; ``from_clap`` refuses other values for them."""
FRESH_ATR_KEYS = ("scoring_head.metric_matrix",)
"""hf-atr parameters no CLAP tensor fills (Mahalanobis scoring chosen on top of CLAP): they keep their
initial values (the identity)."""


class ClapCheckpointError(ValueError):
    """A CLAP checkpoint whose tensors do not all land in the hf-atr model (or that loaded incompletely)."""


def atr_config_kwargs_from_clap(clap_config: ClapConfig) -> dict[str, Any]:
    """The :class:`~hf_atr.AtrConfig` fields that reproduce ``ClapModel`` (values of :data:`CLAP_FIXED_CONFIG_FIELDS`)."""
    return {
        "audio_config": clap_config.audio_config,
        "text_config": clap_config.text_config,
        "projection_dim": clap_config.projection_dim,
        "audio_pooling": "pooler",
        "text_pooling": "pooler",
        "text_pooling_normalize": False,
        "projection": "mlp",
        "projection_hidden_act": clap_config.projection_hidden_act,
        "separate_logit_scales": True,
        "logit_scale_init": math.log(clap_config.logit_scale_init_value),
    }


def check_clap_loading_info(loading_info: Mapping[str, Iterable[Any]], source: str) -> None:
    """Raise :class:`ClapCheckpointError` unless ``ClapModel.from_pretrained`` found every weight.

    Args:
        loading_info: the second value of ``from_pretrained(..., output_loading_info=True)``.
        source: the checkpoint's name, for the message.

    Buffers of :data:`~hf_atr.models.checkpoint_conversion.DERIVED_BUFFER_SUFFIXES` missing from the file are
    logged, not refused.
    """
    check_loading_info(loading_info, source, "ClapModel", ClapCheckpointError)


def load_clap_checkpoint(clap_name_or_path: str | os.PathLike, **kwargs: Any) -> ClapModel:
    """``ClapModel.from_pretrained`` that raises :class:`ClapCheckpointError` instead of filling missing weights.

    Keyword arguments go to ``from_pretrained`` (``revision``, ``cache_dir``, ``dtype``, ...). Shape mismatches are
    collected (``ignore_mismatched_sizes``) so that the error names them, then refused like missing weights.
    """
    # Through transformers' lazy module: CLAP's modeling code loads when a checkpoint is converted, not on import.
    clap, loading_info = transformers.ClapModel.from_pretrained(
        clap_name_or_path, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
    )
    check_clap_loading_info(loading_info, str(clap_name_or_path))
    return clap


def clap_to_atr_key(clap_key: str) -> str | None:
    """The hf-atr key of a ``ClapModel`` state-dict key, or ``None`` when it has no place."""
    return renamed_key(clap_key, CLAP_LOGIT_SCALE_KEYS, CLAP_KEY_PREFIXES)


def convert_clap_state_dict(
    clap_state: Mapping[str, torch.Tensor],
    atr_shapes: Mapping[str, torch.Size | tuple[int, ...]],
    source: str = "the CLAP checkpoint",
) -> dict[str, torch.Tensor]:
    """``ClapModel`` tensors under their hf-atr keys, every key accounted for.

    Args:
        clap_state: ``ClapModel.state_dict()``.
        atr_shapes: ``{key: shape}`` of the hf-atr model's state dict (built with
            :func:`atr_config_kwargs_from_clap`).

    Raises:
        ClapCheckpointError: naming CLAP keys without a place, hf-atr keys no CLAP tensor fills (other than
            :data:`FRESH_ATR_KEYS`), and shape mismatches.
    """
    return convert_state_dict(
        clap_state,
        atr_shapes,
        clap_to_atr_key,
        family="CLAP",
        fresh_keys=FRESH_ATR_KEYS,
        source=source,
        error_class=ClapCheckpointError,
    )


__all__ = [
    "CLAP_FIXED_CONFIG_FIELDS",
    "ClapCheckpointError",
    "atr_config_kwargs_from_clap",
    "check_clap_loading_info",
    "clap_to_atr_key",
    "convert_clap_state_dict",
    "load_clap_checkpoint",
]
