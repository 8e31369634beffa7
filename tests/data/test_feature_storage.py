"""Fixed-shape storage of audio features and the one-gather read of a batch."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Array2D, Array3D, Dataset, Features, List, Value, load_from_disk

from hf_atr.data.feature_storage import (
    ClipRows,
    GatheredRows,
    feature_storage_types,
    first_dimension_varies,
    fixed_shape_views,
    is_array_storage,
    lists_of_length,
    stack_rows,
    storage_type,
)


def _zeros(*shape, dtype=np.float32) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


@pytest.mark.parametrize(
    ("short", "long", "expected"),
    [
        (_zeros(1, 101, 64), _zeros(1, 101, 64), Array3D((1, 101, 64), "float32")),  # CLAP
        (_zeros(100, 32), _zeros(100, 32), Array2D((100, 32), "float32")),  # AST
        (_zeros(3, 80), _zeros(7, 80), Array2D((None, 80), "float32")),  # frames grow with the clip
        (_zeros(400), _zeros(800), List(Value("float32"))),  # wav2vec2's samples
        (_zeros(1, dtype=bool), _zeros(1, dtype=bool), List(Value("bool"), length=1)),  # CLAP's is_longer
        (np.float32(0), np.float32(1), Value("float32")),
        (
            _zeros(80, 3),
            _zeros(80, 7),
            List(List(Value("float32"))),
        ),  # frames last: only nested lists hold it
        (
            _zeros(1, 1, 1, 1, 1, 2),
            _zeros(1, 1, 1, 1, 1, 2),
            List(List(List(List(List(List(Value("float32"))))))),
        ),
    ],
)
def test_storage_type_follows_the_shapes_of_a_short_and_a_long_clip(short, long, expected):
    assert storage_type(short, long) == expected


def test_storage_type_rejects_features_of_different_ranks():
    with pytest.raises(
        ValueError, match=r"2 dimension\(s\) for one clip and 3 for another: \(3, 80\) and \(1, 3, 80\)"
    ):
        storage_type(_zeros(3, 80), _zeros(1, 3, 80))


def test_feature_storage_types_reads_the_first_row_of_each_output_and_checks_the_names():
    types = feature_storage_types(
        {"input_values": _zeros(1, 4, 2), "audio_attention_mask": _zeros(1, 4, dtype=np.int32)},
        {"input_values": _zeros(1, 9, 2), "audio_attention_mask": _zeros(1, 9, dtype=np.int32)},
    )
    assert types == {
        "input_values": Array2D((None, 2), "float32"),
        "audio_attention_mask": List(Value("int32")),
    }
    assert [first_dimension_varies(kind) for kind in types.values()] == [True, True]
    assert not first_dimension_varies(Array2D((4, 2), "float32"))
    assert not first_dimension_varies(List(Value("bool"), length=1))
    with pytest.raises(
        ValueError, match=r"outputs \['input_values'\] for one clip, \['input_features'\] for another"
    ):
        feature_storage_types({"input_values": _zeros(1, 2)}, {"input_features": _zeros(1, 2)})


def test_is_array_storage_is_true_for_array_types_only():
    assert is_array_storage(Array3D((1, 2, 3), "float32"))
    assert not is_array_storage(List(List(Value("float32"))))
    assert not is_array_storage(List(Value("bool"), length=1))


def test_stack_rows_pads_the_first_dimension_with_the_padding_value():
    arrays = [np.ones((2, 3), np.float32), 2 * np.ones((4, 3), np.float32)]
    stacked = stack_rows(arrays, ["a", "b"], "input_values", padding_value=-1.0)
    expected = np.array([[[1] * 3, [1] * 3, [-1] * 3, [-1] * 3], [[2] * 3] * 4], np.float32)
    np.testing.assert_array_equal(stacked, expected)
    assert stacked.dtype == np.float32


@pytest.mark.parametrize(
    ("arrays", "padding_value", "message"),
    [
        (
            [_zeros(2, 3), _zeros(4, 3)],
            None,
            r"'x' has different shapes across clips: \(2, 3\) for \['a'\]; \(4, 3\) for \['b'\]",
        ),
        ([_zeros(2, 3), _zeros(2, 4)], 0.0, r"\(2, 3\) for \['a'\]; \(2, 4\) for \['b'\]"),
        ([np.float32(1), _zeros(2)], 0.0, r"\(\) for \['a'\]; \(2,\) for \['b'\]"),
    ],
)
def test_stack_rows_names_the_clips_that_do_not_fit(arrays, padding_value, message):
    with pytest.raises(ValueError, match=message):
        stack_rows(arrays, ["a", "b"], "x", padding_value)


def _clips(tmp_path, features_type, values) -> Dataset:
    features = Features(
        {"audio_id": Value("string"), "captions": List(Value("string")), "input_values": features_type}
    )
    rows = {
        "audio_id": [f"clip{index}" for index in range(len(values))],
        "captions": [[f"a dog {index}", "a siren"] for index in range(len(values))],
        "input_values": values,
    }
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "clips"))
    return load_from_disk(str(tmp_path / "clips"))  # memory-mapped, as training reads it


def test_a_gather_of_array_rows_equals_the_python_rows_bitwise(tmp_path):
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((1, 5, 3)).astype(np.float32) for _ in range(6)]
    clips = _clips(tmp_path, Array3D((1, 5, 3), "float32"), values)
    indices = [4, 1, 1, 5]
    rows = ClipRows(clips).gather(indices)
    assert isinstance(rows, GatheredRows) and len(rows) == 4
    for row, index in zip(rows, indices):
        python_row = clips[index]
        assert row["audio_id"] == python_row["audio_id"] and row["captions"] == python_row["captions"]
        assert isinstance(row["input_values"], np.ndarray) and row["input_values"].dtype == np.float32
        np.testing.assert_array_equal(row["input_values"], np.asarray(python_row["input_values"], np.float32))
    stacked = rows.stacked("input_values")
    np.testing.assert_array_equal(stacked, np.stack([values[index] for index in indices]))


def test_gathered_rows_stack_only_while_the_rows_are_those_of_the_gather(tmp_path):
    values = [np.full((2, 3), index, np.float32) for index in range(3)]
    clips = _clips(tmp_path, Array2D((2, 3), "float32"), values)
    rows = ClipRows(clips).gather([0, 1, 2])
    assert rows.stacked("audio_id") is None  # not an array column
    rows.reverse()
    assert rows.stacked("input_values") is None
    rows = ClipRows(clips).gather([0, 1, 2])
    rows[1] = dict(rows[1], input_values=np.zeros((2, 3), np.float32))
    assert rows.stacked("input_values") is None
    copied = ClipRows(clips).gather([0, 1, 2])
    copied[0] = dict(copied[0])  # the same values in a new dict: still the gather's views
    np.testing.assert_array_equal(copied.stacked("input_values"), np.stack(values))


def test_frames_of_unequal_length_come_as_one_array_per_row(tmp_path):
    values = [np.full((frames, 2), frames, np.float32) for frames in (3, 5, 3)]
    clips = _clips(tmp_path, Array2D((None, 2), "float32"), values)
    rows = ClipRows(clips).gather([0, 1, 2])
    assert [row["input_values"].shape for row in rows] == [(3, 2), (5, 2), (3, 2)]
    assert rows.stacked("input_values") is None  # the collator pads them
    equal = ClipRows(clips).gather([0, 2])
    assert equal.stacked("input_values").shape == (2, 3, 2)


def test_nested_lists_are_read_as_python_rows(tmp_path):
    values = [np.full((2, 3), index, np.float32) for index in range(3)]
    clips = _clips(tmp_path, List(List(Value("float32"))), values)
    reader = ClipRows(clips)
    assert reader.array_columns == []
    rows = reader.gather([2, 0])
    assert rows == [clips[2], clips[0]]
    assert isinstance(rows[0]["input_values"], list) and rows.stacked("input_values") is None


def _chunked_clips(tmp_path, values) -> Dataset:
    """``Array3D`` rows saved in two shards and loaded back: two memory-mapped Arrow chunks, as large datasets are."""
    features = Features(
        {
            "audio_id": Value("string"),
            "captions": List(Value("string")),
            "input_values": Array3D(values[0].shape, "float32"),
        }
    )
    rows = {
        "audio_id": [f"clip{index}" for index in range(len(values))],
        "captions": [[f"a dog {index}", "a siren"] for index in range(len(values))],
        "input_values": values,
    }
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "chunked"), num_shards=2)
    return load_from_disk(str(tmp_path / "chunked"))


def _assert_rows_are_the_python_rows(rows, clips, indices):
    for row, index in zip(rows, indices):
        python_row = clips[index]
        assert row["audio_id"] == python_row["audio_id"] and row["captions"] == python_row["captions"]
        np.testing.assert_array_equal(row["input_values"], np.asarray(python_row["input_values"], np.float32))
    np.testing.assert_array_equal(
        rows.stacked("input_values"),
        np.stack([np.asarray(clips[index]["input_values"], np.float32) for index in indices]),
    )


def test_fixed_shape_views_are_zero_copy_views_of_each_chunk(tmp_path):
    rng = np.random.default_rng(1)
    values = [rng.standard_normal((1, 4, 3)).astype(np.float32) for _ in range(7)]
    clips = _chunked_clips(tmp_path, values)
    column = clips.data.column("input_values")
    assert len(column.chunks) == 2
    views = fixed_shape_views(column, (1, 4, 3), "float32")
    assert [view.shape for view in views] == [(4, 1, 4, 3), (3, 1, 4, 3)]
    assert all(not view.flags.owndata and not view.flags.writeable for view in views)  # on the Arrow buffer
    np.testing.assert_array_equal(np.concatenate(views), np.stack(values))
    # Lists that do not hold the shape's lengths, or another value type: not viewed.
    assert fixed_shape_views(column, (1, 6, 2), "float32") is None
    assert fixed_shape_views(column, (1, 4, 3), "float64") is None


def test_a_gather_across_chunks_equals_the_python_rows_bitwise(tmp_path):
    rng = np.random.default_rng(2)
    values = [rng.standard_normal((1, 4, 3)).astype(np.float32) for _ in range(7)]
    clips = _chunked_clips(tmp_path, values)
    reader = ClipRows(clips)
    indices = [6, 0, 3, 2, 2, 5]
    rows = reader.gather(indices)
    assert list(reader.mapped().views) == ["input_values"]
    assert rows.stacked("input_values").flags.writeable  # torch takes it without another copy
    _assert_rows_are_the_python_rows(rows, clips, indices)


@pytest.mark.parametrize(
    "select",
    [
        lambda clips: clips.shuffle(seed=0),  # an indices mapping
        lambda clips: clips.select([5, 1, 6, 2]),  # an indices mapping
        lambda clips: clips.select(range(2, 6)),  # a slice of the chunks, no mapping
        lambda clips: clips.train_test_split(test_size=3, seed=0)["train"],
    ],
)
def test_a_gather_follows_the_rows_of_a_shuffled_or_selected_dataset(tmp_path, select):
    rng = np.random.default_rng(3)
    values = [rng.standard_normal((1, 4, 3)).astype(np.float32) for _ in range(7)]
    clips = select(_chunked_clips(tmp_path, values))
    indices = [len(clips) - 1, 0, 1, 1]
    reader = ClipRows(clips)
    rows = reader.gather(indices)
    assert list(reader.mapped().views) == ["input_values"]
    _assert_rows_are_the_python_rows(rows, clips, indices)


def test_a_null_feature_row_falls_back_to_the_arrow_gather(tmp_path):
    values = [np.full((2, 3), index, np.float32) for index in range(3)]
    clips = _clips(tmp_path, Array2D((2, 3), "float32"), [values[0], None, values[2]])
    reader = ClipRows(clips)
    assert fixed_shape_views(clips.data.column("input_values"), (2, 3), "float32") is None
    rows = reader.gather([2, 0])
    assert reader.mapped().views == {}
    _assert_rows_are_the_python_rows(rows, clips, [2, 0])


def test_a_pickled_reader_leaves_the_views_behind_and_views_again(tmp_path):
    """A DataLoader worker started by spawn gets the dataset pickled: the column must not travel with it."""
    import pickle

    rng = np.random.default_rng(4)
    values = [rng.standard_normal((1, 64, 32)).astype(np.float32) for _ in range(6)]
    clips = _clips(tmp_path, Array3D((1, 64, 32), "float32"), values)
    reader = ClipRows(clips)
    expected = reader.gather([4, 1]).stacked("input_values")
    pickled = pickle.dumps(reader)
    assert len(pickled) < np.stack(values).nbytes / 4
    copy = pickle.loads(pickled)
    np.testing.assert_array_equal(copy.gather([4, 1]).stacked("input_values"), expected)


@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_lists_of_length_checks_every_block_of_offsets(block):
    assert lists_of_length(np.array([4, 7, 10, 13, 16], np.int32), 3, block)
    assert not lists_of_length(np.array([4, 7, 10, 12, 16], np.int32), 3, block)  # one list of 2, one of 4
    assert not lists_of_length(np.array([0, 3, 6, 9, 13], np.int32), 3, block)  # the last list
    assert lists_of_length(np.array([5], np.int32), 3, block)  # no lists
