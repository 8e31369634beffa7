"""Filling a retrieval pipeline's indexes: the one owner of indexing, behind ``pipe.index`` and ``hf-atr index``.

What a corpus becomes (:func:`index_corpus`, which :meth:`AudioTextRetrievalPipeline.index
<hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.index>` calls): a list of captions the caption
index; a list of clips (read by the pipeline's audio-input contract, :func:`hf_atr.data.audio_arrays.audio_clips`) or a
``datasets.Dataset`` the audio index, a long clip window by window with each window's span (or one pooled entry
per clip); a dataset's captions the caption index.

How it is encoded: the items are cut once into steps of ``batch_size × CLIPS_PER_STEP`` per process, no more than
``save_every``. Under several processes each process encodes its share of a step and the shares are merged in
process order (:func:`~hf_atr.distributed.gather_shards`), so every process holds the index one process
builds. The index grows step by step: an interrupted call, or one stopped by ``strict``, keeps the steps done
before it, and with ``save_every`` they are saved as it goes. Audio that cannot be decoded is skipped and listed in
``pipe.skipped`` (``skipped.tsv`` beside a saved index) unless ``strict``; macOS ``._*`` AppleDouble files always.

:class:`IndexingRun` is what ``hf-atr index`` runs: the files of a folder (ids relative to the index's root), a
saved dataset and a caption list, each leaving out what the index already holds (``--append`` resumes), and the
counts of what it did.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.utils import logging

from hf_atr.audio_batches import AUDIO_INPUT_NAMES
from hf_atr.audio_encoding import AudioEmbeddings, SkippedAudio, encode_audio_clips, encode_audio_windows
from hf_atr.data.audio import is_appledouble, looks_like_audio_path
from hf_atr.data.audio_arrays import AudioDecodeError, is_one_clip
from hf_atr.distributed import gather_shards, rank_and_world_size
from hf_atr.encoding import encode_text
from hf_atr.frame_encoding import frame_rate_of
from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring
from hf_atr.pipelines.index_storage import model_dtype, model_fingerprints
from hf_atr.pipelines.persistence import SKIPPED_FILENAME, holds_index
from hf_atr.windowing import Windowing

logger = logging.get_logger(__name__)

CLIPS_PER_STEP = 8
"""Batches of clips each process encodes between two merges of the index (under several processes the
merge is a collective; alone it bounds what an interrupted call loses)."""
CAPTION_BATCH_FACTOR = 4
"""Captions are short: a caption batch is this many times ``batch_size``."""
APPLEDOUBLE_REASON = "AppleDouble"
"""The reason recorded for macOS ``._*`` files, which are skipped even with ``strict=True`` (they hold no audio)."""


@dataclass(frozen=True)
class IndexingOptions:
    """How items are encoded into an index.

    Args:
        batch_size: windows (or clips) per forward pass; captions go :data:`CAPTION_BATCH_FACTOR` times as many.
        show_progress: a progress bar (on the first process only).
        pool: one entry per clip (its windows pooled by the pipeline's ``windowing.pooling``, spanning the whole
            clip) instead of one entry per window with its span.
        strict: stop at the first item that cannot be decoded (``AudioDecodeError`` naming it).
        append: add to the current index instead of replacing it; an id already in it is an error.
        save_every: with ``save_to``: save the pipeline's indexes (``pipe.save_index(save_to)``) after every
            this many audio items; a step is never longer, so a stop loses at most that many.
        save_to: the directory ``save_every`` saves to.
    """

    batch_size: int = 32
    show_progress: bool = True
    pool: bool = False
    strict: bool = False
    append: bool = False
    save_every: int | None = None
    save_to: Path | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}.")
        if self.save_every is not None and self.save_every < 1:
            raise ValueError(f"save_every must be at least 1, got {self.save_every}.")
        if (self.save_every is None) != (self.save_to is None):
            raise ValueError("save_every and save_to go together: how often to save, and where.")


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
        return _index_captions(pipe, items, caption_ids, options)
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
    _index_audio(pipe, rows, [str(item_id) for item_id in ids], sources, options, root_name)
    return pipe.audio_index


def new_index(pipe: Any, root: str | None = None) -> EmbeddingIndex:
    """An empty index for ``pipe``'s model: its dimension, its scoring's metric, its dtype and its fingerprints, of
    the pipeline's ``index_kind`` and ``index_options``, searched on its ``search_device``."""
    return EmbeddingIndex(
        pipe.model.config.projection_dim,
        metric=metric_for_scoring(pipe.model.config.scoring),
        kind=pipe.index_kind,
        fingerprint=model_fingerprints(pipe.model),
        embedding_dtype=model_dtype(pipe.model),
        root=root,
        device=pipe.search_device,
        search_dtype=pipe.search_dtype,
        frame_seconds=pipe.windowing.frame_seconds,
        **pipe.index_options,
    )


def index_vectors(model: Any, embeds: torch.Tensor) -> torch.Tensor:
    """``embeds: (n, dim)`` in the index's geometry, float32 on the CPU: ``M^{1/2} x`` for Mahalanobis scoring
    (:meth:`~hf_atr.scoring_head.AtrScoringHead.transform`), unchanged otherwise. Entries and queries alike."""
    head = model.scoring_head
    return head.transform(embeds.to(head.logit_scale.device)).float().cpu()


def check_appendable(index: EmbeddingIndex, model: Any) -> None:
    """Refuse to add embeddings that ``model`` computes in another dtype than those ``index`` holds (one index, one
    precision: its ``embedding_dtype`` says what all of its entries are).

    Raises:
        ValueError: naming both dtypes and what to do.
    """
    dtype = model_dtype(model)
    if index.embedding_dtype != dtype:
        raise ValueError(
            f"The index holds embeddings computed in {index.embedding_dtype}, and this model computes in {dtype}: "
            f"load the model in {index.embedding_dtype} to add to it (dtype= in pipeline(), --dtype "
            f"{index.embedding_dtype} for hf-atr index), or build a new index."
        )


def relative_id(path: str | os.PathLike, root: Path) -> str:
    """The id of a file under ``root``: its POSIX path relative to ``root``, or its absolute path when it
    lies elsewhere (``root / id`` resolves to the file either way)."""
    absolute = Path(path).expanduser().resolve()
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


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
    indexed = set(_index_audio(pipe, dataset, audio_ids, sources, options, None))
    if index_captions and "captions" in dataset.column_names:
        caption_ids, captions = [], []
        for row, (audio_id, clip_captions) in enumerate(zip(audio_ids, dataset["captions"])):
            if row in indexed:
                for slot, caption in enumerate(clip_captions or []):
                    caption_ids.append(f"{audio_id}#{slot}")
                    captions.append(caption)
        _index_captions(pipe, captions, caption_ids, options)
    return pipe.audio_index


def _index_audio(
    pipe: Any,
    rows: Any,
    ids: Sequence[str],
    sources: Sequence[str],
    options: IndexingOptions,
    root: str | None,
) -> list[int]:
    """Add the audio of ``rows`` to the audio index step by step, ``pipe.skipped`` kept up to date with every
    step; returns the positions indexed."""
    if options.pool and pipe.windowing.frame_seconds is not None:
        # a pooled entry spans its whole clip, so an index of them has no frame resolution to record
        raise ValueError(
            f"pool=True makes one entry per clip, spanning all of it, but the pipeline's windowing asks for entries "
            f"of frame_seconds={pipe.windowing.frame_seconds} each: leave out pool for frame entries, or index with "
            "a pipeline without frame_seconds for pooled clips."
        )
    if pipe.windowing.frame_seconds is not None:
        frame_rate_of(pipe.model)  # a model without frames is refused before anything is encoded
    if options.append and pipe.audio_index is not None:
        index = pipe.audio_index
        check_appendable(index, pipe.model)
        if root is not None and index.root is not None and Path(index.root) != Path(root):
            raise ValueError(
                f"The audio index resolves its ids from {index.root}, not {root}: pass root={index.root!r} "
                "(ids relative to it) or build a new index."
            )
        index.root = index.root or root
        if index.frame_seconds != pipe.windowing.frame_seconds:
            raise ValueError(
                f"The audio index holds entries of frame_seconds={index.frame_seconds}, but this pipeline "
                f"indexes with frame_seconds={pipe.windowing.frame_seconds}: use the index's resolution or build "
                "a new index."
            )
    else:
        index = new_index(pipe, root=root)
        pipe.skipped = []
    _check_unique_ids(ids, sources, index)
    pipe.audio_index = index  # filled step by step: an interrupted call keeps what was encoded
    earlier = list(pipe.skipped)
    appledouble = {position for position, source in enumerate(sources) if is_appledouble(source)}
    skipped = [
        SkippedAudio(position, sources[position], APPLEDOUBLE_REASON) for position in sorted(appledouble)
    ]
    settled = {item.name for item in skipped}  # an earlier entry of an item tried again is replaced

    def record_skipped() -> None:
        pipe.skipped = [item for item in earlier if item.name not in settled] + sorted(
            skipped, key=lambda item: item.index
        )

    record_skipped()
    windowing = pipe.windowing if _holds_waveforms(rows) else None
    indexed: list[int] = []

    def encode(positions: list[int]) -> tuple[torch.Tensor, dict[str, Any]]:
        part = (
            rows.select(positions) if hasattr(rows, "select") else [rows[position] for position in positions]
        )
        try:
            encoded = _encode_audio_entries(pipe, part, windowing, options)
        except AudioDecodeError as error:  # strict: every process stops at the same step
            return torch.zeros(0, pipe.model.config.projection_dim), {"error": (error.name, error.reason)}
        spans = None if encoded.starts is None else list(zip(encoded.starts.tolist(), encoded.ends.tolist()))
        return encoded.embeddings, {
            "positions": [positions[clip] for clip in encoded.clip_indices.tolist()],
            "spans": spans,
            "skipped": [(positions[item.index], item.reason) for item in encoded.skipped],
        }

    todo = [position for position in range(len(ids)) if position not in appledouble]
    since_save = 0
    steps = _encode_in_steps(
        todo, options.batch_size, options.save_every, options.show_progress, "Indexing audio", encode
    )
    for step_length, (embeddings, payloads) in steps:
        errors = [payload["error"] for payload in payloads if "error" in payload]
        if errors:
            raise AudioDecodeError(*errors[0])
        positions = [position for payload in payloads for position in payload["positions"]]
        spans = (
            [span for payload in payloads for span in payload["spans"] or []]
            if payloads[0]["spans"] is not None
            else None
        )
        if positions:
            index.add(
                index_vectors(pipe.model, embeddings), [ids[position] for position in positions], spans=spans
            )
        indexed.extend(dict.fromkeys(positions))
        step_skipped = [
            SkippedAudio(position, sources[position], reason)
            for payload in payloads
            for position, reason in payload["skipped"]
        ]
        skipped.extend(step_skipped)
        settled.update(sources[position] for position in positions)
        settled.update(item.name for item in step_skipped)
        record_skipped()
        since_save += step_length
        if options.save_every is not None and since_save >= options.save_every:
            pipe.save_index(options.save_to)
            since_save = 0
    if skipped and rank_and_world_size()[0] == 0:  # every process holds the merged list: one reports it
        listed = "; ".join(f"{item.name} ({item.reason})" for item in skipped[:5])
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        logger.warning(
            f"Skipped {len(skipped)} of {len(ids)} audio item(s) that cannot be decoded: {listed}{more}. "
            f"They are listed in `pipe.skipped`; `save_index` writes them to {SKIPPED_FILENAME}."
        )
    return indexed


def _encode_audio_entries(
    pipe: Any, part: Any, windowing: Windowing | None, options: IndexingOptions
) -> AudioEmbeddings:
    """The index entries of some clips: one per window (with spans), or one pooled entry per clip."""
    common = {"batch_size": options.batch_size, "strict": options.strict}
    if windowing is not None and not options.pool:
        return encode_audio_windows(pipe.model, pipe.processor, part, windowing=windowing, **common)
    return encode_audio_clips(pipe.model, pipe.processor, part, windowing=windowing, **common)


def _index_captions(
    pipe: Any, captions: Sequence[str], ids: Sequence[str], options: IndexingOptions
) -> EmbeddingIndex:
    index = pipe.text_index if options.append and pipe.text_index is not None else new_index(pipe)
    check_appendable(index, pipe.model)
    _check_unique_ids(ids, [f"caption {caption!r}" for caption in captions], index)
    pipe.text_index = index
    batch_size = CAPTION_BATCH_FACTOR * options.batch_size

    def encode(positions: list[int]) -> tuple[torch.Tensor, dict[str, Any]]:
        texts = [captions[position] for position in positions]
        embeds = (
            encode_text(pipe.model, pipe.processor, texts, batch_size=batch_size)
            if texts
            else torch.zeros(0, pipe.model.config.projection_dim)
        )
        return embeds, {"positions": positions}

    # save_every counts audio files: captions are saved with them and at the end
    steps = _encode_in_steps(
        list(range(len(captions))), batch_size, None, options.show_progress, "Indexing captions", encode
    )
    for _, (embeddings, payloads) in steps:
        positions = [position for payload in payloads for position in payload["positions"]]
        if positions:
            index.add(
                index_vectors(pipe.model, embeddings),
                [ids[position] for position in positions],
                [captions[position] for position in positions],
            )
    return index


def _encode_in_steps(
    positions: list[int],
    batch_size: int,
    save_every: int | None,
    show_progress: bool,
    description: str,
    encode: Callable[[list[int]], tuple[torch.Tensor, Any]],
) -> Iterator[tuple[int, tuple[torch.Tensor, list[Any]]]]:
    """The one place items are cut into steps: ``batch_size × CLIPS_PER_STEP`` per process, at most
    ``save_every``. Each process encodes its share of a step; yields, per step, its length and the gathered
    embeddings with every process's payload in process order (which is the order of ``positions``)."""
    rank, processes = rank_and_world_size()
    step = batch_size * CLIPS_PER_STEP * processes
    if save_every is not None:
        step = min(step, save_every)
    progress = tqdm(total=len(positions), desc=description, disable=not show_progress or rank != 0)
    try:
        for start in range(0, len(positions), step):
            chunk = positions[start : start + step]
            share = chunk[len(chunk) * rank // processes : len(chunk) * (rank + 1) // processes]
            embeddings, payload = encode(share)
            yield len(chunk), gather_shards(embeddings, payload)
            progress.update(len(chunk))
    finally:
        progress.close()


def _check_unique_ids(ids: Sequence[str], sources: Sequence[str], index: EmbeddingIndex) -> None:
    """Raise naming both items when two share an id, or when an id is already in ``index``."""
    first_source: dict[str, str] = {}
    existing = set(index.ids)
    for item_id, source in zip(ids, sources):
        if item_id in first_source:
            raise ValueError(
                f"Duplicate id {item_id!r}: {first_source[item_id]} and {source}. Each item of an index needs its "
                "own id."
            )
        if item_id in existing:
            already = index.path_of(item_id) or item_id
            raise ValueError(
                f"Duplicate id {item_id!r}: {source} and {already}, which is already in the index. Give it "
                "another id, or leave indexed items out when appending."
            )
        first_source[item_id] = source


def _dataset_audio_paths(dataset: Any) -> list[str | None] | None:
    """The ``path`` field of a dataset's undecoded ``audio`` column, read without loading the audio bytes."""
    if "audio" not in dataset.column_names:
        return None
    flat = dataset.select_columns(["audio"]).flatten()
    return flat["audio.path"] if "audio.path" in flat.column_names else None


def _holds_waveforms(rows: Any) -> bool:
    """Whether rows carry audio to decode (and so to window), rather than only precomputed features."""
    columns = rows.column_names if hasattr(rows, "column_names") else (list(rows[0]) if len(rows) else [])
    return "audio" in columns or not any(name in columns for name in AUDIO_INPUT_NAMES)


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
