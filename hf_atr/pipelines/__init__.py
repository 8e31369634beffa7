"""Search: the ``audio-text-retrieval`` pipeline and its persistent embedding index."""

from .index import EmbeddingIndex
from .index_storage import IndexFormatError
from .retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline

__all__ = ["AudioTextRetrievalPipeline", "EmbeddingIndex", "IndexFormatError", "register_pipeline"]
