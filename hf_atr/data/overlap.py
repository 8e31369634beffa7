"""Remove evaluation clips from training data: the overlap filter for web-scale corpora.

WavCaps' FreeSound part contains Clotho's recordings, its AudioSet_SL part (like LAION-Audio-630K)
AudioCaps' YouTube segments; training on them and testing on Clotho or AudioCaps measures memory, not
retrieval. :func:`remove_overlap` drops every training clip that matches a reference (evaluation) clip

- by **source id** (``source_id`` column, :mod:`hf_atr.data.source_ids`): the same Freesound sound or
  YouTube video, whatever its encoding, rate or cut; plus the ids of a block list such as WavCaps' own
  (:func:`read_wavcaps_blocklist`);
- by **audio content**: the same samples. :func:`audio_content_hash` hashes the *decoded* samples (as
  exact floats: 8- to 32-bit integers scaled by a power of two, float, double; with the sample rate and
  channel count), not the file bytes, so a WAV re-saved as FLAC or at another bit depth, a file with
  other metadata tags, or a renamed copy still matches, which a hash of the bytes misses, and files that
  differ in any sample do not. It cannot match a resampled or lossy re-encoded copy (WavCaps ships 32 kHz FLAC, Clotho 44.1 kHz WAV):
  those are what the source ids are for. Decoding every training file would cost far more than reading
  it, so a training clip is decoded only when its header (sample rate, channels, frame count, read without
  decoding) equals a reference clip's; ``benchmarks/overlap_filter.py`` measures the difference.

The filter records itself in the result's provenance (:func:`hf_atr.data.schema.record_filter`), logs how
many clips it removed and returns an :class:`OverlapReport`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import soundfile
from datasets import Dataset, DatasetDict

from hf_atr.data.schema import SOURCE_ID_COLUMN, corpus_provenance, record_filter
from hf_atr.data.source_ids import freesound_source_id, youtube_source_id
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

OVERLAP_CRITERIA: tuple[str, ...] = ("source_id", "content")
"""What :func:`remove_overlap` can match by."""

OVERLAP_FILTER = "overlap"
"""``name`` of the provenance record :func:`remove_overlap` writes (:func:`hf_atr.data.schema.record_filter`)."""

CONTENT_HASH = "blake2b-128 of the decoded samples (exact float32/float64), sample rate and channels"
"""What :func:`audio_content_hash` hashes (recorded in the provenance)."""

_BLOCK_FRAMES = 1 << 16
_LISTED_IN_WARNING = 20


@dataclass
class OverlapReport:
    """What one :func:`remove_overlap` call found in one training dataset.

    ``removed_by_source_id`` / ``removed_by_content`` list the ``audio_id`` of each removed clip (a clip
    matched both ways counts under source id); ``unreadable`` lists ``"<audio_id>: <reason>"`` of clips
    whose audio could not be hashed (kept, since nothing shows they overlap); ``without_source_id``
    counts the training clips the source-id check could not apply to.
    """

    clips_checked: int
    reference: list[str]
    reference_clips: int
    by: list[str]
    removed_by_source_id: list[str] = field(default_factory=list)
    removed_by_content: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    without_source_id: int = 0

    @property
    def removed(self) -> int:
        return len(self.removed_by_source_id) + len(self.removed_by_content)

    @property
    def kept(self) -> int:
        return self.clips_checked - self.removed

    def summary(self) -> str:
        """One line: how many clips were removed, and why."""
        return (
            f"overlap filter: removed {self.removed} of {self.clips_checked} clip(s) "
            f"({len(self.removed_by_source_id)} by source id, {len(self.removed_by_content)} by audio content) "
            f"that match {', '.join(self.reference)} ({self.reference_clips} reference clips); "
            f"{self.without_source_id} clip(s) had no source id, {len(self.unreadable)} could not be hashed."
        )

    def as_record(self) -> dict[str, Any]:
        """The provenance record (counts, not the id lists)."""
        record = {key: value for key, value in asdict(self).items() if not isinstance(value, list)}
        return {
            "name": OVERLAP_FILTER,
            "by": self.by,
            "reference": self.reference,
            **record,
            "removed_by_source_id": len(self.removed_by_source_id),
            "removed_by_content": len(self.removed_by_content),
            "unreadable": len(self.unreadable),
            "clips_after": self.kept,
            "content_hash": CONTENT_HASH if "content" in self.by else None,
        }


def audio_content_hash(audio: Any) -> str:
    """Hex digest identifying a clip's decoded samples (see the module docstring).

    The samples are read as float64: libsndfile scales an n-bit integer sample by ``2 ** -(n - 1)`` and
    passes float and double samples through, all exactly, so one sample value gives one hash input
    whatever subtype stores it (a 16-bit WAV, a 24-bit FLAC of the same values and a float WAV of them
    match; a float file's ``-0.0`` counts as ``0.0``), and no two distinct values collide. Each block of
    samples is hashed as little-endian float32 when float32 holds all of its values exactly (every
    subtype up to 24 bits, and float), else as float64, behind its item size: the same values give the
    same bytes, and hashing half the bytes costs about what 16-bit integers did. (Reading 16-bit integers,
    as before, dropped every bit below the top 16 and rounded unscaled float samples to 0 or ±1, so
    different float files of one length had one hash.)

    Args:
        audio: a shared-schema ``audio`` value (``{"bytes", "path"}``) or a file path.

    Raises:
        soundfile.LibsndfileError / OSError / RuntimeError: the audio cannot be decoded.
    """
    digest = hashlib.blake2b(digest_size=16)
    with soundfile.SoundFile(_readable(audio)) as sound:
        digest.update(f"{sound.samplerate}:{sound.channels}:".encode())
        for block in sound.blocks(blocksize=_BLOCK_FRAMES, dtype="float64", always_2d=True):
            block += 0.0  # -0.0 + 0.0 == +0.0: one zero, whatever the file stores
            narrow = block.astype(np.float32)
            exact = narrow if np.array_equal(narrow, block) else block
            digest.update(b"%d" % exact.itemsize)
            digest.update(exact.astype(exact.dtype.newbyteorder("<"), copy=False).tobytes())
    return digest.hexdigest()


def read_wavcaps_blocklist(path: str | os.PathLike) -> set[str]:
    """The source ids of a WavCaps block list (``json_files/blacklist/*.json``:
    ``{"AudioSet": ["Y<id>.wav", ...], "FreeSound": ["<id>", ...]}``), e.g. the clips of the AudioCaps and
    Clotho test sets; entries that are no id (``"Not found"``) are ignored."""
    with open(os.path.expanduser(path), encoding="utf-8") as handle:
        content = json.load(handle)
    if not isinstance(content, dict):
        raise ValueError(f"{path}: expected {{'AudioSet': [...], 'FreeSound': [...]}}.")
    to_source_id = {"audioset": youtube_source_id, "freesound": freesound_source_id}
    unknown = [key for key in content if key.casefold() not in to_source_id]
    if unknown:
        raise ValueError(f"{path}: unknown list(s) {unknown}; expected 'AudioSet' and/or 'FreeSound'.")
    return {
        identifier
        for key, values in content.items()
        for value in values
        if (identifier := to_source_id[key.casefold()](str(value))) is not None
    }


def remove_overlap(
    dataset: Dataset | DatasetDict,
    reference: Dataset | DatasetDict | Sequence[Dataset | DatasetDict] = (),
    *,
    by: Iterable[str] = OVERLAP_CRITERIA,
    exclude_source_ids: Iterable[str] = (),
    num_threads: int | None = None,
) -> tuple[Dataset, OverlapReport] | tuple[DatasetDict, dict[str, OverlapReport]]:
    """Drop the clips of ``dataset`` that are clips of ``reference``, and report them.

    Args:
        dataset: training data in the shared schema (every split of a ``DatasetDict`` is filtered).
        reference: the evaluation data (e.g. ``[clotho["test"], audiocaps["test"]]``).
        by: ``"source_id"`` and/or ``"content"`` (module docstring).
        exclude_source_ids: further source ids to remove (:func:`read_wavcaps_blocklist`).
        num_threads: threads reading headers and hashing audio (libsndfile and hashlib release the GIL);
            default ``min(8, os.cpu_count())``.

    Returns:
        ``(filtered, report)``, or ``(filtered DatasetDict, {split: report})``. The filtered data records
        the filter in its provenance (:func:`hf_atr.data.schema.corpus_provenance`, ``filters``).
    """
    by = list(dict.fromkeys(by))
    unknown = [criterion for criterion in by if criterion not in OVERLAP_CRITERIA]
    if unknown or not by:
        raise ValueError(f"by={by!r}: choose from {list(OVERLAP_CRITERIA)}.")
    references = _flatten(reference)
    exclude = set(exclude_source_ids)
    if not references and not exclude:
        raise ValueError("Give reference datasets and/or exclude_source_ids: there is nothing to remove.")
    threads = num_threads or min(8, os.cpu_count() or 1)
    index = _ReferenceIndex(references, by, exclude, threads)
    if isinstance(dataset, DatasetDict):
        results = {split: _filter(split_dataset, index, threads) for split, split_dataset in dataset.items()}
        return DatasetDict({split: result[0] for split, result in results.items()}), {
            split: result[1] for split, result in results.items()
        }
    return _filter(dataset, index, threads)


class _ReferenceIndex:
    """The reference clips' source ids, audio headers and content hashes."""

    def __init__(self, references: list[tuple[str, Dataset]], by: list[str], exclude: set[str], threads: int):
        self.by = by
        self.names = [name for name, _ in references] + (
            [f"{len(exclude)} blocked source ids"] if exclude else []
        )
        self.clips = sum(len(dataset) for _, dataset in references)
        self.source_ids = set(exclude)
        self.signatures: set[tuple[int, int, int]] = set()
        self.hashes: set[str] = set()
        if "source_id" in by:
            for name, dataset in references:
                ids = dataset[SOURCE_ID_COLUMN] if SOURCE_ID_COLUMN in dataset.column_names else []
                self.source_ids.update(identifier for identifier in ids if identifier)
                if not any(ids):
                    logger.warning(
                        f"overlap filter: reference {name} has no source ids; it is matched by content only."
                    )
        if "content" in by:
            audio = [value for _, dataset in references for value in dataset["audio"]]
            unreadable = []
            with ThreadPoolExecutor(threads) as pool:
                for value, (signature, digest, error) in zip(audio, pool.map(_signature_and_hash, audio)):
                    if digest is None:
                        unreadable.append(
                            f"{value.get('path') if isinstance(value, dict) else value}: {error}"
                        )
                    else:
                        self.signatures.add(signature)
                        self.hashes.add(digest)
            if unreadable:
                shown = "\n  ".join(unreadable[:_LISTED_IN_WARNING])
                logger.warning(
                    f"overlap filter: {len(unreadable)} reference clip(s) could not be hashed and are matched "
                    f"by source id only:\n  {shown}"
                )


def _filter(dataset: Dataset, index: _ReferenceIndex, threads: int) -> tuple[Dataset, OverlapReport]:
    report = OverlapReport(len(dataset), index.names, index.clips, index.by)
    # Rows are named by their clip, or for moment annotations (one row per query) by the query's qid.
    audio_ids = dataset["audio_id"] if "audio_id" in dataset.column_names else dataset["qid"]
    removed: set[int] = set()
    if "source_id" in index.by:
        ids = dataset[SOURCE_ID_COLUMN] if SOURCE_ID_COLUMN in dataset.column_names else [None] * len(dataset)
        report.without_source_id = sum(identifier is None for identifier in ids)
        for row, identifier in enumerate(ids):
            if identifier is not None and identifier in index.source_ids:
                removed.add(row)
                report.removed_by_source_id.append(audio_ids[row])
    if "content" in index.by and index.hashes:
        rows = [row for row in range(len(dataset)) if row not in removed]
        audio = dataset.select_columns(["audio"]).select(rows)["audio"]
        with ThreadPoolExecutor(threads) as pool:
            headers = list(pool.map(_signature, audio))
            candidates = [i for i, (signature, _) in enumerate(headers) if signature in index.signatures]
            digests = dict(zip(candidates, pool.map(_hash_or_error, [audio[i] for i in candidates])))
        for i, row in enumerate(rows):
            error = headers[i][1] or (digests[i][1] if i in digests else None)
            if error is not None:
                report.unreadable.append(f"{audio_ids[row]}: {error}")
            elif i in digests and digests[i][0] in index.hashes:
                removed.add(row)
                report.removed_by_content.append(audio_ids[row])
    filtered = (
        dataset.select([row for row in range(len(dataset)) if row not in removed]) if removed else dataset
    )
    if filtered is dataset:
        filtered = dataset.select(
            range(len(dataset))
        )  # a new Dataset, so the input's provenance is untouched
    record_filter(filtered, report.as_record())
    log = logger.warning if report.removed or report.unreadable else logger.info
    log(report.summary())
    if report.unreadable:
        shown = "\n  ".join(report.unreadable[:_LISTED_IN_WARNING])
        logger.warning(
            f"overlap filter: kept {len(report.unreadable)} clip(s) whose audio could not be hashed:\n  {shown}"
        )
    return filtered, report


def _flatten(reference: Dataset | DatasetDict | Sequence[Dataset | DatasetDict]) -> list[tuple[str, Dataset]]:
    items = [reference] if isinstance(reference, (Dataset, DatasetDict)) else list(reference)
    flat = []
    for item in items:
        for split, dataset in item.items() if isinstance(item, DatasetDict) else [(None, item)]:
            provenance = corpus_provenance(dataset) or {}
            if provenance.get("corpus"):
                name = f"{provenance['corpus']} {provenance.get('split', split or '')}".strip()
            else:
                name = f"split '{split}'" if split else "an unnamed dataset"
            flat.append((name, dataset))
    return flat


def _readable(audio: Any) -> Any:
    if isinstance(audio, dict):
        if audio.get("bytes") is not None:
            return io.BytesIO(audio["bytes"])
        return audio.get("path")
    return os.fspath(audio)


def _signature(audio: Any) -> tuple[tuple[int, int, int] | None, str | None]:
    """``((sample rate, channels, frames), None)`` from the header, or ``(None, reason)``."""
    try:
        info = soundfile.info(_readable(audio))
    except (soundfile.LibsndfileError, RuntimeError, OSError, TypeError) as error:
        return None, str(error)
    return (info.samplerate, info.channels, info.frames), None


def _hash_or_error(audio: Any) -> tuple[str | None, str | None]:
    try:
        return audio_content_hash(audio), None
    except (soundfile.LibsndfileError, RuntimeError, OSError, TypeError) as error:
        return None, str(error)


def _signature_and_hash(audio: Any) -> tuple[tuple[int, int, int] | None, str | None, str | None]:
    signature, error = _signature(audio)
    if error is not None:
        return None, None, error
    digest, error = _hash_or_error(audio)
    return signature, digest, error
