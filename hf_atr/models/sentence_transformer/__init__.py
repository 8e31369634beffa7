"""sentence-transformers text encoders as hf-atr text towers: read a model directory's modules (JSON only)."""

from __future__ import annotations

from .sentence_transformer_layout import (
    SentenceTransformerFormatError,
    SentenceTransformerLayout,
    read_sentence_transformer,
)

__all__ = ["SentenceTransformerFormatError", "SentenceTransformerLayout", "read_sentence_transformer"]
