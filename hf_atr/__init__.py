"""hf-atr: audio-text retrieval for the Hugging Face stack.

Importing the package registers the built-in objectives, the ``audio-text-retrieval`` model type
with ``AutoConfig``, ``AutoModel`` and ``AutoProcessor``, and the PANNs backbones (``model_type="panns"``)
with ``AutoConfig``, ``AutoModel``, ``AutoModelForAudioClassification`` and ``AutoFeatureExtractor``
(no ``trust_remote_code`` needed).
"""

from .configuration_atr import AtrConfig
from .modeling_atr import AtrDualEncoderModel, AtrOutput, AtrScoringHead, register_auto_classes
from .models.panns import register_panns
from .objectives import available_objectives, build_objective, register_objective
from .pipelines.retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline
from .processing_atr import AtrProcessor, register_auto_processor

register_auto_classes()
register_panns()
register_auto_processor()
register_pipeline()

__version__ = "0.1.0"

_LAZY_ATTRIBUTES = {
    "AtrTrainer": ".training",
    "AtrDataCollator": ".training",
    "retrieval_metrics": ".evaluation",
    "retrieval_metrics_from_embeddings": ".evaluation",
    "load_retrieval_metric": ".evaluation",
    "push_to_hub": ".hub",
    "ModelCardCallback": ".model_card",
    "write_model_card": ".model_card",
}


def __getattr__(name: str):
    # The trainer pulls in accelerate and transformers.Trainer (seconds of import time); load it on first use.
    if name in _LAZY_ATTRIBUTES:
        import importlib

        return getattr(importlib.import_module(_LAZY_ATTRIBUTES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AudioTextRetrievalPipeline",
    "AtrConfig",
    "AtrDataCollator",
    "AtrDualEncoderModel",
    "AtrOutput",
    "AtrProcessor",
    "AtrScoringHead",
    "AtrTrainer",
    "available_objectives",
    "ModelCardCallback",
    "build_objective",
    "load_retrieval_metric",
    "register_objective",
    "retrieval_metrics",
    "retrieval_metrics_from_embeddings",
    "push_to_hub",
    "write_model_card",
]
