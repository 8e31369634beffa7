"""Training: the trainer, its data collators (precomputed features or raw waveforms), streamed pairs, gradient
caching and callbacks."""

from .callbacks import KnowledgeBaseRefreshCallback
from .collator import AtrDataCollator, CaptionPairDataset
from .multilingual import MultilingualCollator, RandomLanguageDataset, group_caption_embeds
from .streaming import StreamingPairs
from .trainer import AtrTrainer, NonFiniteLossError
from .waveform_collator import WaveformCollator, featurize_waveforms

__all__ = [
    "AtrDataCollator",
    "AtrTrainer",
    "CaptionPairDataset",
    "KnowledgeBaseRefreshCallback",
    "MultilingualCollator",
    "NonFiniteLossError",
    "RandomLanguageDataset",
    "StreamingPairs",
    "WaveformCollator",
    "featurize_waveforms",
    "group_caption_embeds",
]
