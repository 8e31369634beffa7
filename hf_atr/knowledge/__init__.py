"""ASK's knowledge base: paired embeddings, searched exactly (torch or faiss), and k-means prototype pairs."""

from ..encoding import encode_pairs
from .knowledge_base import KnowledgeBase, prototype_pairs, representation_drift

__all__ = ["KnowledgeBase", "encode_pairs", "prototype_pairs", "representation_drift"]
