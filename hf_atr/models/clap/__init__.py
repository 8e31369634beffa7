"""Conversion of transformers ``ClapModel`` checkpoints (LAION CLAP) into hf-atr dual encoders.

Used by :meth:`hf_atr.AtrDualEncoderModel.from_clap` and :meth:`hf_atr.AtrProcessor.from_clap` through its family
module, :mod:`~hf_atr.models.clap.clap_family`; CLAP's towers themselves are transformers' ``ClapAudioModel`` /
``ClapTextModel`` (see :mod:`hf_atr.towers`).
"""

from __future__ import annotations

from .convert_clap_checkpoint import (
    ClapCheckpointError,
    atr_config_kwargs_from_clap,
    check_clap_loading_info,
    convert_clap_state_dict,
    load_clap_checkpoint,
)

__all__ = [
    "ClapCheckpointError",
    "atr_config_kwargs_from_clap",
    "check_clap_loading_info",
    "convert_clap_state_dict",
    "load_clap_checkpoint",
]
