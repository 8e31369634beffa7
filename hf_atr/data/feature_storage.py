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
import pyarrow as pa
from datasets import Array2D, Array3D, Array4D, Array5D, Features, List, Value

FEATURE_STORAGE_VERSION = 3
"""How features are stored: 1 nested lists (what ``Dataset.map`` infers), 2 the array types of
:func:`feature_storage_types`, 3 the same arrays with every clip longer than the window cut to its head (under 2,
CLAP's ``rand_trunc`` stored a random crop). Part of ``hf-atr train``'s feature cache key, so that a cache written another way is
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


def lists_of_length(offsets: np.ndarray, length: int, block: int = 1 << 20) -> bool:
    """Whether the Arrow list ``offsets`` ``(lists + 1,)`` mark lists of ``length`` values each (checked ``block``
    lists at a time, so that a large chunk needs no temporary of its size)."""
    return all(
        bool(np.all(np.diff(offsets[start : start + block + 1]) == length))
        for start in range(0, max(len(offsets) - 1, 0), block)
    )


def fixed_shape_views(column: Any, shape: Sequence[int], dtype: str) -> list[np.ndarray] | None:
    """Zero-copy NumPy views ``(rows, *shape)`` of the chunks of a fixed-shape array column (``Array2D``..``Array5D``
    without a dynamic dimension), on the memory it is read from (the memory-mapped Arrow file of a saved dataset).

    ``datasets`` stores such a column as nested variable-length lists; a chunk is viewed as one array when no row
    or inner list is null and every list at every level holds exactly the shape's length, so that the innermost
    values lie row after row.

    Args:
        column: the ``pyarrow.ChunkedArray`` of the column (its extension type's storage is read).
        shape, dtype: the column's ``datasets`` array type.

    Returns:
        one view per chunk, or ``None`` when a chunk is not laid out so (then rows are read through Arrow).
    """
    views = []
    for chunk in column.chunks:
        level = chunk.storage if hasattr(chunk, "storage") else chunk
        for length in shape:
            if level.null_count:
                return None
            if not lists_of_length(level.offsets.to_numpy(), length):
                return None
            level = level.flatten()
        if level.null_count or level.type != pa.from_numpy_dtype(np.dtype(dtype)):
            return None
        views.append(level.to_numpy(zero_copy_only=True).reshape(len(chunk), *shape))
    return views


class ClipRows:
    """Rows of a clip dataset read in one gather: the audio features stored as arrays (:func:`is_array_storage`) as
    NumPy arrays, every other column as ``datasets`` gives it in Python (features stored as nested lists, by
    datasets saved before hf-atr stored them as fixed-shape arrays, as Python lists, as they always were).

    A fixed-shape array column is viewed once as NumPy arrays on the memory-mapped file (:func:`fixed_shape_views`)
    and a batch is copied out of them row by row into one new array: one copy, no per-row Arrow slice. Array
    columns whose frames vary are converted from Arrow once per batch (one array per row where frames differ).

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
        self._clips = clips
        self._mapped: MappedColumns | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A DataLoader worker started by spawn gets this by pickling: the views would pickle as the whole column.
        return {**self.__dict__, "_mapped": None}

    def mapped(self) -> MappedColumns:
        """The array columns that :func:`fixed_shape_views` can view, viewed on first use in each process."""
        if self._mapped is None:
            self._mapped = MappedColumns(self._clips, self.array_columns)
        return self._mapped

    def gather(self, clip_indices: Sequence[int]) -> GatheredRows:
        """The rows ``clip_indices`` (repeats allowed) as a list of dicts, read in one gather."""
        indices = [int(index) for index in clip_indices]
        if not self.array_columns:
            columns = self._clips[indices]
            return GatheredRows(
                [{name: values[row] for name, values in columns.items()} for row in range(len(indices))], {}
            )
        mapped = self.mapped()
        positions = mapped.positions(indices)
        arrays = mapped.gather(positions)
        table = mapped.rest.take(positions)
        # datasets' NumPy formatter converts each gathered row on its own, then stacks them: one conversion of the
        # gathered column is several times faster (benchmarks/trainer_throughput.py).
        arrays.update(
            {
                name: table.column(name).combine_chunks().to_numpy()
                for name in self.array_columns
                if name not in arrays
            }
        )
        others = [name for name in table.column_names if name not in arrays]
        columns = {
            **Features({name: self.features[name] for name in others}).decode_batch(
                table.select(others).to_pydict()
            ),
            **arrays,
        }
        rows = [{name: columns[name][row] for name in mapped.column_names} for row in range(len(indices))]
        return GatheredRows(rows, {name: array for name, array in arrays.items() if array.dtype != object})


class MappedColumns:
    """The fixed-shape array columns of a clip dataset viewed as NumPy arrays (:func:`fixed_shape_views`), and the
    table of its other columns (``rest``) for :class:`ClipRows` to gather.

    Args:
        clips: a ``datasets.Dataset``.
        array_columns: its columns stored as array types.
    """

    def __init__(self, clips: Any, array_columns: Sequence[str]) -> None:
        self.column_names = list(clips.column_names)
        self.views: dict[str, list[np.ndarray]] = {}
        self.starts: dict[str, np.ndarray] = {}
        for name in array_columns:
            feature = clips.features[name]
            if first_dimension_varies(feature):
                continue
            column = clips.data.column(name)
            views = fixed_shape_views(column, feature.shape, feature.dtype)
            if views is not None:
                self.views[name] = views
                self.starts[name] = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
        # The rows of the table behind the dataset's rows: datasets keeps no public accessor for the indices mapping
        # that ``shuffle``, ``select`` and ``train_test_split`` leave.
        self.mapping = None if clips._indices is None else clips._indices.column(0).to_numpy()
        self.rest = clips.data.table.select([name for name in self.column_names if name not in self.views])

    def positions(self, indices: Sequence[int]) -> np.ndarray:
        """The rows of the table behind the dataset's rows ``indices``."""
        positions = np.asarray(indices, dtype=np.int64)
        return positions if self.mapping is None else self.mapping[positions].astype(np.int64)

    def gather(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        """``column -> (batch, *shape)`` array of the table's rows ``positions``, copied once out of the views."""
        arrays = {}
        for name, views in self.views.items():
            starts = self.starts[name]
            chunks = np.searchsorted(starts, positions, side="right") - 1
            batch = np.empty((len(positions), *views[0].shape[1:]), dtype=views[0].dtype)
            for row, (chunk, offset) in enumerate(
                zip(chunks.tolist(), (positions - starts[chunks]).tolist())
            ):
                batch[row] = views[chunk][offset]
            arrays[name] = batch
        return arrays


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
    "MappedColumns",
    "feature_storage_types",
    "first_dimension_varies",
    "fixed_shape_views",
    "is_array_storage",
    "lists_of_length",
    "stack_rows",
    "storage_type",
]
