"""hf-atr: audio-text retrieval for the Hugging Face stack.

Importing the package registers the built-in objectives and the ``audio-text-retrieval`` model type
with ``AutoConfig``, ``AutoModel`` and ``AutoProcessor`` (no ``trust_remote_code`` needed).
"""

from .configuration_atr import AtrConfig
from .modeling_atr import AtrDualEncoderModel, AtrOutput, AtrScoringHead, register_auto_classes
from .objectives import available_objectives, build_objective, register_objective
from .processing_atr import AtrProcessor, register_auto_processor
from .training import AtrDataCollator, AtrTrainer

register_auto_classes()
register_auto_processor()

__version__ = "0.1.0"

__all__ = [
    "AtrConfig",
    "AtrDataCollator",
    "AtrDualEncoderModel",
    "AtrOutput",
    "AtrProcessor",
    "AtrScoringHead",
    "AtrTrainer",
    "available_objectives",
    "build_objective",
    "register_objective",
]
