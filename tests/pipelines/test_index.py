"""EmbeddingIndex against brute-force torch search; safetensors round trip; corrupt and mismatched files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import make_model

from hf_atr.pipelines.index import EmbeddingIndex, IndexFormatError, metric_for_scoring, model_fingerprint


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
