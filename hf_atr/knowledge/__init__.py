"""ASK's knowledge base: paired embeddings in faiss indexes and k-means prototype pairs."""

from .knowledge_base import KnowledgeBase, encode_pairs, prototype_pairs, representation_drift

__all__ = ["KnowledgeBase", "encode_pairs", "prototype_pairs", "representation_drift"]
