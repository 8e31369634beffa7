"""EmbeddingIndex against brute-force torch search; its safetensors round trip (the files: test_index_storage)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pipeline_setups import filled_index, unit_vectors, windowed_index
from ranking_margin import clear_argmax, clear_ranking
from tiny_models import make_model

from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


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
    expected = head.similarity(queries, items).detach()
    np.testing.assert_array_equal(positions, clear_ranking(expected, k=5))
    np.testing.assert_allclose(scores, expected.topk(5, dim=1).values.numpy(), atol=1e-4)


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
        metric_for_scoring("inner")


def test_search_files_ranks_distinct_files_at_their_best_window_like_brute_force():
    index, vectors, ids = windowed_index()
    queries = unit_vectors(6, seed=5)
    scores, positions = index.search_files(queries, top_k=7)
    similarity = queries @ vectors.T
    files = {item_id: np.flatnonzero(np.array(ids) == item_id) for item_id in dict.fromkeys(ids)}
    for row in range(len(queries)):
        best_scores = [similarity[row, windows].max() for windows in files.values()]
        top_files = [list(files.values())[file] for file in clear_ranking(best_scores, k=7)]
        expected = [int(windows[clear_argmax(similarity[row, windows])]) for windows in top_files]
        assert positions[row].tolist() == expected
        np.testing.assert_allclose(scores[row], similarity[row, expected].numpy(), atol=1e-5)
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
