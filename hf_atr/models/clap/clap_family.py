"""CLAP's family module (:mod:`hf_atr.models.checkpoint_families`): a ``ClapModel`` checkpoint read into the parts of
an hf-atr dual encoder, and its ``ClapProcessor``'s feature extractor and tokenizer."""

from __future__ import annotations

import os
from typing import Any

import transformers

from ..checkpoint_conversion import ConvertedCheckpoint
from .convert_clap_checkpoint import (
    CLAP_FIXED_CONFIG_FIELDS,
    ClapCheckpointError,
    atr_config_kwargs_from_clap,
    convert_clap_state_dict,
    load_clap_checkpoint,
)

FIXED_CONFIG_FIELDS = CLAP_FIXED_CONFIG_FIELDS


def load_model_parts(clap_name_or_path: str | os.PathLike, **kwargs: Any) -> ConvertedCheckpoint:
    """The towers, config fields and tensors of a ``ClapModel`` checkpoint (:func:`load_clap_checkpoint`; keyword
    arguments go to its ``from_pretrained``)."""
    clap = load_clap_checkpoint(clap_name_or_path, **kwargs)
    return ConvertedCheckpoint(
        config=atr_config_kwargs_from_clap(clap.config),
        audio_model=clap.audio_model,
        text_model=clap.text_model,
        state_dict=clap.state_dict(),
        convert=convert_clap_state_dict,
    )


def load_processor_parts(clap_name_or_path: str | os.PathLike, **kwargs: Any) -> tuple[Any, Any]:
    """The ``(ClapFeatureExtractor, tokenizer)`` of a CLAP checkpoint (``ClapProcessor.from_pretrained``; keyword
    arguments go to it). The extractor's ``is_longer`` output reaches the model (fused checkpoints use it).

    Raises:
        ClapCheckpointError: the checkpoint's extractor is not a ``ClapFeatureExtractor``.
    """
    clap_processor = transformers.ClapProcessor.from_pretrained(clap_name_or_path, **kwargs)
    if not isinstance(clap_processor.feature_extractor, transformers.ClapFeatureExtractor):
        raise ClapCheckpointError(
            f"{clap_name_or_path} has a {type(clap_processor.feature_extractor).__name__}, not a "
            "ClapFeatureExtractor: it is not a CLAP checkpoint."
        )
    return clap_processor.feature_extractor, clap_processor.tokenizer


__all__ = ["load_model_parts", "load_processor_parts"]
