"""PANNs CNN14 / ResNet38 audio backbones (Kong et al., 2020) for the transformers Auto classes.

Importing this package is cheap: the configuration, model and feature extractor modules load on first
use of their names. ``import hf_atr`` arranges their registration with ``AutoConfig``, ``AutoModel``,
``AutoModelForAudioClassification`` and ``AutoFeatureExtractor`` as soon as transformers loads those
(:mod:`hf_atr.auto_registration`); :func:`register_panns` does all of it at once.
"""

from __future__ import annotations

from ...lazy import lazy_attributes

_LAZY_NAMES = {
    "PannsConfig": ".configuration_panns",
    "PannsFeatureExtractor": ".feature_extraction_panns",
    "PannsModel": ".modeling_panns",
    "PannsForAudioClassification": ".modeling_panns",
    "PannsPreTrainedModel": ".modeling_panns",
    "PannsCheckpointError": ".convert_panns_checkpoint",
    "convert_panns_checkpoint": ".convert_panns_checkpoint",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)


def register_panns() -> None:
    """Register ``model_type="panns"`` with ``AutoConfig``, ``AutoModel``,
    ``AutoModelForAudioClassification`` and ``AutoFeatureExtractor`` now (no ``trust_remote_code``)."""
    from .configuration_panns import register_auto_config
    from .feature_extraction_panns import register_auto_feature_extractor
    from .modeling_panns import register_auto_models

    register_auto_config()
    register_auto_models()
    register_auto_feature_extractor()


__all__ = ["register_panns", *_LAZY_NAMES]
