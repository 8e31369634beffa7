"""Training: the trainer, its data collator and callbacks."""

from .callbacks import KnowledgeBaseRefreshCallback
from .collator import AtrDataCollator, CaptionPairDataset
from .multilingual import MultilingualCollator, RandomLanguageDataset, group_caption_embeds
from .trainer import AtrTrainer, NonFiniteLossError

__all__ = [
    "AtrDataCollator",
    "AtrTrainer",
    "CaptionPairDataset",
    "KnowledgeBaseRefreshCallback",
    "MultilingualCollator",
    "NonFiniteLossError",
    "RandomLanguageDataset",
    "group_caption_embeds",
]
