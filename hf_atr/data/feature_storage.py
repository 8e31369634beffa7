"""How precomputed audio features are stored in a ``datasets.Dataset`` and read back in batches.

``Dataset.map`` stores a NumPy array it is given as nested lists (``List(List(Value("float32")))``) unless it is
told the column's type; read back as Python rows, 256 CLAP-size features ``(1, 1001, 64)`` then take over a
second. Stored as a fixed-shape ``Array2D``..``Array5D`` (its first dimension ``None`` where the number of frames
varies from clip to clip), a batch of rows is read in one gather, in NumPy format, as one array (or, with a
dynamic first dimension and unequal lengths, one array per row). :func:`feature_storage_types` picks the types
from what the extractor gives for two clips of different lengths; :class:`ClipRows` reads rows that way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from datasets import Array2D, Array3D, Array4D, Array5D, Features, List, Value

FEATURE_STORAGE_VERSION = 2
"""How features are stored: 1 nested lists (what ``Dataset.map`` infers), 2 the array types of
:func:`feature_storage_types`. Part of ``hf-atr train``'s feature cache key, so that a cache written another way is
never read as if it were this one."""
ARRAY_TYPES = {2: Array2D, 3: Array3D, 4: Array4D, 5: Array5D}
"""``datasets`` array types by the number of dimensions of one row's value."""
AUDIO_FEATURE_COLUMNS = ("input_values", "input_features", "audio_attention_mask", "is_longer")
"""Columns of model audio inputs that :class:`ClipRows` reads as NumPy arrays when stored as arrays."""


def storage_type(short: np.ndarray, long: np.ndarray) -> Any:
    """The ``datasets`` type that stores one feature, from its values for one short and one longer clip.

    Args:
        short, long: the feature of one clip each (without the batch dimension), e.g. ``(frames, bins)``.

    Returns:
        a scalar: its ``Value``; equal shapes: ``Array{n}D(shape)`` (a ``List`` of fixed ``length`` for one dimension); only the first
        dimension differs (frames that grow with the clip): ``Array{n}D((None, *rest))`` (a ``List``); otherwise,
        or more than five dimensions, nested ``List``\\ s, as ``Dataset.map`` would infer.
    """
    value = Value(short.dtype.name)
    if short.ndim != long.ndim:
        raise ValueError(
            f"The feature has {short.ndim} dimension(s) for one clip and {long.ndim} for another: {short.shape} "
            f"and {long.shape}."
        )
    if short.ndim == 0:
        return value
    first_varies = short.shape[0] != long.shape[0]
    rest_equal = short.shape[1:] == long.shape[1:]
    if short.ndim == 1 and rest_equal:
        return List(value) if first_varies else List(value, length=short.shape[0])
    if short.ndim in ARRAY_TYPES and rest_equal:
        shape = (None if first_varies else short.shape[0], *short.shape[1:])
        return ARRAY_TYPES[short.ndim](shape=shape, dtype=value.dtype)
    nested: Any = value
    for _ in range(short.ndim):
        nested = List(nested)
    return nested


def feature_storage_types(short: Mapping[str, Any], long: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`storage_type` of every output of a feature extractor, from its outputs for a batch of one short
    clip and a batch of one longer clip (``name -> (1, ...)`` arrays)."""
    if set(short) != set(long):
        raise ValueError(
            f"The extractor gave the outputs {sorted(short)} for one clip, {sorted(long)} for another."
        )
    return {name: storage_type(np.asarray(short[name])[0], np.asarray(long[name])[0]) for name in short}


def is_array_storage(feature: Any) -> bool:
    """Whether a column of this ``datasets`` type is an array type (``Array2D``..``Array5D``), which
    :class:`ClipRows` reads as NumPy arrays."""
    return isinstance(feature, (Array2D, Array3D, Array4D, Array5D))


def first_dimension_varies(feature: Any) -> bool:
    """Whether a column of this ``datasets`` type (one of :func:`storage_type`'s) holds rows whose first dimension
    differs from clip to clip."""
    if isinstance(feature, (Array2D, Array3D, Array4D, Array5D)):
        return feature.shape[0] is None
    return isinstance(feature, List) and feature.length == -1


def stack_rows(
    arrays: Sequence[np.ndarray], names: Sequence[str], feature: str, padding_value: float | None = None
) -> np.ndarray:
    """One ``(batch, ...)`` array of the per-clip arrays of ``feature``. With a ``padding_value``, arrays that
    differ in their first dimension only (frames stored with a dynamic first dimension) are each padded at the end
    to the longest, as the feature extractor pads a batch.

    Raises:
        ValueError: the shapes differ (beyond the first dimension when padding); the message names the clips
            (``names``, one per array) of each shape.
    """
    shapes = {array.shape for array in arrays}
    if len(shapes) == 1:
        return np.stack(arrays)
    if padding_value is None or () in shapes or len({shape[1:] for shape in shapes}) > 1:
        clips_by_shape: dict[tuple[int, ...], list[str]] = {}
        for name, array in zip(names, arrays):
            clips_by_shape.setdefault(array.shape, []).append(name)
        listed = "; ".join(f"{shape} for {ids[:5]}" for shape, ids in clips_by_shape.items())
        raise ValueError(
            f"Feature {feature!r} has different shapes across clips: {listed}. Extract features with "
            "padding/truncation to a fixed length."
        )
    frames = max(array.shape[0] for array in arrays)
    stacked = np.full((len(arrays), frames, *arrays[0].shape[1:]), padding_value, dtype=arrays[0].dtype)
    for row, array in enumerate(arrays):
        stacked[row, : array.shape[0]] = array
    return stacked


class ClipRows:
    """Rows of a clip dataset read in one gather: the audio features stored as arrays (:func:`is_array_storage`) as
    NumPy arrays, converted from Arrow once per batch (one copy; one array per row where frames differ), every
    other column as ``datasets`` gives it in Python (features stored as nested lists, by datasets saved before
    issue 22, as Python lists, as they always were).

    Args:
        clips: a ``datasets.Dataset``.
    """

    def __init__(self, clips: Any) -> None:
        self.features = clips.features
        self.array_columns = [
            name
            for name in AUDIO_FEATURE_COLUMNS
            if name in self.features and is_array_storage(self.features[name])
        ]
        self._clips = clips.with_format("arrow") if self.array_columns else clips

    def gather(self, clip_indices: Sequence[int]) -> GatheredRows:
        """The rows ``clip_indices`` (repeats allowed) as a list of dicts, read in one gather."""
        indices = [int(index) for index in clip_indices]
        if not self.array_columns:
            columns = self._clips[indices]
            return GatheredRows(
                [{name: values[row] for name, values in columns.items()} for row in range(len(indices))], {}
            )
        table = self._clips[indices]
        # datasets' NumPy formatter converts each gathered row on its own, then stacks them: one conversion of the
        # gathered column is several times faster (benchmarks/trainer_throughput.py).
        arrays = {name: table.column(name).combine_chunks().to_numpy() for name in self.array_columns}
        others = [name for name in table.column_names if name not in arrays]
        columns = {
            **Features({name: self.features[name] for name in others}).decode_batch(
                table.select(others).to_pydict()
            ),
            **arrays,
        }
        rows = [{name: columns[name][row] for name in table.column_names} for row in range(len(indices))]
        return GatheredRows(rows, {name: array for name, array in arrays.items() if array.dtype != object})


class GatheredRows(list):
    """The rows of one :meth:`ClipRows.gather` (a list of dicts, what collators take) and the arrays its array
    columns were read into, of which each row holds a view: :meth:`stacked` hands a collator the batch without
    stacking the rows again."""

    def __init__(self, rows: list[dict[str, Any]], arrays: dict[str, np.ndarray]) -> None:
        super().__init__(rows)
        self.arrays = arrays
        self._views = {name: [row[name] for row in rows] for name in arrays}

    def stacked(self, name: str) -> np.ndarray | None:
        """``name`` of every row as one ``(batch, ...)`` array, when the rows still hold the views of the gather,
        in its order (a collator that replaced or reordered them gets ``None`` and stacks them itself)."""
        views = self._views.get(name)
        if views is None or len(views) != len(self):
            return None
        if not all(row.get(name) is view for row, view in zip(self, views)):
            return None
        return self.arrays[name]


__all__ = [
    "AUDIO_FEATURE_COLUMNS",
    "FEATURE_STORAGE_VERSION",
    "ClipRows",
    "GatheredRows",
    "feature_storage_types",
    "first_dimension_varies",
    "is_array_storage",
    "stack_rows",
    "storage_type",
]
