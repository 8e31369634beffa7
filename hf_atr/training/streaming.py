"""Training pairs from a streamed corpus: a ``datasets.IterableDataset`` of clips as an endless, seeded, resumable
stream of (clip, caption) items.

Corpora that do not fit a map-style dataset (WebDataset tar shards in the LAION-CLAP layout, parquet shards; see
:func:`hf_atr.data.shards.load_audio_text_shards`) are read shard by shard. :class:`StreamingPairs` turns such a
stream into training items in the format of :class:`~hf_atr.training.CaptionPairDataset` (the clip's row plus
``caption_language``, ``caption_index`` and ``epoch``), so the same collators (precomputed features, waveforms
for on-device features, several languages) read them.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from datasets import IterableDataset as StreamedDataset
from datasets.distributed import split_dataset_by_node

from ..data.schema import ENGLISH, captions_in_language
from .collator import EPOCH
from .waveform_collator import item_seed

CAPTION_MODES = ("random", "all")
DEFAULT_SHUFFLE_BUFFER = 1000
"""Clips held by the shuffle buffer (as LAION-CLAP's and open_clip's WebDataset loaders keep about a thousand)."""


def caption_slots(row: Mapping[str, Any], languages: Sequence[str]) -> list[tuple[str, int]]:
    """Every ``(language, slot)`` of a clip's captions in ``languages``, in order (languages, then slots)."""
    return [
        (language, slot)
        for language in languages
        for slot in range(len(captions_in_language(row, language) or []))
    ]


class _ExpandCaptions:
    """Batched map: one row per (clip, language, caption slot) (``captions="all"``), before shuffling, so that a
    clip's captions spread over the shuffle buffer instead of filling one batch."""

    def __init__(self, languages: Sequence[str]) -> None:
        self.languages = list(languages)

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        columns = list(batch)
        expanded: dict[str, list] = {column: [] for column in [*columns, "caption_language", "caption_index"]}
        for index in range(len(batch[columns[0]])):
            row = {column: batch[column][index] for column in columns}
            for language, slot in caption_slots(row, self.languages):
                for column in columns:
                    expanded[column].append(row[column])
                expanded["caption_language"].append(language)
                expanded["caption_index"].append(slot)
        return expanded


class StreamingPairs(torch.utils.data.IterableDataset):
    """An endless stream of training items from a streamed clip corpus, epoch after epoch.

    Each epoch reads the clips once (in a seeded order: the shards shuffled and a shuffle buffer of
    ``shuffle_buffer_size`` clips, reseeded every epoch with ``seed + epoch``, as ``datasets`` does) and yields:

    - ``captions="random"`` (default, as LAION-CLAP trains on WebDataset shards): each clip once, with one of its
      captions in ``languages`` drawn uniformly, seeded by ``(seed, epoch, audio_id)``;
    - ``captions="all"``: each caption of each clip once (as :class:`~hf_atr.training.CaptionPairDataset` does for
      map-style datasets); captions are expanded before the shuffle buffer, so a clip's captions spread out.

    Items are the clip's row plus ``caption_language``, ``caption_index`` and ``epoch``. The stream never ends, so
    training length is ``max_steps``. Under several processes :meth:`for_process` gives each rank its own shards
    (``datasets.distributed.split_dataset_by_node``), never all ranks reading everything.

    :class:`~hf_atr.AtrTrainer` reads the stream in the main process (raw rows: bytes and captions, nothing decoded)
    and hands batches of items to the DataLoader workers, which decode, resample, crop and collate them
    (:func:`stream_data_loader`). The order of items is therefore the stream's whatever the number of workers, and
    resuming is exact: the stream skips the items already trained on (:meth:`resume_after`) before any is decoded.
    Iterated directly inside DataLoader workers, ``datasets`` gives each worker its own shards instead.

    Args:
        clips: a streamed ``datasets.IterableDataset`` in the shared schema (``audio``, ``audio_id``, ``captions``,
            optional ``translations``), e.g. from :func:`~hf_atr.data.shards.load_audio_text_shards` or
            ``Dataset.to_iterable_dataset(num_shards=...)``.
        captions: ``"random"`` or ``"all"``.
        languages: caption languages (ISO 639-3; ``"eng"`` = ``captions``, others from ``translations``); default
            English only.
        seed: seed of the shuffle and the caption draws (:class:`~hf_atr.AtrTrainer` uses ``args.seed`` for a bare
            ``IterableDataset``).
        shuffle_buffer_size: clips (``captions="random"``) or pairs (``"all"``) held by the shuffle buffer;
            ``None`` or 0 streams in shard order, unshuffled.
    """

    def __init__(
        self,
        clips: StreamedDataset,
        *,
        captions: str = "random",
        languages: Sequence[str] | None = None,
        seed: int = 0,
        shuffle_buffer_size: int | None = DEFAULT_SHUFFLE_BUFFER,
    ) -> None:
        if not isinstance(clips, StreamedDataset):
            raise TypeError(
                f"StreamingPairs streams a datasets.IterableDataset, got {type(clips).__name__}; a map-style "
                "Dataset trains as it is (or use dataset.to_iterable_dataset(num_shards=...))."
            )
        if captions not in CAPTION_MODES:
            raise ValueError(f"StreamingPairs: captions must be one of {CAPTION_MODES}, got {captions!r}.")
        if shuffle_buffer_size is not None and not (
            isinstance(shuffle_buffer_size, int) and shuffle_buffer_size >= 0
        ):
            raise ValueError(
                f"StreamingPairs: shuffle_buffer_size must be a non-negative int or None, got {shuffle_buffer_size!r}."
            )
        self.clips = clips
        self.captions = captions
        self.languages = list(languages) if languages else [ENGLISH]
        self.seed = int(seed)
        self.shuffle_buffer_size = shuffle_buffer_size or 0
        self.items_to_skip = 0

    @property
    def n_shards(self) -> int:
        """Shards of the stream (``datasets`` hands them out to processes)."""
        return self.clips.n_shards

    def for_process(self, rank: int, world_size: int) -> StreamingPairs:
        """A copy that streams only process ``rank``'s shards out of ``world_size`` processes."""
        process_copy = copy.copy(self)
        if world_size == 1:
            return process_copy
        if self.n_shards % world_size:
            raise ValueError(
                f"The stream has {self.n_shards} shards, which {world_size} processes cannot split evenly: each "
                "process must read its own shards (not all of them, keeping every n-th clip). Write the corpus in a "
                f"multiple of {world_size} shards (datasets_scripts/write_shards.py --num-shards)."
            )
        process_copy.clips = split_dataset_by_node(self.clips, rank=rank, world_size=world_size)
        return process_copy

    def resume_after(self, items: int) -> None:
        """Start after the first ``items`` items (those of the batches already trained on)."""
        self.items_to_skip = int(items)

    def _stream(self) -> StreamedDataset:
        stream = self.clips
        if self.captions == "all":
            stream = stream.map(_ExpandCaptions(self.languages), batched=True)
        if self.shuffle_buffer_size:
            stream = stream.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer_size)
        return stream

    def _item(self, row: dict[str, Any], epoch: int) -> dict[str, Any]:
        if row.get("audio_id") is None:
            raise ValueError(f"A streamed clip has no 'audio_id' (columns: {sorted(row)}).")
        row[EPOCH] = epoch
        if self.captions == "all":
            return row
        slots = caption_slots(row, self.languages)
        if not slots:
            raise ValueError(f"Clip {row['audio_id']!r} has no captions in the languages {self.languages}.")
        draw = np.random.default_rng(item_seed(self.seed, epoch, row["audio_id"]))
        row["caption_language"], row["caption_index"] = slots[int(draw.integers(len(slots)))]
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        to_skip = self.items_to_skip
        stream = self._stream()
        for epoch in itertools.count():
            stream.set_epoch(epoch)
            empty = True
            for row in stream:
                empty = False
                if to_skip:
                    to_skip -= 1
                    continue
                yield self._item(dict(row), epoch)
            if empty:
                raise ValueError(f"The stream ({self.n_shards} shard(s)) yielded no clip in epoch {epoch}.")


class _StreamBatches:
    """Batch sampler whose "indices" are the items themselves, read from the stream in the main process."""

    def __init__(self, stream: StreamingPairs, batch_size: int) -> None:
        self.stream = stream
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        items = iter(self.stream)
        while batch := list(itertools.islice(items, self.batch_size)):
            yield batch


class _ItemsAsIndices(torch.utils.data.Dataset):
    """The workers' view of a stream: the "index" a worker receives is the item."""

    def __getitem__(self, item: dict[str, Any]) -> dict[str, Any]:
        return item


def stream_data_loader(
    stream: StreamingPairs, batch_size: int, collate_fn: Any, **loader_options: Any
) -> torch.utils.data.DataLoader:
    """A ``DataLoader`` that reads ``stream`` in this process and collates its batches in the workers.

    The items (raw rows: audio bytes, captions) travel to the workers with the batch; decoding, resampling, cropping
    and tokenising run there. Batches come in the stream's order whatever ``num_workers`` is.

    Args:
        stream: this process's stream (:meth:`StreamingPairs.for_process`).
        batch_size: items per batch.
        collate_fn: the collator (run in the workers).
        loader_options: other ``DataLoader`` arguments (``num_workers``, ``pin_memory``, ``prefetch_factor``, ...).
    """
    return torch.utils.data.DataLoader(
        _ItemsAsIndices(),
        batch_sampler=_StreamBatches(stream, batch_size),
        collate_fn=collate_fn,
        **loader_options,
    )


def trainer_stream_loader(
    stream: StreamingPairs, args: Any, batch_size: int, collate_fn: Any
) -> torch.utils.data.DataLoader:
    """The training loader of :class:`~hf_atr.AtrTrainer` for a stream: this process's shards
    (:meth:`StreamingPairs.for_process`) read here and collated in the workers (:func:`stream_data_loader`), with
    the DataLoader options of ``args`` (``TrainingArguments``).

    Streams bypass ``accelerate.prepare``: for an ``IterableDataset`` accelerate would either read every batch on
    rank 0 and dispatch it (``dispatch_batches``, its default for iterable datasets) or wrap the stream in an
    ``IterableDatasetShard`` that makes every rank read every item and keep its share; each rank reads its own
    shards instead, and the Trainer moves each batch to the device.

    Args:
        stream: this process's stream.

    Raises:
        ValueError: ``accelerator_config.dispatch_batches=True``.
    """
    if args.accelerator_config.dispatch_batches:
        raise ValueError(
            "accelerator_config.dispatch_batches=True is not used with streamed training: each process reads "
            "its own shards. Leave it unset."
        )
    workers = args.dataloader_num_workers
    return stream_data_loader(
        stream,
        batch_size,
        collate_fn,
        num_workers=workers,
        pin_memory=args.dataloader_pin_memory,
        persistent_workers=args.dataloader_persistent_workers and workers > 0,
        prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
        multiprocessing_context=args.dataloader_multiprocessing_context if workers > 0 else None,
        in_order=args.dataloader_in_order,
        # Its own generator: creating the iterator then draws the workers' base seed from it, not from torch's
        # global generator, whose state a resumed run restores from the checkpoint.
        generator=torch.Generator().manual_seed(args.seed),
    )
