"""Exact search on a torch device, run on CPU tensors: float32 equals faiss flat (ties by position, as
``IndexFlatL2`` orders them), float16 is measured by recall@10, and saved indexes search the same on a device."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
from ranking_margin import clear_ranking
from safetensors import safe_open
from tiny_models import make_model
from transformers import pipeline

import hf_atr  # noqa: F401  (registers the pipeline)
from hf_atr.pipelines.device_search import (
    DEFAULT_ITEM_BLOCK,
    DEFAULT_QUERY_BLOCK,
    DeviceSearch,
    checked_device,
    checked_dtype,
)
from hf_atr.pipelines.index import EmbeddingIndex, metric_for_scoring

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

FORMAT_V0 = Path(__file__).resolve().parents[1] / "fixtures" / "format_v0"
MISSING_DEVICE = "cuda:99"
"""No machine has a 100th GPU: on a CPU-only torch the allocation fails for want of CUDA, elsewhere for the
ordinal; either way the device is refused."""


def tied_vectors(seed: int = 0, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """80 items (50 of them copies of 6 vectors) and 25 queries, all of small integers: every product, norm and
    distance is exact in float32, so ties are exact whatever order a kernel sums in."""
    rng = np.random.default_rng(seed)
    base = rng.integers(-2, 3, size=(6, dim)).astype(np.float32)
    items = np.concatenate([base[rng.integers(0, 6, size=50)], rng.integers(-2, 3, size=(30, dim))])
    return items.astype(np.float32), rng.integers(-2, 3, size=(25, dim)).astype(np.float32)


def faiss_flat(items: np.ndarray, queries: np.ndarray, metric: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    index = (
        faiss.IndexFlatIP(items.shape[1]) if metric == "inner_product" else faiss.IndexFlatL2(items.shape[1])
    )
    index.add(items)
    return index.search(queries, k)


def lowest_positions_first(scores: np.ndarray, k: int) -> np.ndarray:
    """The tie rule by brute force: per row, positions ordered by score descending, then position ascending."""
    return np.stack([np.lexsort((np.arange(len(row)), -row))[:k] for row in scores])


def unit_vectors(count: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("item_block", [7, 1000])
@pytest.mark.parametrize("query_count", [3, 25])  # faiss computes below 20 queries directly, above by BLAS
@pytest.mark.parametrize("k", [1, 5, 13, 80])
def test_l2_equals_faiss_flat_bit_for_bit_ties_included(item_block, query_count, k):
    items, queries = tied_vectors()
    queries = queries[:query_count]
    distances, positions = DeviceSearch(items, "l2", "cpu", item_block=item_block, query_block=4).search(
        queries, k
    )
    expected_distances, expected_positions = faiss_flat(items, queries, "l2", k)
    np.testing.assert_array_equal(distances, expected_distances)
    np.testing.assert_array_equal(positions, expected_positions)
    if k < len(items):  # the data does put ties across the k-th place, where the rule decides what is kept
        squared = ((queries[:, None, :] - items[None]) ** 2).sum(-1)
        kth = np.sort(squared, axis=1)[:, k - 1 : k]
        assert ((squared <= kth).sum(axis=1) > k).any()


@pytest.mark.parametrize("item_block", [7, 1000])
@pytest.mark.parametrize("k", [1, 5, 13, 80])
def test_inner_product_ranks_ties_by_position_and_gives_faiss_flats_scores(item_block, k):
    items, queries = tied_vectors(seed=1)
    scores, positions = DeviceSearch(items, "inner_product", "cpu", item_block=item_block).search(queries, k)
    products = queries @ items.T  # exact: small integers
    np.testing.assert_array_equal(positions, lowest_positions_first(products, k))
    faiss_scores, faiss_positions = faiss_flat(items, queries, "inner_product", k)
    np.testing.assert_array_equal(scores, faiss_scores)
    # IndexFlatIP lists equal scores by descending id; where nothing ties across the k-th place it holds the
    # same items, so ordered by the rule its hits are ours.
    untied = (products >= scores[:, -1:]).sum(axis=1) == k
    assert untied.any() and (k == len(items) or not untied.all())
    faiss_ordered = np.stack(
        [row[np.lexsort((row, -score))] for row, score in zip(faiss_positions, faiss_scores)]
    )
    np.testing.assert_array_equal(positions[untied], faiss_ordered[untied])


def exact_keys(items: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """``(q, n)`` ranking keys of small-integer vectors, exact in float16 and float32 alike."""
    if metric == "inner_product":
        return queries @ items.T
    return -((queries[:, None, :] - items[None]) ** 2).sum(-1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("metric", ["inner_product", "l2"])
@pytest.mark.parametrize(("item_block", "query_block"), [(1, 25), (5, 1), (6, 4), (16, 7), (1000, 1000)])
@pytest.mark.parametrize("k", [1, 5, 6, 40, 80])
def test_the_tie_rule_holds_across_blocks_in_either_dtype(dtype, metric, item_block, query_block, k):
    items, queries = tied_vectors(seed=2)
    search = DeviceSearch(items, metric, "cpu", dtype, item_block=item_block, query_block=query_block)
    scores, positions = search.search(queries, k)
    keys = exact_keys(items, queries, metric)
    expected_positions = lowest_positions_first(keys, k)
    np.testing.assert_array_equal(positions, expected_positions)
    expected_keys = np.take_along_axis(keys, expected_positions, 1)
    np.testing.assert_array_equal(scores, expected_keys if metric == "inner_product" else -expected_keys)
    if metric == "l2":  # faiss IndexFlatL2 is the rule's reference: the same hits, ties included
        np.testing.assert_array_equal(positions, faiss_flat(items, queries, "l2", k)[1])
    if k < len(items) and item_block < len(items):
        # The data puts items tied at the k-th place in different blocks, where the rule decides what is kept.
        tied_at_kth = keys == np.take_along_axis(keys, expected_positions[:, -1:], 1)
        blocks_of_ties = [set(np.flatnonzero(row) // item_block) for row in tied_at_kth]
        assert any(len(blocks) > 1 for blocks in blocks_of_ties)


HOST_READS = ("item", "tolist", "cpu", "nonzero", "__bool__", "__float__", "__int__", "__index__")
"""The ``torch.Tensor`` methods that read a tensor back to the host (on a GPU, the host waits for the device)."""


def record_host_reads(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    """Append to ``events`` the name of every host read, and ``"block"`` for every block of items scored."""
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def recorded(self, *args, _name=name, _original=original, **kwargs):
            events.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, recorded)
    original_keys = DeviceSearch._keys

    def recorded_keys(self, *args):
        events.append("block")
        return original_keys(self, *args)

    monkeypatch.setattr(DeviceSearch, "_keys", recorded_keys)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("metric", ["inner_product", "l2"])
@pytest.mark.parametrize(("item_block", "query_block"), [(7, 4), (DEFAULT_ITEM_BLOCK, DEFAULT_QUERY_BLOCK)])
def test_nothing_is_read_back_until_every_block_is_searched(
    monkeypatch, dtype, metric, item_block, query_block
):
    items, queries = unit_vectors(300, 16, seed=11), unit_vectors(30, 16, seed=12)
    search = DeviceSearch(items, metric, "cpu", dtype, item_block=item_block, query_block=query_block)
    events: list[str] = []
    record_host_reads(monkeypatch, events)
    search.search(queries, 10)
    item_blocks = -(-300 // item_block)
    first_pass = ["block"] * item_blocks * -(-30 // query_block) + ["cpu"] * 3  # keys, positions, tie marks
    assert events[: len(first_pass)] == first_pass
    searched_again = events[len(first_pass) :]
    if searched_again:  # the tied rows, by blocks of queries: their hits are read back once, at the end
        blocks_again = searched_again.count("block")
        assert blocks_again % item_blocks == 0
        assert searched_again == ["block"] * blocks_again + ["cpu"] * 2
    if dtype == "float32":  # random floats: no two scores tie, so no row is searched again
        assert searched_again == []


def rows_tied_at_the_kth_place_in_a_block(keys: np.ndarray, k: int, item_block: int) -> np.ndarray:
    """Rows where a block of items holds more than one item tied at the merged k-th key, one of them at the
    block's k-th place (where ``topk`` chooses among them as it likes)."""
    kth = np.sort(keys, axis=1)[:, -k]
    rows = []
    for row, row_keys in enumerate(keys):
        for start in range(0, keys.shape[1], item_block):
            block = np.sort(row_keys[start : start + item_block])[::-1]
            if len(block) > k and block[k - 1] == block[k] == kth[row]:
                rows.append(row)
                break
    return np.array(rows, dtype=np.int64)


@pytest.mark.parametrize(("item_block", "k"), [(16, 3), (1000, 5)])
def test_only_rows_with_a_tie_at_a_blocks_kth_place_are_searched_again(monkeypatch, item_block, k):
    items, queries = tied_vectors()
    keys = exact_keys(items, queries, "inner_product")
    expected_rows = rows_tied_at_the_kth_place_in_a_block(keys, k, item_block)
    assert 0 < len(expected_rows) < len(queries)
    search = DeviceSearch(items, "inner_product", "cpu", item_block=item_block, query_block=4)
    searched_again = []
    exact = search._search_rows_exactly

    def recorded(rows, k):
        searched_again.append(rows.numpy().copy())
        return exact(rows, k)

    monkeypatch.setattr(search, "_search_rows_exactly", recorded)
    events: list[str] = []
    record_host_reads(monkeypatch, events)
    positions = search.search(queries, k)[1]
    assert all(len(rows) <= 4 for rows in searched_again)  # by blocks of queries, as the first search
    np.testing.assert_array_equal(np.concatenate(searched_again), queries[expected_rows])
    assert events.count("cpu") == 5 and set(events) == {"block", "cpu"}
    np.testing.assert_array_equal(positions, lowest_positions_first(keys, k))


@pytest.mark.parametrize(("metric", "scale"), [("inner_product", 1.0), ("l2", 1.0), ("l2", 7.0)])
def test_float32_on_a_device_equals_faiss_flat_through_the_index(metric, scale):
    items, queries = unit_vectors(3000, 32, seed=0) * scale, unit_vectors(40, 32, seed=1) * scale
    on_device = EmbeddingIndex(32, metric=metric, device="cpu")
    with_faiss = EmbeddingIndex(32, metric=metric)
    for index in (on_device, with_faiss):
        index.add(items[:1000], [str(i) for i in range(1000)])  # added in two batches
        index.add(items[1000:], [str(i) for i in range(1000, 3000)])
    scores, positions = on_device.search(queries, top_k=10)
    faiss_scores, faiss_positions = with_faiss.search(queries, top_k=10)
    # Random floats: the two kernels round differently in the last bit, and no two scores are that close here.
    np.testing.assert_array_equal(positions, faiss_positions)
    np.testing.assert_allclose(scores, faiss_scores, rtol=0, atol=1e-5 * scale**2)
    reference = (
        queries @ items.T if metric == "inner_product" else -np.linalg.norm(queries[:, None] - items, axis=-1)
    )
    np.testing.assert_allclose(
        np.take_along_axis(reference, positions, 1), scores, rtol=0, atol=1e-5 * scale**2
    )


@pytest.mark.parametrize("metric", ["inner_product", "l2"])
def test_float16_recall_at_10_against_float32(metric):
    items, queries = unit_vectors(2000, 64, seed=2), unit_vectors(100, 64, seed=3)
    float32 = EmbeddingIndex(64, metric=metric, device="cpu")
    float16 = EmbeddingIndex(64, metric=metric, device="cpu", search_dtype="float16")
    for index in (float32, float16):
        index.add(items, [str(i) for i in range(len(items))])
    scores32, positions32 = float32.search(queries, 10)
    scores16, positions16 = float16.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(positions16, positions32)])
    assert recall >= 0.95
    # Its scores are float16's rounding of the true ones (2^-11 relative), never another item's.
    reference = (
        queries @ items.T if metric == "inner_product" else -np.linalg.norm(queries[:, None] - items, axis=-1)
    )
    np.testing.assert_allclose(np.take_along_axis(reference, positions16, 1), scores16, rtol=0, atol=3e-3)


def test_mahalanobis_on_a_device_ranks_like_the_scoring_head():
    model = make_model(scoring="mahalanobis")
    with torch.no_grad():
        random_matrix = torch.randn(16, 16, generator=torch.Generator().manual_seed(3))
        model.scoring_head.metric_matrix.copy_(random_matrix @ random_matrix.T / 16)
    items, queries = (
        torch.from_numpy(unit_vectors(50, 16, seed=4)),
        torch.from_numpy(unit_vectors(4, 16, seed=5)),
    )
    head = model.scoring_head
    index = EmbeddingIndex(16, metric=metric_for_scoring("mahalanobis"), device="cpu")
    index.add(head.transform(items).detach(), [str(i) for i in range(50)])
    scores, positions = index.search(head.transform(queries).detach(), top_k=5)
    expected = head.similarity(queries, items).detach()  # -(t − a)ᵀ M (t − a) rooted, m-LTM Eq. 9
    np.testing.assert_array_equal(positions, clear_ranking(expected, k=5))
    np.testing.assert_allclose(scores, expected.topk(5, dim=1).values.numpy(), atol=1e-4)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_are_searched_exactly_on_a_device(kind):
    items, queries = unit_vectors(800, 16, seed=6), unit_vectors(30, 16, seed=7)
    index = EmbeddingIndex(16, kind=kind, nprobe=1, ef_search=1)
    index.add(items, [str(i) for i in range(800)])
    flat = EmbeddingIndex(16)
    flat.add(items, [str(i) for i in range(800)])
    approximate = index.search(queries, 10)[1]
    exact_scores, exact = flat.search(queries, 10)
    scores, positions = index.search_on("cpu").search(queries, 10)
    np.testing.assert_array_equal(positions, exact)
    np.testing.assert_allclose(scores, exact_scores, rtol=0, atol=1e-6)
    assert (approximate != exact).any()  # one cell or one candidate misses some: the device did not
    assert (index.search_on(None).search(queries, 10)[1] == approximate).all()  # back to faiss


def test_search_files_on_a_device_keeps_the_best_window_of_each_file():
    items, queries = unit_vectors(60, 16, seed=8), unit_vectors(5, 16, seed=9)
    ids = [f"file{i // 6}.wav" for i in range(60)]  # ten files of six windows
    spans = [(float(2 * (i % 6)), float(2 * (i % 6) + 2)) for i in range(60)]
    results = []
    for device in (None, "cpu"):
        index = EmbeddingIndex(16, device=device)
        index.add(items, ids, spans=spans)
        results.append(index.search_files(queries, 4))
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=0, atol=1e-6)
    assert all(len({ids[p] for p in row}) == 4 for row in results[1][1])


def test_the_device_is_a_runtime_choice_never_saved(tmp_path):
    items = unit_vectors(20, 16, seed=10)
    for name, device in (("on_device", "cpu"), ("with_faiss", None)):
        index = EmbeddingIndex(16, device=device, search_dtype="float16" if device else "float32")
        index.add(items, [str(i) for i in range(20)])
        index.save(tmp_path, name)
    assert (tmp_path / "on_device.json").read_bytes() == (tmp_path / "with_faiss.json").read_bytes()
    saved = []
    for name in (
        "on_device",
        "with_faiss",
    ):  # safetensors orders its header as it likes: compare what it holds
        with safe_open(tmp_path / f"{name}.safetensors", framework="np") as handle:
            saved.append((handle.metadata(), handle.get_tensor("embeddings")))
    assert saved[0][0] == saved[1][0]
    np.testing.assert_array_equal(saved[0][1], saved[1][1])
    loaded = EmbeddingIndex.load(tmp_path, "on_device")
    assert (loaded.device, loaded.search_dtype) == (None, "float32")


@pytest.mark.parametrize("name", ["cosine", "mahalanobis"])
@pytest.mark.parametrize("search_dtype", ["float32", "float16"])
def test_format_0_indexes_give_their_saved_hits_on_a_device(name, search_dtype, tmp_path):
    fixture = Path(shutil.copytree(FORMAT_V0, tmp_path / "format_v0"))
    expected = json.loads((fixture / "expected.json").read_text())["results"][name]
    pipe = pipeline(
        "audio-text-retrieval",
        model=str(fixture / f"model_{name}"),
        search_device="cpu",
        search_dtype=search_dtype,
    )
    queries = [*expected["text_queries"].items()]
    queries += [(str(fixture / clip), hits) for clip, hits in expected["audio_queries"].items()]
    tolerance = 1e-5 if search_dtype == "float32" else 2e-3
    for query, expected_hits in queries:
        # The saved hits, best first, each lead the next by more than twice the search's rounding.
        clear_ranking([hit["score"] for hit in expected_hits], scale=1.0, min_gap=2 * tolerance)
        hits = pipe(query, top_k=3)
        assert [hit["id"] for hit in hits] == [hit["id"] for hit in expected_hits], query
        np.testing.assert_allclose(
            [hit["score"] for hit in hits], [hit["score"] for hit in expected_hits], rtol=0, atol=tolerance
        )
    assert pipe.audio_index.device == pipe.text_index.device == torch.device("cpu")
    assert pipe.audio_index.search_dtype == search_dtype


def test_empty_queries_give_empty_results():
    scores, positions = DeviceSearch(unit_vectors(5, 4, seed=0), "l2", "cpu").search(
        np.zeros((0, 4), np.float32), 3
    )
    assert scores.shape == positions.shape == (0, 3)
    assert (scores.dtype, positions.dtype) == (np.float32, np.int64)


def test_bad_placements_and_inputs_are_explained():
    with pytest.raises(ValueError, match=f"Device '{MISSING_DEVICE}' is not available here: .*Give a device"):
        EmbeddingIndex(4, device=MISSING_DEVICE)
    with pytest.raises(ValueError, match="Device 'a-gpu' is not available here"):
        checked_device("a-gpu")
    with pytest.raises(
        ValueError, match=r"search_dtype must be one of \['float16', 'float32'\], got 'bfloat16'"
    ):
        EmbeddingIndex(4).search_on("cpu", "bfloat16")
    assert checked_dtype("float16") == torch.float16
    with pytest.raises(ValueError, match=f"Device '{MISSING_DEVICE}' is not available here"):
        pipeline("audio-text-retrieval", model=str(FORMAT_V0 / "model_cosine"), search_device=MISSING_DEVICE)
    items = unit_vectors(5, 4, seed=0)
    with pytest.raises(ValueError, match="metric must be 'inner_product' or 'l2', got 'cosine'"):
        DeviceSearch(items, "cosine", "cpu")
    with pytest.raises(ValueError, match="item_block must be a positive integer, got 0"):
        DeviceSearch(items, "l2", "cpu", item_block=0)
    with pytest.raises(ValueError, match="k must be between 1 and the 5 items, got 6"):
        DeviceSearch(items, "l2", "cpu").search(items, 6)


def test_float16_refuses_what_it_cannot_hold():
    with pytest.raises(
        ValueError, match=r"float16 cannot hold these vectors \(largest norm 7e\+04, float16 max 65504\)"
    ):
        DeviceSearch(unit_vectors(5, 4, seed=0) * 70_000, "l2", "cpu", "float16")
    search = DeviceSearch(unit_vectors(5, 4, seed=0) * 300, "inner_product", "cpu", "float16")
    with pytest.raises(ValueError, match=r"float16 cannot hold these scores \(inner products up to 9e\+04"):
        search.search(unit_vectors(2, 4, seed=1) * 300, 2)
    assert search.search(unit_vectors(2, 4, seed=1), 2)[0].shape == (2, 2)  # unit queries: within range
