"""Backbones hf-atr adds to the transformers family (PANNs, registered with the Auto classes) and converters
from other checkpoint formats into hf-atr models (CLAP, PE-Audio, sentence-transformers); the checkpoint families,
one row each, in :mod:`hf_atr.models.checkpoint_families`."""
