"""Batched log-mel features in torch, on the training device, equal to transformers' feature extractors.

``batched_features_for(extractor)`` returns the :class:`BatchedFeatureExtractor` twin of a transformers
extractor (AST, Whisper, CLAP, hf-atr's PANNs, PE-Audio's raw waveforms; others register with :func:`register_batched_features`), or ``None``. dB-scale families (CLAP, PANNs)
derive from :class:`DecibelMelFeatures`.
Light: imports torch, NumPy and transformers' extractor classes only.
"""

from .ast_fbank import AstFbankFeatures
from .base import BatchedFeatureExtractor, ClipWindow, RandomSource
from .clap_log_mel import ClapLogMelFeatures
from .decibel_mel import DecibelMelFeatures
from .panns_log_mel import PannsLogMelFeatures
from .pe_audio_waveform import PeAudioWaveformFeatures
from .registry import (
    batched_features_class,
    batched_features_for,
    register_batched_features,
    supported_extractors,
)
from .spectrogram import pad_waveforms
from .whisper_log_mel import WhisperLogMelFeatures

__all__ = [
    "AstFbankFeatures",
    "BatchedFeatureExtractor",
    "ClapLogMelFeatures",
    "ClipWindow",
    "DecibelMelFeatures",
    "PannsLogMelFeatures",
    "PeAudioWaveformFeatures",
    "RandomSource",
    "WhisperLogMelFeatures",
    "batched_features_class",
    "batched_features_for",
    "pad_waveforms",
    "register_batched_features",
    "supported_extractors",
]
