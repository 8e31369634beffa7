"""Training: the trainer, its data collator and callbacks."""

from .collator import AtrDataCollator, CaptionPairDataset
from .multilingual import MultilingualCollator, RandomLanguageDataset, group_caption_embeds
from .trainer import AtrTrainer, NonFiniteLossError

__all__ = [
    "AtrDataCollator",
    "AtrTrainer",
    "CaptionPairDataset",
    "MultilingualCollator",
    "NonFiniteLossError",
    "RandomLanguageDataset",
    "group_caption_embeds",
]
