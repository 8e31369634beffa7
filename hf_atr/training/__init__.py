"""Training: the trainer, its data collator and callbacks."""

from .collator import AtrDataCollator
from .trainer import AtrTrainer, NonFiniteLossError

__all__ = ["AtrDataCollator", "AtrTrainer", "NonFiniteLossError"]
