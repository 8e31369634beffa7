"""How an index is stored: files checked when read, fingerprints, format migrations, atomic replacement."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from pipeline_setups import filled_index, unit_vectors, windowed_index
from tiny_models import make_model

from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.index_storage import (
    FORMAT_VERSION,
    MIGRATIONS,
    IndexFormatError,
    IndexMismatchError,
    model_fingerprint,
    read_index_files,
    replaced_atomically,
    write_index_files,
)


def test_truncated_file_is_reported_as_corrupt(tmp_path):
    filled_index(unit_vectors(20)).save(tmp_path, "audio_index")
    path = tmp_path / "audio_index.safetensors"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(IndexFormatError, match="audio_index.safetensors is corrupt"):
        EmbeddingIndex.load(tmp_path, "audio_index")


def test_edited_ids_file_is_reported(tmp_path):
    filled_index(unit_vectors(20)).save(tmp_path, "audio_index")
    ids_path = tmp_path / "audio_index.json"
    entries = json.loads(ids_path.read_text())
    entries["ids"][0] = "other"
    ids_path.write_text(json.dumps(entries))
    with pytest.raises(IndexFormatError, match="ids JSON file does not match"):
        EmbeddingIndex.load(tmp_path, "audio_index")


def test_missing_file_is_reported(tmp_path):
    filled_index(unit_vectors(20)).save(tmp_path, "audio_index")
    (tmp_path / "audio_index.json").unlink()
    with pytest.raises(IndexFormatError, match="audio_index.json is missing"):
        EmbeddingIndex.load(tmp_path, "audio_index")


def test_dimension_and_fingerprint_mismatch_are_reported(tmp_path):
    filled_index(unit_vectors(20), fingerprint="model-a").save(tmp_path, "audio_index")
    with pytest.raises(IndexFormatError, match="holds 16-d embeddings but the model produces 32-d"):
        EmbeddingIndex.load(tmp_path, "audio_index", expected_dim=32)
    with pytest.raises(IndexFormatError, match="fingerprint model-a.*Rebuild"):
        EmbeddingIndex.load(tmp_path, "audio_index", expected_fingerprint="model-b")


def test_fingerprint_follows_the_weights():
    model = make_model()
    same = make_model()
    other = make_model(seed=1)
    assert model_fingerprint(model) == model_fingerprint(same)
    assert model_fingerprint(model) != model_fingerprint(other)


def test_format_1_indexes_load_as_format_2_without_spans_or_root(tmp_path):
    fixture = (
        Path(__file__).resolve().parents[1] / "fixtures" / "format_v0" / "model_cosine" / "retrieval_index"
    )
    saved = json.loads((fixture / "audio_index.json").read_text())
    assert set(saved) == {"ids", "captions"}  # written by an hf-atr of index format 1
    loaded = EmbeddingIndex.load(fixture, "audio_index")
    assert loaded.ids == saved["ids"] and loaded.spans is None and loaded.root is None
    assert MIGRATIONS["1"](saved) == {**saved, "spans": None, "root": None} and FORMAT_VERSION == "3"
    loaded.save(tmp_path, "audio_index")  # saved again in the current format
    again = EmbeddingIndex.load(tmp_path, "audio_index")
    np.testing.assert_array_equal(again.embeddings, loaded.embeddings)


def test_format_2_indexes_load_as_window_entries_and_frame_resolution_round_trips(tmp_path):
    """Index format 3 added ``frame_seconds``; a format-2 index (ids JSON without it) holds window entries."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    index, _, _ = windowed_index()
    index.save(tmp_path, "audio_index")
    entries = json.loads((tmp_path / "audio_index.json").read_text())
    assert entries.pop("frame_seconds") is None
    ids_text = json.dumps(entries, ensure_ascii=False)
    (tmp_path / "audio_index.json").write_text(ids_text)
    path = tmp_path / "audio_index.safetensors"
    with safe_open(path, framework="pt") as handle:
        metadata, tensors = handle.metadata(), {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    digest = hashlib.sha256(ids_text.encode()).hexdigest()
    save_file(tensors, path, {**metadata, "format_version": "2", "ids_sha256": digest})
    loaded = EmbeddingIndex.load(tmp_path, "audio_index")
    assert loaded.frame_seconds is None and loaded.spans == index.spans and loaded.ids == index.ids
    frames = EmbeddingIndex(16, frame_seconds=0.2)
    frames.add(unit_vectors(2), ["take.wav", "take.wav"], spans=[(0.0, 0.2), (0.2, 0.4)])
    frames.save(tmp_path / "frames", "audio_index")
    assert EmbeddingIndex.load(tmp_path / "frames", "audio_index").frame_seconds == 0.2


def test_an_unknown_format_version_is_named(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    filled_index(unit_vectors(3)).save(tmp_path, "audio_index")
    path = tmp_path / "audio_index.safetensors"
    with safe_open(path, framework="pt") as handle:
        metadata, tensors = handle.metadata(), {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    save_file(tensors, path, {**metadata, "format_version": "9"})
    with pytest.raises(
        IndexFormatError, match=r"format version '9'; this hf-atr reads versions \['1', '2', '3'\]"
    ):
        EmbeddingIndex.load(tmp_path, "audio_index")


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_saved_files_get_the_permissions_of_any_new_file(tmp_path, umask):
    previous = os.umask(umask)
    try:
        written = filled_index(unit_vectors(3)).save(tmp_path / "index", "audio_index")
    finally:
        os.umask(previous)
    assert {oct(stat.S_IMODE(path.stat().st_mode)) for path in written} == {oct(0o666 & ~umask)}
    assert sorted(path.name for path in (tmp_path / "index").iterdir()) == [
        "audio_index.json",
        "audio_index.safetensors",
    ]  # no temporary file left behind


def test_a_failed_save_keeps_the_previous_file_whole(tmp_path):
    filled_index(unit_vectors(3)).save(tmp_path, "audio_index")
    before = (tmp_path / "audio_index.json").read_bytes()
    with (
        pytest.raises(RuntimeError, match="disk full"),
        replaced_atomically(tmp_path / "audio_index.json") as partial,
    ):
        partial.write_text('{"ids": [')
        raise RuntimeError("disk full")
    assert (tmp_path / "audio_index.json").read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audio_index.json", "audio_index.safetensors"]


def test_read_index_files_gives_what_write_index_files_wrote_migrated_and_checked(tmp_path):
    vectors = unit_vectors(3).numpy()
    entries = {"ids": ["a.wav", "a.wav", "b.wav"], "captions": None, "spans": [[0, 1], [1, 2], [0, 1]]}
    entries |= {"root": "/data", "frame_seconds": None}
    parameters = {"nlist": None, "nprobe": 16, "hnsw_m": 32, "ef_search": 64, "ef_construction": 80}
    written = write_index_files(
        tmp_path,
        "audio_index",
        vectors,
        entries,
        metric="l2",
        kind="hnsw",
        parameters=parameters,
        fingerprint=None,
    )
    assert [path.name for path in written] == ["audio_index.safetensors", "audio_index.json"]
    stored = read_index_files(tmp_path, "audio_index", expected_dim=16, expected_fingerprint="any")
    np.testing.assert_array_equal(stored.vectors, vectors)
    assert (stored.metric, stored.kind, stored.parameters, stored.fingerprint) == (
        "l2",
        "hnsw",
        parameters,
        None,
    )
    assert stored.entries == {**entries, "spans": [(0, 1), (1, 2), (0, 1)]}
    with pytest.raises(
        IndexMismatchError, match="holds 16-d embeddings but the model produces 8-d"
    ) as raised:
        read_index_files(tmp_path, "audio_index", expected_dim=8)
    assert (raised.value.directory, raised.value.name) == (tmp_path, "audio_index")
