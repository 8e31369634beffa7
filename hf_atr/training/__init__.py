"""Training: the trainer, its data collators (precomputed features or raw waveforms) and their device side,
streamed pairs, gradient caching, callbacks, and the training views objectives declare."""

from .callbacks import KnowledgeBaseRefreshCallback
from .collator import AtrDataCollator, CaptionPairDataset
from .device_features import featurize_waveforms
from .multilingual import MultilingualCollator, RandomLanguageDataset
from .non_finite import NonFiniteLossError
from .objective_setup import (
    ObjectiveTrainingSetup,
    TrainingViewInputs,
    objective_training_setup,
    register_training_view,
    training_views,
)
from .streaming import StreamingPairs
from .trainer import AtrTrainer
from .waveform_collator import WaveformCollator

__all__ = [
    "AtrDataCollator",
    "AtrTrainer",
    "CaptionPairDataset",
    "KnowledgeBaseRefreshCallback",
    "MultilingualCollator",
    "NonFiniteLossError",
    "ObjectiveTrainingSetup",
    "RandomLanguageDataset",
    "StreamingPairs",
    "TrainingViewInputs",
    "WaveformCollator",
    "featurize_waveforms",
    "objective_training_setup",
    "register_training_view",
    "training_views",
]
