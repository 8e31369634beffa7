"""EmbeddingIndex against brute-force torch search; safetensors round trip; corrupt and mismatched files."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import make_model

from hf_atr.pipelines.index import (
    FORMAT_VERSION,
    MIGRATIONS,
    EmbeddingIndex,
    IndexFormatError,
    metric_for_scoring,
    model_fingerprint,
    replaced_atomically,
)


def unit_vectors(count: int, dim: int = 16, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(count, dim, generator=generator), dim=-1)


def filled_index(vectors: torch.Tensor, **options) -> EmbeddingIndex:
    index = EmbeddingIndex(vectors.shape[1], **options)
    index.add(vectors, [f"item{i}" for i in range(len(vectors))])
    return index


@pytest.mark.parametrize("metric", ["inner_product", "l2"])
def test_flat_search_matches_brute_force(metric):
    items, queries = unit_vectors(300), unit_vectors(7, seed=1)
    index = EmbeddingIndex(16, metric=metric)
    index.add(items[:100], [f"item{i}" for i in range(100)])  # added in two batches
    index.add(items[100:], [f"item{i}" for i in range(100, 300)])
    scores, positions = index.search(queries, top_k=10)
    reference = queries @ items.T if metric == "inner_product" else -torch.cdist(queries, items)
    expected = reference.topk(10, dim=1)
    # Positions may swap within float-rounding ties; the scores of the returned items must be the top ones.
    np.testing.assert_allclose(scores, expected.values.numpy(), atol=1e-5)
    np.testing.assert_allclose(reference.gather(1, torch.from_numpy(positions)).numpy(), scores, atol=1e-5)
    assert (positions == expected.indices.numpy()).mean() > 0.9


def test_mahalanobis_transform_then_l2_ranks_like_the_scoring_head():
    model = make_model(scoring="mahalanobis")
    with torch.no_grad():
        random_matrix = torch.randn(16, 16, generator=torch.Generator().manual_seed(3))
        model.scoring_head.metric_matrix.copy_(random_matrix @ random_matrix.T / 16)
    items, queries = unit_vectors(50), unit_vectors(4, seed=2)
    head = model.scoring_head
    index = EmbeddingIndex(16, metric=metric_for_scoring("mahalanobis"))
    index.add(head.transform(items), [str(i) for i in range(50)])
    scores, positions = index.search(head.transform(queries), top_k=5)
    expected = head.similarity(queries, items).detach().topk(5, dim=1)
    np.testing.assert_array_equal(positions, expected.indices.numpy())
    np.testing.assert_allclose(scores, expected.values.numpy(), atol=1e-4)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_find_the_item_itself(kind):
    items = unit_vectors(800)
    index = filled_index(items, kind=kind, nprobe=4)
    _, positions = index.search(items[:50], top_k=1)
    assert (positions[:, 0] == np.arange(50)).mean() >= 0.9


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_save_load_round_trip_gives_the_same_results(tmp_path, kind):
    items, queries = unit_vectors(400), unit_vectors(5, seed=1)
    index = filled_index(items, kind=kind, fingerprint="abc")
    written = index.save(tmp_path, "audio_index")
    assert sorted(path.name for path in written) == ["audio_index.json", "audio_index.safetensors"]
    loaded = EmbeddingIndex.load(tmp_path, "audio_index", expected_dim=16, expected_fingerprint="abc")
    assert (loaded.kind, loaded.metric, loaded.ids) == (kind, "inner_product", index.ids)
    for got, expected in zip(loaded.search(queries, 8), index.search(queries, 8)):
        np.testing.assert_array_equal(got, expected)


def test_captions_round_trip(tmp_path):
    index = EmbeddingIndex(16)
    index.add(unit_vectors(3), ["a#0", "a#1", "b#0"], captions=["un chien", "a dog", "rain"])
    index.save(tmp_path, "text_index")
    assert EmbeddingIndex.load(tmp_path, "text_index").captions == ["un chien", "a dog", "rain"]


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


def test_bad_inputs_are_rejected():
    index = EmbeddingIndex(16)
    with pytest.raises(ValueError, match="empty"):
        index.search(unit_vectors(1), 1)
    with pytest.raises(ValueError, match=r"shape \(n, 16\)"):
        index.add(torch.zeros(2, 8), ["a", "b"])
    with pytest.raises(ValueError, match="2 embeddings but 1 ids"):
        index.add(unit_vectors(2), ["a"])
    with pytest.raises(ValueError, match="NaN"):
        index.add(torch.full((1, 16), float("nan")), ["a"])
    index.add(unit_vectors(2), ["a", "b"])
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        index.search(unit_vectors(1), 0)
    with pytest.raises(ValueError, match="kind must be one of"):
        EmbeddingIndex(16, kind="lsh")
    with pytest.raises(ValueError, match="Unknown scoring"):
        metric_for_scoring("dot")


def windowed_index(kind: str = "flat") -> tuple[EmbeddingIndex, torch.Tensor, list[str]]:
    """40 files of 1 to 20 windows each (ids repeat), with spans."""
    counts = [1 + (7 * file) % 20 for file in range(40)]
    ids = [f"file{file}.wav" for file, count in enumerate(counts) for _ in range(count)]
    spans = [(0.5 * window, 0.5 * window + 1.0) for count in counts for window in range(count)]
    vectors = unit_vectors(len(ids), seed=4)
    index = EmbeddingIndex(16, kind=kind, root="/data/field recordings")
    index.add(vectors, ids, spans=spans)
    return index, vectors, ids


def test_search_files_ranks_distinct_files_at_their_best_window_like_brute_force():
    index, vectors, ids = windowed_index()
    queries = unit_vectors(6, seed=5)
    scores, positions = index.search_files(queries, top_k=7)
    similarity = queries @ vectors.T
    for row in range(len(queries)):
        best_per_file: dict[str, tuple[float, int]] = {}
        for position, item_id in enumerate(ids):
            score = float(similarity[row, position])
            if item_id not in best_per_file or score > best_per_file[item_id][0]:
                best_per_file[item_id] = (score, position)
        expected = sorted(best_per_file.values(), reverse=True)[:7]
        assert positions[row].tolist() == [position for _, position in expected]
        np.testing.assert_allclose(scores[row], [score for score, _ in expected], atol=1e-5)
    assert index.search_files(queries, top_k=100)[0].shape == (6, 40)  # no more than the distinct files


def test_spans_and_root_round_trip_and_resolve_paths(tmp_path):
    index, _, _ = windowed_index()
    index.save(tmp_path, "audio_index")
    loaded = EmbeddingIndex.load(tmp_path, "audio_index")
    assert loaded.spans == index.spans and loaded.root == "/data/field recordings"
    assert loaded.path_of("file3.wav") == "/data/field recordings/file3.wav"
    assert loaded.path_of("/elsewhere/x.wav") == "/elsewhere/x.wav"
    assert EmbeddingIndex(16).path_of("x.wav") is None
    with pytest.raises(ValueError, match="This index holds spans; pass `spans` with every addition"):
        loaded.add(unit_vectors(1), ["new.wav"])


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
