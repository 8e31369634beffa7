"""The audio-feature cache of ``hf-atr train``: each split's features extracted once into an Arrow file named
after what determines them (:func:`feature_cache_key`), with the count of clips the extractor cut beside it.

The main process extracts; the other processes, and later runs with the same key, read its file. The key carries
:data:`~hf_atr.data.feature_storage.FEATURE_STORAGE_VERSION`, so a cache written another way is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

import datasets
from datasets import Dataset
from transformers import TrainingArguments
from transformers.utils import logging

from ...data.feature_storage import FEATURE_STORAGE_VERSION
from ...processing_atr import AtrProcessor
from ...windowing import collect_cut_clips, extractor_window
from .data_arguments import FEATURES_CACHE_SUBDIRECTORY, DataArguments

logger = logging.get_logger(__name__)

CUTS_SUFFIX = ".cuts.json"
"""Beside a features cache file: how many of the split's clips the extractor cut to its window."""


def feature_cache_key(dataset: Dataset, processor: AtrProcessor, backend: str) -> str:
    """A digest of what a split's features depend on: the dataset's fingerprint (its rows and the
    transforms that made them), each audio file's size and modification time (for clips read from a
    path), the feature extractor's settings, the backend and how the features are stored
    (:data:`~hf_atr.data.feature_storage.FEATURE_STORAGE_VERSION`: a cache written another way is rebuilt, never
    read as this one)."""
    digest = hashlib.sha256()
    settings = [dataset._fingerprint, processor.feature_extractor.to_dict(), backend, FEATURE_STORAGE_VERSION]
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for batch in dataset.select_columns(["audio"]).with_format("arrow").iter(batch_size=1024):
        audio = batch.column("audio").combine_chunks()
        for path, has_bytes in zip(
            audio.field("path").to_pylist(), audio.field("bytes").is_valid().to_pylist()
        ):
            if has_bytes or path is None:
                continue
            try:
                stat = os.stat(path)
                digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
            except OSError:
                digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()[:16]


class ExtractedSplit(NamedTuple):
    """A split's audio features and how many of its clips the extractor cut to its window (``None``: not
    known, for features saved with the dataset or cached before the count was kept)."""

    features: Dataset
    clips_cut: int | None


def extract_features(
    processor: AtrProcessor, dataset: Dataset, role: str, data: DataArguments, training: TrainingArguments
) -> ExtractedSplit:
    """``dataset`` with its audio features, from (or into) the cache file named by :func:`feature_cache_key`,
    and the number of clips cut to the extractor's window (kept beside the cache file, in ``<name>.cuts.json``).

    The main process extracts; the other processes wait and read its file. A dataset saved with its features
    and without ``audio`` (``processor.extract_audio_features(corpus).save_to_disk(...)``) is used as it is.

    Raises:
        ValueError: the dataset has neither ``audio`` nor the processor's feature column.
    """
    if "audio" not in dataset.column_names:
        if processor.audio_input_name in dataset.column_names:
            logger.info(
                f"The {role} split has {processor.audio_input_name!r} and no 'audio': using its features."
            )
            return ExtractedSplit(dataset, None)
        raise ValueError(
            f"The {role} split has neither an 'audio' column nor the features {processor.audio_input_name!r} of "
            f"the starting point's processor; its columns: {dataset.column_names}."
        )
    cache_dir = Path(
        data.features_cache_dir or Path(datasets.config.HF_DATASETS_CACHE) / FEATURES_CACHE_SUBDIRECTORY
    )
    cache_dir = cache_dir.expanduser()
    with training.main_process_first(desc=f"audio features of the {role} split"):
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache_file = cache_dir / f"{role}-{feature_cache_key(dataset, processor, data.feature_backend)}.arrow"
        cuts_file = cache_file.with_suffix(CUTS_SUFFIX)
        cached = cache_file.exists()
        if cached:
            logger.info(f"Reading the {role} split's audio features from {cache_file}.")
        with collect_cut_clips(role, extractor_window(processor.feature_extractor), log=False) as cut:
            features = processor.extract_audio_features(
                dataset,
                batch_size=data.feature_batch_size,
                feature_backend=data.feature_backend,
                cache_file_name=str(cache_file),
                split=role,
            )
        if cached:  # nothing was extracted: the count is the one kept when the file was written
            return ExtractedSplit(features, _read_cut_count(cuts_file))
        cuts_file.write_text(json.dumps({"clips_cut_to_window": len(cut.names)}))
        return ExtractedSplit(features, len(cut.names))


def _read_cut_count(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["clips_cut_to_window"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a cache written before the count was kept, or damaged: not known


__all__ = ["CUTS_SUFFIX", "ExtractedSplit", "extract_features", "feature_cache_key"]
