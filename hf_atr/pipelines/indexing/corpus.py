"""What a corpus becomes in a retrieval pipeline's indexes: :func:`index_corpus`, behind ``pipe.index``.

A list of captions the caption index; a list of clips (read by the pipeline's audio-input contract,
:func:`hf_atr.data.audio.audio_clips`) or a ``datasets.Dataset`` the audio index, a long clip window by window with
each window's span (or one pooled entry per clip); a dataset's captions the caption index. File ids are their paths
relative to the index's root (:func:`relative_id`). :mod:`.filling` encodes the items.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hf_atr.data.audio import looks_like_audio_path
from hf_atr.data.audio_arrays import is_one_clip
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing.filling import IndexingOptions, add_audio, add_captions


def index_corpus(
    pipe: Any,
    corpus: Any,
    *,
    ids: Sequence[str] | None = None,
    index_captions: bool = True,
    root: str | os.PathLike | None = None,
    sampling_rate: int | None = None,
    options: IndexingOptions,
) -> EmbeddingIndex:
    """Encode ``corpus`` into the matching index of ``pipe`` (an
    :class:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline`); what each argument means, what
    is raised and what is returned is said by its ``index`` method."""
    if is_one_clip(corpus):
        raise ValueError(
            f"index() takes a list of clips, got one {type(corpus).__name__}: one array (or path, or dict) is "
            "one clip. Pass [clip] to index one clip, and a stacked batch of clips as list(batch)."
        )
    if not hasattr(corpus, "__len__") or len(corpus) == 0:
        raise ValueError("index() needs a non-empty list of captions or audio clips, or a datasets.Dataset.")
    if ids is not None and len(ids) != len(corpus):
        raise ValueError(f"Got {len(corpus)} items but {len(ids)} ids.")
    if hasattr(corpus, "column_names"):
        if ids is not None:
            raise ValueError("A Dataset brings its ids in its `audio_id` column; do not pass `ids`.")
        return _index_dataset(pipe, corpus, index_captions, options)
    items = list(corpus)
    if all(isinstance(item, str) for item in items) and not any(map(looks_like_audio_path, items)):
        caption_ids = [str(i) for i in range(len(items))] if ids is None else [str(item) for item in ids]
        return add_captions(pipe, items, caption_ids, options)
    is_path = [isinstance(item, (str, os.PathLike)) for item in items]
    root_dir = (
        Path(root if root is not None else os.getcwd()).expanduser().resolve()
        if any(is_path) and (root is not None or ids is None)
        else None  # ids of the caller's own naming are no paths under the current directory
    )
    if ids is None:
        ids = [
            (relative_id(item, root_dir) if root is not None else str(item)) if path else str(position)
            for position, (item, path) in enumerate(zip(items, is_path))
        ]
    sources = [
        str(item) if path else f"item {position}" for position, (item, path) in enumerate(zip(items, is_path))
    ]
    given = pipe.read_audio(items, sampling_rate, "the corpus")
    # Each row's audio_id is its source: how messages name it.
    rows = [{"audio": clip, "audio_id": source} for clip, source in zip(given.clips, sources)]
    root_name = None if root_dir is None else str(root_dir)
    add_audio(pipe, rows, [str(item_id) for item_id in ids], sources, options, root_name)
    return pipe.audio_index


def relative_id(path: str | os.PathLike, root: Path) -> str:
    """The id of a file under ``root``: its POSIX path relative to ``root``, or its absolute path when it
    lies elsewhere (``root / id`` resolves to the file either way)."""
    absolute = Path(path).expanduser().resolve()
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


def _index_dataset(pipe: Any, dataset: Any, index_captions: bool, options: IndexingOptions) -> EmbeddingIndex:
    if "audio_id" not in dataset.column_names:
        raise ValueError(f"The dataset needs an `audio_id` column (columns: {dataset.column_names}).")
    audio_ids = [str(audio_id) for audio_id in dataset["audio_id"]]
    sources = [f"row {row} ({audio_id})" for row, audio_id in enumerate(audio_ids)]
    paths = _dataset_audio_paths(dataset)
    if paths is not None:
        sources = [
            f"row {row} ({path})" if path else source
            for row, (source, path) in enumerate(zip(sources, paths))
        ]
    indexed = set(add_audio(pipe, dataset, audio_ids, sources, options, None))
    if index_captions and "captions" in dataset.column_names:
        caption_ids, captions = [], []
        for row, (audio_id, clip_captions) in enumerate(zip(audio_ids, dataset["captions"])):
            if row in indexed:
                for slot, caption in enumerate(clip_captions or []):
                    caption_ids.append(f"{audio_id}#{slot}")
                    captions.append(caption)
        add_captions(pipe, captions, caption_ids, options)
    return pipe.audio_index


def _dataset_audio_paths(dataset: Any) -> list[str | None] | None:
    """The ``path`` field of a dataset's undecoded ``audio`` column, read without loading the audio bytes."""
    if "audio" not in dataset.column_names:
        return None
    flat = dataset.select_columns(["audio"]).flatten()
    return flat["audio.path"] if "audio.path" in flat.column_names else None


__all__ = ["index_corpus", "relative_id"]
