"""A dataset's audio featurised once by an :class:`~hf_atr.processing_atr.AtrProcessor` (``Dataset.map``), what
:meth:`AtrProcessor.extract_audio_features <hf_atr.processing_atr.AtrProcessor.extract_audio_features>` runs: clips
that cannot be decoded left out and named, clips cut to the extractor's window counted and named."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from datasets import Features, Value
from transformers.utils import logging

from hf_atr.data.audio_arrays import AudioDecodeError

from .data.audio import decode_audio
from .windowing import collect_cut_clips, extractor_window, minimum_samples

DECODE_ERROR_COLUMN = "_audio_decode_error"
"""Temporary column of :func:`extract_split`: why a clip could not be decoded."""
FAILED_CLIPS_NAMED = 10
"""How many undecodable clips the warning names (the count covers all of them)."""

logger = logging.get_logger(__name__)

Featurize = Callable[[Sequence[np.ndarray], Sequence[str]], dict[str, Any]]
"""``featurize(arrays, names)``: the processor's audio inputs (NumPy) of float32 mono ``arrays`` at its rate, the
clips named by ``names`` in its warnings."""


def extract_split(
    processor: Any,
    featurize: Featurize,
    dataset: Any,
    *,
    split: str | None,
    audio_column: str,
    batch_size: int,
    num_proc: int | None,
    keep_audio: bool,
    strict: bool,
    cache_file_name: str | None,
) -> Any:
    """``dataset`` (a ``datasets.Dataset``) with the audio inputs of ``processor`` as fixed-shape columns
    (:meth:`~hf_atr.processing_atr.AtrProcessor.feature_storage_types`), computed by ``featurize`` on each map batch;
    the audio column dropped unless ``keep_audio``. The arguments are
    :meth:`~hf_atr.processing_atr.AtrProcessor.extract_audio_features`'.

    Raises:
        AudioDecodeError: with ``strict``, at the first clip that cannot be decoded.
    """
    extractor = processor.feature_extractor
    placeholder = np.zeros(minimum_samples(extractor), dtype=np.float32)

    def featurize_batch(batch: dict[str, list], indices: list[int]) -> dict[str, Any]:
        names = [str(name) for name in batch.get("audio_id", indices)]
        arrays, errors = [], []
        for value, name in zip(batch[audio_column], names):
            try:
                arrays.append(decode_audio(value, processor.sampling_rate, source=name))
                errors.append("")
            except AudioDecodeError as error:
                if strict:
                    raise
                arrays.append(placeholder)  # keeps the batch's shape; the row is filtered out below
                errors.append(error.reason)
        return {**featurize(arrays, names), DECODE_ERROR_COLUMN: errors}

    remove_columns = None if keep_audio else [audio_column]
    kept = {name: kind for name, kind in dataset.features.items() if keep_audio or name != audio_column}
    stored = Features({**kept, **processor.feature_storage_types(), DECODE_ERROR_COLUMN: Value("string")})
    cache = {} if cache_file_name is None else {"cache_file_name": cache_file_name}
    where = f"split {split!r}" if split is not None else "the dataset"
    with collect_cut_clips(f"extract_audio_features on {where}", extractor_window(extractor)):
        featurized = dataset.map(
            featurize_batch,
            batched=True,
            batch_size=batch_size,
            num_proc=num_proc,
            with_indices=True,
            remove_columns=remove_columns,
            features=stored,
            desc=f"Extracting audio features of {where}",
            **cache,
        )
    errors = featurized[DECODE_ERROR_COLUMN]
    failed = [row for row, error in enumerate(errors) if error]
    if failed:
        names = featurized.select(failed)["audio_id"] if "audio_id" in featurized.column_names else failed
        listed = "; ".join(f"{name} ({errors[row]})" for name, row in zip(names[:FAILED_CLIPS_NAMED], failed))
        more = f" and {len(failed) - FAILED_CLIPS_NAMED} more" if len(failed) > FAILED_CLIPS_NAMED else ""
        logger.warning(
            f"extract_audio_features: {len(failed)} of {len(errors)} clip(s) of {where} cannot be decoded "
            f"and are left out: {listed}{more}. Pass strict=True to stop at the first instead."
        )
        failed_rows = set(failed)
        featurized = featurized.select([row for row in range(len(errors)) if row not in failed_rows])
    return featurized.remove_columns(DECODE_ERROR_COLUMN)


__all__ = ["DECODE_ERROR_COLUMN", "FAILED_CLIPS_NAMED", "extract_split"]
