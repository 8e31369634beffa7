"""ASK knowledge base: search against brute force, prototypes against a direct computation, I/O, drift."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ranking_margin import clear_argmax, clear_best_among, clear_ranking
from safetensors.torch import save_file
from tiny_models import feature_dataset, make_model, make_processor

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import encode_text
from hf_atr.knowledge.knowledge_base import (
    KnowledgeBase,
    prototype_pairs,
    representation_drift,
)

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


def random_pairs(count: int, dim: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    audio = F.normalize(torch.randn(count, dim, generator=generator), dim=-1)
    text = F.normalize(audio + 0.5 * torch.randn(count, dim, generator=generator), dim=-1)
    return audio, text


@pytest.mark.parametrize("backend", ["torch", "faiss"])
@pytest.mark.parametrize("granularity", ["fine", "coarse"])
@pytest.mark.parametrize("modality", ["audio", "text"])
def test_search_matches_brute_force_top_k(modality, granularity, backend):
    audio, text = random_pairs(300)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=40)
    queries = F.normalize(torch.randn(7, 16, generator=torch.Generator().manual_seed(1)), dim=-1)
    scores, indices = base.search(queries, modality=modality, granularity=granularity, k=10, backend=backend)
    keys = base.tensors[f"{granularity}_{modality}"].double().numpy()
    brute_force = [np.argsort(-(keys @ query), kind="stable")[:10] for query in queries.double().numpy()]
    expected_scores = np.stack(
        [keys[row] @ query for row, query in zip(brute_force, queries.double().numpy())]
    )
    torch.testing.assert_close(scores.double(), torch.from_numpy(expected_scores), rtol=1e-5, atol=1e-5)
    # Keys whose scores differ by float32 rounding may come in either order (the 9th and 10th fine audio keys
    # of query 5 differ by 1e-7): each returned key is distinct and has, in float64, the score of its rank.
    assert all(len(set(row)) == 10 for row in indices.tolist())
    found_scores = np.stack(
        [keys[row] @ query for row, query in zip(indices.numpy(), queries.double().numpy())]
    )
    np.testing.assert_allclose(found_scores, expected_scores, rtol=0, atol=1e-6)
    neighbour_audio, neighbour_text = base.pairs(indices, granularity=granularity)
    assert neighbour_audio.shape == (7, 10, 16)
    torch.testing.assert_close(neighbour_audio, base.tensors[f"{granularity}_audio"][indices])
    torch.testing.assert_close(neighbour_text, base.tensors[f"{granularity}_text"][indices])


def clip_pairs(clips: int, captions_per_clip: int, dim: int = 16, seed: int = 0):
    """Pairs as ``captions="all"`` makes them: each clip's audio embedding stored once per caption."""
    generator = torch.Generator().manual_seed(seed)
    clip_audio = F.normalize(torch.randn(clips, dim, generator=generator), dim=-1)
    audio = clip_audio.repeat_interleave(captions_per_clip, dim=0)
    text = F.normalize(audio + 0.5 * torch.randn(audio.shape, generator=generator), dim=-1)
    audio_ids = [f"clip{index // captions_per_clip}" for index in range(len(audio))]
    return audio, text, audio_ids


def brute_force_distinct_clips(keys, audio_ids, query, own_id, k):
    """Best pair of each clip other than ``own_id``, clips by that score, descending; ties to the first pair.

    Asserts the margins this order relies on (tests/ranking_margin.py): the clips' order, and each chosen clip's
    best pair over its other pairs (the copies of one key tie exactly, and go to the first)."""
    scores = keys @ query
    best: dict[str, int] = {}
    for index in np.argsort(-scores, kind="stable"):
        if audio_ids[index] != own_id and audio_ids[index] not in best:
            best[audio_ids[index]] = int(index)
    chosen = [best[clip] for clip in np.array(list(best))[clear_ranking(scores[list(best.values())], k=k)]]
    ids = np.array(audio_ids)
    for index in chosen:
        pairs = np.flatnonzero(ids == ids[index])
        copies = (keys[pairs] == keys[index]).all(axis=1)
        if not copies.all():
            clear_best_among(scores[pairs], copies)
    return chosen


@pytest.mark.parametrize("backend", ["torch", "faiss"])
@pytest.mark.parametrize("modality", ["audio", "text"])
def test_fine_search_returns_k_distinct_clips_other_than_the_query_s_own(modality, backend, monkeypatch):
    audio, text, audio_ids = clip_pairs(clips=40, captions_per_clip=5)
    base = KnowledgeBase.from_embeddings(audio, text, audio_ids=audio_ids, num_prototypes=8)
    monkeypatch.setattr("hf_atr.knowledge.exact_search._DISTINCT_BLOCK_ENTRIES", 3 * 200)  # blocks of 3
    query_rows = [0, 7, 23, 24, 111, 199, 150]  # each a stored pair: its own clip would rank first
    queries = (audio if modality == "audio" else text)[query_rows]
    own = [audio_ids[row] for row in query_rows]
    scores, indices = base.search(queries, modality=modality, k=10, backend=backend, exclude_audio_ids=own)
    keys = base.tensors[f"fine_{modality}"].double().numpy()
    for row, (query, own_id) in enumerate(zip(queries.double().numpy(), own)):
        expected = brute_force_distinct_clips(keys, audio_ids, query, own_id, 10)
        found = indices[row].tolist()
        assert found == expected  # a clip's tied audio copies resolve to its first pair, in both backends
        found_clips = {audio_ids[index] for index in found}
        assert len(found_clips) == 10 and own_id not in found_clips
        torch.testing.assert_close(
            scores[row].double(), torch.from_numpy(keys[found] @ query), atol=1e-5, rtol=0
        )
    plain = base.search(queries, modality=modality, k=10, backend=backend)[1]
    assert all(
        audio_ids[int(row[0])] == own_id for row, own_id in zip(plain, own)
    )  # not excluded: it is first
    assert len({audio_ids[int(index)] for index in plain[0]}) == 10  # distinct clips even without exclusion


def test_search_without_clip_ids_or_at_coarse_granularity_ignores_exclusion():
    audio, text, audio_ids = clip_pairs(clips=10, captions_per_clip=3)
    anonymous = KnowledgeBase.from_embeddings(audio, text, num_prototypes=4)
    assert anonymous.clip_ids is None
    _, indices = anonymous.search(audio[:2], modality="audio", k=3, exclude_audio_ids=audio_ids[:2])
    assert sorted(indices[0].tolist()) == [0, 1, 2]  # the three stored copies of the query's own clip
    known = KnowledgeBase.from_embeddings(audio, text, audio_ids=audio_ids, num_prototypes=4)
    assert torch.equal(
        known.search(audio[:2], modality="audio", granularity="coarse", k=3, exclude_audio_ids=audio_ids[:2])[
            1
        ],
        known.search(audio[:2], modality="audio", granularity="coarse", k=3)[1],
    )


def test_distinct_clip_search_clamps_k_and_names_bad_ids():
    audio, text, audio_ids = clip_pairs(clips=3, captions_per_clip=2)
    base = KnowledgeBase.from_embeddings(audio, text, audio_ids=audio_ids, num_prototypes=2)
    _, indices = base.search(audio[:1], modality="text", k=10, exclude_audio_ids=["clip0"])
    assert indices.shape == (1, 2) and {audio_ids[int(index)] for index in indices[0]} == {"clip1", "clip2"}
    with pytest.raises(ValueError, match="2 exclude_audio_ids for 1 queries"):
        base.search(audio[:1], modality="text", exclude_audio_ids=["clip0", "clip1"])
    with pytest.raises(ValueError, match="5 fine_audio_ids for 6 pairs"):
        KnowledgeBase(audio, text, audio[:2], text[:2], fine_audio_ids=audio_ids[:5])
    single = KnowledgeBase.from_embeddings(audio[:2], text[:2], audio_ids=audio_ids[:2], num_prototypes=1)
    with pytest.raises(ValueError, match="no clip other than the query's own"):
        single.search(audio[:1], modality="audio", exclude_audio_ids=["clip0"])


def test_torch_search_in_blocks_matches_faiss(monkeypatch):
    audio, text = random_pairs(300)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=40)
    queries = F.normalize(torch.randn(50, 16, generator=torch.Generator().manual_seed(2)), dim=-1)
    monkeypatch.setattr("hf_atr.knowledge.exact_search._SEARCH_BLOCK_ENTRIES", 7 * 300)  # blocks of 7 queries
    blocked = base.search(queries, modality="text", k=5)
    reference = base.search(queries, modality="text", k=5, backend="faiss")
    assert torch.equal(blocked[1], reference[1])
    torch.testing.assert_close(blocked[0], reference[0], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_search_and_pairs_stay_on_the_queries_device():
    audio, text = random_pairs(300)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=40)
    queries = audio[:4].cuda()
    scores, indices = base.search(queries, modality="audio", k=3)
    assert scores.device == indices.device == queries.device
    neighbour_audio, _ = base.pairs(indices)
    assert neighbour_audio.device == queries.device
    assert torch.equal(indices.cpu(), base.search(audio[:4], modality="audio", k=3, backend="faiss")[1])


def test_search_clamps_k_and_keeps_query_dtype_device():
    audio, text = random_pairs(6)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=3)
    scores, indices = base.search(audio[:2].double(), modality="audio", granularity="coarse", k=10)
    assert indices.shape == (2, base.num_prototypes) and indices.dtype == torch.int64
    assert scores.dtype == torch.float32


def test_prototypes_are_max_pooled_clusters():
    # Four well-separated groups in the joint [audio; text] space: k-means with N_c = 4 must find them.
    generator = torch.Generator().manual_seed(0)
    centres_audio = torch.eye(8)[:4] * 5
    centres_text = torch.eye(8)[4:] * 5
    groups = torch.arange(40) % 4
    audio = F.normalize(centres_audio[groups] + 0.3 * torch.randn(40, 8, generator=generator), dim=-1)
    text = F.normalize(centres_text[groups] + 0.3 * torch.randn(40, 8, generator=generator), dim=-1)
    prototype_audio, prototype_text = prototype_pairs(audio, text, num_prototypes=4)
    expected = {
        int(group): (
            F.normalize(audio[groups == group].max(dim=0).values, dim=0),
            F.normalize(text[groups == group].max(dim=0).values, dim=0),
        )
        for group in range(4)
    }
    assert prototype_audio.shape == prototype_text.shape == (4, 8)
    for row in range(4):
        group = clear_argmax(prototype_audio[row, :4])  # which centre this prototype belongs to
        torch.testing.assert_close(prototype_audio[row], expected[group][0])
        torch.testing.assert_close(prototype_text[row], expected[group][1])


def test_prototype_count_is_clamped_to_the_number_of_pairs():
    audio, text = random_pairs(5)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=512)
    assert base.num_prototypes == 5
    # One pair per cluster: each prototype is that pair itself.
    order_audio = base.tensors["coarse_audio"] @ audio.T
    matched = torch.from_numpy(clear_argmax(order_audio))
    assert sorted(matched.tolist()) == list(range(5))
    torch.testing.assert_close(base.tensors["coarse_audio"], audio[matched])
    torch.testing.assert_close(base.tensors["coarse_text"], text[matched])


def test_from_embeddings_normalises():
    audio, text = random_pairs(20)
    base = KnowledgeBase.from_embeddings(3 * audio, 0.5 * text, num_prototypes=4)
    torch.testing.assert_close(base.tensors["fine_audio"], audio)
    torch.testing.assert_close(base.tensors["fine_text"], text)
    torch.testing.assert_close(base.tensors["coarse_audio"].norm(dim=1), torch.ones(base.num_prototypes))


@pytest.mark.parametrize("with_clip_ids", [False, True])
def test_save_load_round_trip(tmp_path, with_clip_ids):
    audio, text, audio_ids = clip_pairs(clips=25, captions_per_clip=2)
    base = KnowledgeBase.from_embeddings(
        audio, text, audio_ids=audio_ids if with_clip_ids else None, num_prototypes=8
    )
    path = tmp_path / "kb.safetensors"
    base.save(path)
    loaded = KnowledgeBase.load(path)
    assert loaded.tensors.keys() == base.tensors.keys()
    for key, tensor in base.tensors.items():
        assert torch.equal(loaded.tensors[key], tensor), key
    assert loaded.clip_ids == (sorted(set(audio_ids), key=audio_ids.index) if with_clip_ids else None)
    queries = audio[:5]
    for granularity in ("fine", "coarse"):
        assert torch.equal(
            loaded.search(
                queries, modality="text", granularity=granularity, k=3, exclude_audio_ids=audio_ids[:5]
            )[1],
            base.search(
                queries, modality="text", granularity=granularity, k=3, exclude_audio_ids=audio_ids[:5]
            )[1],
        )


def test_load_rejects_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file at"):
        KnowledgeBase.load(tmp_path / "missing.safetensors")
    path = tmp_path / "other.safetensors"
    save_file({"weights": torch.zeros(2, 2)}, str(path))
    with pytest.raises(ValueError, match=r"lacks tensor\(s\) \['fine_audio'"):
        KnowledgeBase.load(path)


def test_bad_inputs_raise_clear_errors():
    audio, text = random_pairs(10)
    with pytest.raises(ValueError, match="same shape"):
        KnowledgeBase.from_embeddings(audio, text[:5])
    with pytest.raises(ValueError, match="at least one"):
        KnowledgeBase.from_embeddings(audio[:0], text[:0])
    with pytest.raises(ValueError, match="NaN"):
        KnowledgeBase.from_embeddings(audio * float("nan"), text)
    base = KnowledgeBase.from_embeddings(audio, text, num_prototypes=2)
    with pytest.raises(ValueError, match=r"queries must be \(n, 16\)"):
        base.search(torch.zeros(2, 8), modality="audio")
    with pytest.raises(ValueError, match="`modality` must be one of"):
        base.search(audio, modality="image")
    with pytest.raises(ValueError, match="`granularity` must be one of"):
        base.search(audio, modality="audio", granularity="medium")
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        base.search(audio, modality="audio", k=0)
    with pytest.raises(ValueError, match=r"`backend` must be one of \['torch', 'faiss'\]"):
        base.search(audio, modality="audio", backend="annoy")
    with pytest.raises(ValueError, match="num_prototypes"):
        prototype_pairs(audio, text, num_prototypes=0)


def dense_drift(old: torch.Tensor, new: torch.Tensor, temperature: float) -> float:
    ideal = torch.softmax(new.double() @ new.double().T / temperature, dim=1).numpy()
    actual = torch.softmax(new.double() @ old.double().T / temperature, dim=1).numpy()
    return float(np.mean(np.sum(ideal * np.log(ideal / actual), axis=1)))


@pytest.mark.parametrize("temperature", [1.0, 0.1])
def test_representation_drift_matches_dense_kl(temperature):
    audio, text = random_pairs(60)
    moved_audio = F.normalize(
        audio + 0.3 * torch.randn(60, 16, generator=torch.Generator().manual_seed(2)), dim=-1
    )
    old = KnowledgeBase.from_embeddings(audio, text, num_prototypes=4)
    new = KnowledgeBase.from_embeddings(moved_audio, text, num_prototypes=4)
    drift = representation_drift(old, new, temperature=temperature, max_queries=None, chunk_size=16)
    assert drift == pytest.approx(dense_drift(audio, moved_audio, temperature), rel=1e-4)
    assert representation_drift(old, old, temperature=temperature) == pytest.approx(0.0, abs=1e-7)
    assert representation_drift(old, new, modality="text") == pytest.approx(0.0, abs=1e-7)
    sampled = representation_drift(old, new, temperature=temperature, max_queries=30)
    assert 0.0 < sampled < 10 * drift


def test_representation_drift_needs_the_same_pairs():
    audio, text = random_pairs(20)
    with pytest.raises(ValueError, match="same pairs"):
        representation_drift(
            KnowledgeBase.from_embeddings(audio, text, num_prototypes=2),
            KnowledgeBase.from_embeddings(audio[:10], text[:10], num_prototypes=2),
        )


@pytest.fixture(scope="module")
def tiny_setup():
    processor = make_processor()
    return make_model(processor=processor), processor, feature_dataset(6)


def test_from_dataset_encodes_every_caption_pair(tiny_setup):
    model, processor, dataset = tiny_setup
    model.train()
    base = KnowledgeBase.from_dataset(
        model, processor, dataset, num_prototypes=4, show_progress=False, batch_size=4
    )
    assert model.training, "encoding must restore the model's training mode"
    assert base.num_pairs == 12 and base.num_prototypes == 4
    assert base.clip_ids == dataset["audio_id"]
    audio = encode_audio(model, processor, dataset)
    captions = [caption for row in dataset["captions"] for caption in row]
    text = encode_text(model, processor, captions)
    torch.testing.assert_close(
        base.tensors["fine_audio"], audio.repeat_interleave(2, dim=0), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(base.tensors["fine_text"], text, rtol=1e-5, atol=1e-5)
