"""Filling a pipeline's index step by step: audio entries (windows with their spans, or pooled clips) and captions.

The items are cut once into steps of ``batch_size × CLIPS_PER_STEP`` per process, no more than ``save_every``.
Under several processes each process encodes its share of a step and the shares are merged in process order
(:func:`~hf_atr.distributed.gather_shards`), so every process holds the index one process builds. The index grows
step by step: an interrupted call, or one stopped by ``strict``, keeps the steps done before it, and with
``save_every`` they are saved as it goes. Audio that cannot be decoded is skipped and listed in ``pipe.skipped``
(``skipped.tsv`` beside a saved index) unless ``strict``; macOS ``._*`` AppleDouble files always.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.utils import logging

from hf_atr.audio_batches import AUDIO_INPUT_NAMES
from hf_atr.audio_encoding import AudioEmbeddings, SkippedAudio, encode_audio_clips, encode_audio_windows
from hf_atr.data.audio import is_appledouble
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.distributed import gather_shards, rank_and_world_size
from hf_atr.encoding import encode_text
from hf_atr.frame_encoding import frame_rate_of
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing.model_index import check_appendable, index_vectors, new_index
from hf_atr.pipelines.persistence import SKIPPED_FILENAME
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


def add_audio(
    pipe: Any,
    rows: Any,
    ids: Sequence[str],
    sources: Sequence[str],
    options: IndexingOptions,
    root: str | None,
) -> list[int]:
    """Add the audio of ``rows`` (an id and a source, which names it in messages, for each) to ``pipe``'s audio index
    step by step, ``pipe.skipped`` kept up to date with every step; ``root`` is recorded in a new index. Returns the
    positions indexed."""
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


def add_captions(
    pipe: Any, captions: Sequence[str], ids: Sequence[str], options: IndexingOptions
) -> EmbeddingIndex:
    """Add ``captions`` (one id each) to ``pipe``'s caption index step by step (a new index unless
    ``options.append``); returns the index."""
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


def _holds_waveforms(rows: Any) -> bool:
    """Whether rows carry audio to decode (and so to window), rather than only precomputed features."""
    columns = rows.column_names if hasattr(rows, "column_names") else (list(rows[0]) if len(rows) else [])
    return "audio" in columns or not any(name in columns for name in AUDIO_INPUT_NAMES)


__all__ = [
    "APPLEDOUBLE_REASON",
    "CAPTION_BATCH_FACTOR",
    "CLIPS_PER_STEP",
    "IndexingOptions",
    "add_audio",
    "add_captions",
]
