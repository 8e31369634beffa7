"""PANNs CNN14 / ResNet38 audio backbones (Kong et al., 2020) for the transformers Auto classes.

Importing this package is cheap: the configuration, model and feature extractor modules load on first
use of their names, and :func:`register_panns` imports them when it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY_ATTRIBUTES = {
    "PannsConfig": ".configuration_panns",
    "PannsFeatureExtractor": ".feature_extraction_panns",
    "PannsModel": ".modeling_panns",
    "PannsForAudioClassification": ".modeling_panns",
    "PannsPreTrainedModel": ".modeling_panns",
    "PannsCheckpointError": ".convert_panns_checkpoint",
    "convert_panns_checkpoint": ".convert_panns_checkpoint",
}


def register_panns() -> None:
    """Register ``model_type="panns"`` with ``AutoConfig``, ``AutoModel``,
    ``AutoModelForAudioClassification`` and ``AutoFeatureExtractor`` (no ``trust_remote_code``)."""
    from transformers import AutoConfig, AutoFeatureExtractor, AutoModel, AutoModelForAudioClassification

    from .configuration_panns import PannsConfig
    from .feature_extraction_panns import PannsFeatureExtractor
    from .modeling_panns import PannsForAudioClassification, PannsModel

    AutoConfig.register(PannsConfig.model_type, PannsConfig, exist_ok=True)
    AutoModel.register(PannsConfig, PannsModel, exist_ok=True)
    AutoModelForAudioClassification.register(PannsConfig, PannsForAudioClassification, exist_ok=True)
    AutoFeatureExtractor.register(PannsConfig, PannsFeatureExtractor, exist_ok=True)


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRIBUTES:
        return getattr(importlib.import_module(_LAZY_ATTRIBUTES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["register_panns", *_LAZY_ATTRIBUTES]
