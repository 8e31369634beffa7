"""Backbones hf-atr adds to the transformers family (PANNs, registered with the Auto classes) and converters
from other checkpoint formats into hf-atr models (CLAP, sentence-transformers)."""
