"""The retrieval pipeline's index methods: ``pipe.index``, ``pipe.save_index`` and ``pipe.load_index``.

:class:`IndexMethods` is mixed into :class:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline`, where
users call these methods. They are thin calls: :mod:`.indexing` encodes a corpus into the indexes, and
:mod:`.persistence` writes and reads them (safetensors + JSON, and ``skipped.tsv``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing import IndexingOptions, index_corpus
from hf_atr.pipelines.persistence import default_index_dir, load_indexes, save_indexes


class IndexMethods:
    """``index``, ``save_index`` and ``load_index`` of the retrieval pipeline: they read and set its ``model``,
    ``audio_index``, ``text_index`` and ``skipped``."""

    def index(
        self,
        corpus: Any,
        *,
        ids: Sequence[str] | None = None,
        batch_size: int = 32,
        index_captions: bool = True,
        show_progress: bool = True,
        pool: bool = False,
        strict: bool = False,
        append: bool = False,
        root: str | os.PathLike | None = None,
        sampling_rate: int | None = None,
    ) -> EmbeddingIndex:
        """Encode ``corpus`` once (batched, with a progress bar) into the matching index.

        Args:
            corpus: a list of captions (strings) → caption index; a list of audio clips (file paths, arrays,
                ``{"raw" | "array", "sampling_rate"}`` dicts; each array one clip) → audio index; a
                ``datasets.Dataset`` with ``audio`` or precomputed features → audio index with ids from
                its ``audio_id`` column, and, when it has ``captions`` and ``index_captions``, a caption
                index whose ids are ``"<audio_id>#<slot>"``. A list of strings is audio when any of them
                names an audio file (exists, or ends in an audio extension).
            ids: one id per item (lists only); default: for files their path relative to ``root`` (as
                given when there is no ``root``), else ``"0"``, ``"1"``, ...
            batch_size: windows (or clips) per forward pass; captions go four times as many.
            pool: store one entry per clip (its windows pooled by ``windowing.pooling``, spanning the whole
                clip) instead of one entry per window with its span.
            strict: stop at the first item that cannot be decoded (``AudioDecodeError`` naming it; what was
                indexed before it stays in the index). By default such items are skipped, listed in
                :attr:`skipped` (and in ``skipped.tsv`` by :meth:`save_index`) and summed up in a warning.
                macOS ``._*`` AppleDouble files are skipped either way, with reason ``AppleDouble``.
            append: add to the current index instead of replacing it; an id already in it is an error.
            root: the directory file ids are relative to, recorded in the index so that hits carry a
                ``path`` that resolves from anywhere (default: the current directory when the ids are the
                file paths; with ``ids`` of your own and no ``root``, hits carry no ``path``).
            sampling_rate: the rate of the arrays in a list given bare (default: the processor's, said once in
                the log).

        Raises:
            ValueError: an empty corpus, a single clip instead of a list, two items with one id (naming both),
                an id already indexed, or a ``batch_size`` below 1.
            AudioDecodeError: an array that is not one clip (:func:`~hf_atr.data.audio.audio_clips`), whatever
                ``strict`` says: it is refused before anything is encoded.

        Returns:
            The audio index, or the caption index for a list of captions. Under several processes
            (``torch.distributed`` initialised, e.g. by ``accelerate launch``) each process encodes a share
            of the items and every process returns the whole index, the one a single process builds.
        """
        options = IndexingOptions(
            batch_size=batch_size, show_progress=show_progress, pool=pool, strict=strict, append=append
        )
        return index_corpus(
            self,
            corpus,
            ids=ids,
            index_captions=index_captions,
            root=root,
            sampling_rate=sampling_rate,
            options=options,
        )

    def save_index(
        self, directory: str | os.PathLike | None = None, *, report_skipped: bool = True
    ) -> list[Path]:
        """Write the audio and/or caption index (safetensors + ids JSON) and ``skipped.tsv`` (the audio left
        out, ``path<TAB>reason``, when there is any); returns the files written.

        Under several processes only the first writes; every process returns once the files are there.

        Args:
            directory: default ``<model dir>/retrieval_index``, which the next ``pipeline()`` on that
                model directory loads automatically (and ``push_to_hub`` helpers upload).
            report_skipped: write ``skipped.tsv`` (a stale one is removed when nothing was skipped).
        """
        if directory is None:
            directory = default_index_dir(self.model)
            if directory is None:
                raise ValueError("The model was not loaded from a directory; pass save_index(directory).")
        if self.audio_index is None and self.text_index is None:
            raise ValueError("Nothing to save: build an index with `pipe.index(...)` first.")
        return save_indexes(
            directory, self.audio_index, self.text_index, self.skipped, report_skipped=report_skipped
        )

    def load_index(self, directory: str | os.PathLike) -> None:
        """Load the indexes saved in ``directory`` (and its ``skipped.tsv``), checking dimension and model
        fingerprint; an index of a kind that ``directory`` does not hold is left as it was.

        Raises:
            IndexFormatError: a corrupt file, or an index built by another model (rebuild it).
            FileNotFoundError: ``directory`` holds no index.
        """
        audio_index, text_index, self.skipped = load_indexes(directory, self.model)
        if audio_index is not None:
            self.audio_index = audio_index
        if text_index is not None:
            self.text_index = text_index


__all__ = ["IndexMethods"]
