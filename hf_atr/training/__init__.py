"""Training: the trainer, its data collator and callbacks."""

from .collator import AtrDataCollator, CaptionPairDataset
from .trainer import AtrTrainer, NonFiniteLossError

__all__ = ["AtrDataCollator", "CaptionPairDataset", "AtrTrainer", "NonFiniteLossError"]
