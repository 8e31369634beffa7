"""The run of ``hf-atr index``: :class:`IndexingRun` adds a folder's files, a saved dataset and a caption list.

Each leaves out what the index already holds (``--append`` resumes from the saved index), and the run counts what it
did; the indexing itself is :func:`~hf_atr.pipelines.indexing.corpus.index_corpus`, the same that ``pipe.index`` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing.corpus import index_corpus, relative_id
from hf_atr.pipelines.indexing.filling import IndexingOptions
from hf_atr.pipelines.persistence import holds_index


def indexed_files(pipe: Any) -> int:
    """How many files (distinct ids) ``pipe``'s audio index holds."""
    return 0 if pipe.audio_index is None else len(set(pipe.audio_index.ids))


class IndexingRun:
    """``hf-atr index``: add the files of a folder, the rows of a saved dataset and a caption list to ``pipe``'s
    indexes, leaving out what they already hold, saving to ``options.save_to`` every ``options.save_every`` files.

    The run starts from the index saved in ``options.save_to`` when ``options.append`` (and it holds one), else
    from empty indexes: never from an index the pipeline loaded with its model.

    Attributes:
        files_before / captions_before: what the indexes held when the run started.
        attempted: the audio this run tried to index (its files' paths, or the names of the dataset rows skipped).
        already: the files (or rows) left out because the index holds them.
        audio_given: whether any audio was asked for.

    Raises:
        IndexFormatError: the index in ``options.save_to`` is corrupt or was built by another model.
    """

    def __init__(self, pipe: Any, options: IndexingOptions) -> None:
        self.pipe = pipe
        self.options = options
        pipe.audio_index = pipe.text_index = None
        pipe.skipped = []
        if options.append and options.save_to is not None and holds_index(options.save_to):
            pipe.load_index(options.save_to)
        self.files_before = indexed_files(pipe)
        self.captions_before = 0 if pipe.text_index is None else len(pipe.text_index)
        self.attempted: set[str] = set()
        self.already = 0
        self.audio_given = False

    def add_files(self, files: Sequence[Path], audio_dir: Path) -> None:
        """Index ``files``, ids relative to the index's root (``audio_dir`` for a new index)."""
        index = self.pipe.audio_index
        root = Path(index.root) if index is not None and index.root else audio_dir.resolve()
        ids = [relative_id(path, root) for path in files]
        indexed = set(index.ids) if index is not None else set()
        todo = [(str(path.resolve()), item_id) for path, item_id in zip(files, ids) if item_id not in indexed]
        self.audio_given = True
        self.already += len(files) - len(todo)
        if not todo:
            return
        self.attempted.update(path for path, _ in todo)
        index_corpus(
            self.pipe,
            [path for path, _ in todo],
            ids=[item_id for _, item_id in todo],
            root=root,
            options=self._options(self.pipe.audio_index),
        )

    def add_dataset(self, dataset: Any) -> None:
        """Index a shared-schema dataset's audio and captions, leaving out the rows whose ``audio_id`` is indexed."""
        self.audio_given = True
        if self.pipe.audio_index is not None and "audio_id" in dataset.column_names:
            indexed = set(self.pipe.audio_index.ids)
            keep = [row for row, audio_id in enumerate(dataset["audio_id"]) if str(audio_id) not in indexed]
            self.already += len(dataset) - len(keep)
            dataset = dataset.select(keep)
        if len(dataset) == 0:
            return
        index_corpus(self.pipe, dataset, options=self._options(self.pipe.audio_index))
        self.attempted.update(item.name for item in self.pipe.skipped)

    def add_captions(self, ids: Sequence[str], captions: Sequence[str]) -> None:
        """Index the captions whose id the caption index does not hold yet."""
        indexed = set(self.pipe.text_index.ids) if self.pipe.text_index is not None else set()
        new = [(item_id, caption) for item_id, caption in zip(ids, captions) if item_id not in indexed]
        if new:
            index_corpus(
                self.pipe,
                [caption for _, caption in new],
                ids=[item_id for item_id, _ in new],
                options=self._options(self.pipe.text_index),
            )

    def _options(self, current: EmbeddingIndex | None) -> IndexingOptions:
        return replace(self.options, append=current is not None)


__all__ = ["IndexingRun", "indexed_files"]
