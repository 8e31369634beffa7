"""Filling a retrieval pipeline's indexes: the one owner of indexing, behind ``pipe.index`` and ``hf-atr index``.

- :mod:`.corpus`: what a corpus becomes (:func:`index_corpus`, which :meth:`AudioTextRetrievalPipeline.index
  <hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.index>` calls): captions, clips or a dataset, into
  the caption or the audio index.
- :mod:`.filling`: how the items are encoded, step by step and shared among processes, with ``pipe.skipped`` kept up
  to date (:class:`IndexingOptions`).
- :mod:`.model_index`: the index of the pipeline's model (:func:`new_index`, :func:`index_vectors`,
  :func:`check_appendable`).
- :mod:`.run`: :class:`IndexingRun`, what ``hf-atr index`` runs: the files of a folder, a saved dataset and a
  caption list, each leaving out what the index already holds (``--append`` resumes), and the counts of what it did.
"""

from .corpus import index_corpus, relative_id
from .filling import APPLEDOUBLE_REASON, CAPTION_BATCH_FACTOR, CLIPS_PER_STEP, IndexingOptions
from .model_index import check_appendable, index_vectors, new_index
from .run import IndexingRun, indexed_files

__all__ = [
    "APPLEDOUBLE_REASON",
    "CAPTION_BATCH_FACTOR",
    "CLIPS_PER_STEP",
    "IndexingOptions",
    "IndexingRun",
    "check_appendable",
    "index_corpus",
    "index_vectors",
    "indexed_files",
    "new_index",
    "relative_id",
]
