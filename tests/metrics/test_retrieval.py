"""Retrieval metrics against a brute-force reference (a full sort per query, explicit loops).

The reference sorts every query's gallery by decreasing score with ties broken *against* the relevant
items (an irrelevant item tied with a relevant one comes first), reads off the relevant items'
positions, and evaluates each metric's definition on them; the library counts instead of sorting.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_atr.deprecation import HfAtrDeprecationWarning
from hf_atr.metrics.retrieval import (
    inner_product_scores,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
    retrieval_ranks,
    retrieval_ranks_from_embeddings,
)

EXPECTED_KEYS = {
    "t2a_R@1",
    "t2a_R@5",
    "t2a_R@10",
    "a2t_R@1",
    "a2t_R@5",
    "a2t_R@10",
    "a2t_recall_fraction@1",
    "a2t_recall_fraction@5",
    "a2t_recall_fraction@10",
    "t2a_mAP@10",
    "a2t_mAP@10",
    "t2a_median_rank",
    "t2a_mean_rank",
    "a2t_median_rank",
    "a2t_mean_rank",
}


def as_relevance(text_to_audio) -> list[set[int]]:
    """Each caption's set of relevant clips, from a clip index or a list of them per caption."""
    return [{int(c)} if np.ndim(c) == 0 else {int(x) for x in c} for c in text_to_audio]


def brute_force_positions(gallery_scores: np.ndarray, is_relevant: np.ndarray) -> list[int]:
    """0-based positions of the relevant items after a full sort by decreasing score.

    Ties are broken against relevant items: among equal scores the irrelevant items come first.
    """
    order = np.lexsort((is_relevant, -gallery_scores))  # last key is the primary one
    return [position for position, item in enumerate(order) if is_relevant[item]]


def brute_force_query(positions: list[int], ks, map_cutoffs) -> dict:
    num_relevant = len(positions)
    average_precision = {}
    for cutoff in map_cutoffs:
        precision_sum = 0.0
        for hits, position in enumerate(positions, start=1):
            if position < cutoff:
                precision_sum += hits / (position + 1)
        average_precision[cutoff] = precision_sum / min(cutoff, num_relevant)
    return {
        "R": {k: float(positions[0] < k) for k in ks},
        "recall_fraction": {k: sum(p < k for p in positions) / num_relevant for k in ks},
        "mAP": average_precision,
        "best": positions[0],
    }


def brute_force_metrics(
    scores, text_to_audio, captions, ks=(1, 5, 10), map_cutoffs=(10,), t2a_fraction=None
) -> dict[str, float]:
    """Metrics for the gallery `captions` (one language) by looping over queries."""
    scores = np.asarray(scores, dtype=np.float64)
    relevance = as_relevance(text_to_audio)
    if t2a_fraction is None:
        t2a_fraction = any(len(clips) > 1 for clips in relevance)
    n_audio = scores.shape[1]
    captions = list(captions)
    results = {"t2a": [], "a2t": []}
    for caption in captions:
        is_relevant = np.isin(np.arange(n_audio), list(relevance[caption]))
        results["t2a"].append(
            brute_force_query(brute_force_positions(scores[caption], is_relevant), ks, map_cutoffs)
        )
    for clip in range(n_audio):
        is_relevant = np.array([clip in relevance[caption] for caption in captions])
        if is_relevant.any():
            positions = brute_force_positions(scores[captions, clip], is_relevant)
            results["a2t"].append(brute_force_query(positions, ks, map_cutoffs))
    metrics = {}
    for direction, queries in results.items():
        for k in ks:
            metrics[f"{direction}_R@{k}"] = np.mean([q["R"][k] for q in queries])
            if direction == "a2t" or t2a_fraction:
                metrics[f"{direction}_recall_fraction@{k}"] = np.mean(
                    [q["recall_fraction"][k] for q in queries]
                )
        for cutoff in map_cutoffs:
            metrics[f"{direction}_mAP@{cutoff}"] = np.mean([q["mAP"][cutoff] for q in queries])
        metrics[f"{direction}_median_rank"] = float(np.median([q["best"] + 1 for q in queries]))
        metrics[f"{direction}_mean_rank"] = np.mean([q["best"] + 1 for q in queries])
    return metrics


def brute_force_mrv(scores, text_to_audio, caption_groups) -> float:
    """ATRI Eq. (16) on sorted positions: per group of >= 2 translations, the variance of the best T2A position."""
    scores = np.asarray(scores, dtype=np.float64)
    relevance = as_relevance(text_to_audio)
    best = [
        brute_force_positions(scores[caption], np.isin(np.arange(scores.shape[1]), list(clips)))[0]
        for caption, clips in enumerate(relevance)
    ]
    groups: dict = {}
    for caption, group in enumerate(caption_groups):
        groups.setdefault(group, []).append(best[caption])
    return float(np.mean([np.var(ranks) for ranks in groups.values() if len(ranks) >= 2]))


def brute_force_multilingual(scores, text_to_audio, languages, caption_groups=None, **kwargs) -> dict:
    """Per-language brute-force metrics with `/lang` keys, their means, and MRV."""
    languages = np.asarray(languages)
    names = list(dict.fromkeys(languages.tolist()))
    relevance = as_relevance(text_to_audio)
    t2a_fraction = any(len(clips) > 1 for clips in relevance)
    per_language = {
        name: brute_force_metrics(
            scores, text_to_audio, np.flatnonzero(languages == name), t2a_fraction=t2a_fraction, **kwargs
        )
        for name in names
    }
    expected = {
        key: np.mean([values[key] for values in per_language.values()]) for key in per_language[names[0]]
    }
    for name, values in per_language.items():
        expected.update({f"{key}/{name}": value for key, value in values.items()})
    if caption_groups is not None:
        expected["MRV"] = brute_force_mrv(scores, text_to_audio, caption_groups)
    return expected


def assert_metrics_equal(actual: dict[str, float], expected: dict[str, float]) -> None:
    assert set(actual) == set(expected)
    for key in expected:
        assert actual[key] == pytest.approx(expected[key], abs=1e-12), key


def random_problem(seed: int, n_audio: int = 9, max_captions: int = 4, levels: int = 4):
    """Scores on a coarse grid (many ties) and 0..max_captions captions per clip, shuffled."""
    rng = np.random.default_rng(seed)
    captions_per_clip = rng.integers(0, max_captions + 1, size=n_audio)
    captions_per_clip[0] = max(captions_per_clip[0], 1)
    text_to_audio = rng.permutation(np.repeat(np.arange(n_audio), captions_per_clip))
    scores = rng.integers(0, levels, size=(len(text_to_audio), n_audio)).astype(np.float32) / levels
    return scores, text_to_audio


def multilingual_problem(seed: int, n_audio: int = 8, slots: int = 3, max_relevant: int = 1):
    """Captions of `slots` slots per clip in eng/fra/jpn (a third of the translations dropped, clip 5 has
    no French caption), each slot relevant to its clip plus up to `max_relevant - 1` other clips (shared by
    its translations), and scores rounded to one decimal: many ties."""
    rng = np.random.default_rng(seed)
    rows = [
        (clip, slot, language)
        for clip in range(n_audio)
        for slot in range(slots)
        for language in ("eng", "fra", "jpn")
        if language == "eng" or (rng.random() > 1 / 3 and not (clip == 5 and language == "fra"))
    ]
    extra = {
        (clip, slot): list(
            rng.choice(np.delete(np.arange(n_audio), clip), rng.integers(0, max_relevant), replace=False)
        )
        for clip in range(n_audio)
        for slot in range(slots)
    }
    text_to_audio = [[clip, *extra[clip, slot]] for clip, slot, _ in rows]
    if max_relevant == 1:
        text_to_audio = [clips[0] for clips in text_to_audio]
    languages = [language for _, _, language in rows]
    caption_groups = [f"{clip}-{slot}" for clip, slot, _ in rows]
    scores = np.round(rng.random((len(rows), n_audio)), 1)
    return scores, text_to_audio, languages, caption_groups


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_size", [1, 7, 1024])
def test_matches_brute_force_with_ties_and_uneven_captions(seed, chunk_size):
    scores, text_to_audio = random_problem(seed)
    ks = (1, 3, 7, 40)  # 40 exceeds both gallery sizes
    expected = brute_force_metrics(
        scores, text_to_audio, np.arange(len(text_to_audio)), ks=ks, map_cutoffs=(5, 16)
    )
    assert_metrics_equal(
        retrieval_metrics(scores, text_to_audio, ks=ks, map_cutoffs=(5, 16), chunk_size=chunk_size), expected
    )


def test_matches_brute_force_without_ties():
    scores, text_to_audio = random_problem(0, n_audio=30, max_captions=5, levels=10**6)
    expected = brute_force_metrics(scores, text_to_audio, np.arange(len(text_to_audio)))
    actual = retrieval_metrics(torch.from_numpy(scores), torch.from_numpy(text_to_audio), chunk_size=13)
    assert set(actual) == EXPECTED_KEYS
    assert_metrics_equal(actual, expected)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("max_relevant", [1, 4])
def test_scores_rounded_to_one_decimal_every_key_several_languages(seed, max_relevant):
    scores, text_to_audio, languages, caption_groups = multilingual_problem(seed, max_relevant=max_relevant)
    expected = brute_force_multilingual(
        scores, text_to_audio, languages, caption_groups, map_cutoffs=(10, 16)
    )
    actual = retrieval_metrics(
        scores, text_to_audio, languages, caption_groups, map_cutoffs=(10, 16), chunk_size=10
    )
    assert_metrics_equal(actual, expected)
    assert "MRV" in actual and ("t2a_recall_fraction@5/fra" in actual) == (max_relevant > 1)


def test_constant_scores_rank_every_relevant_item_last():
    # A collapsed model: all scores equal. 40 clips, 5 captions each (200 captions).
    metrics = retrieval_metrics(torch.zeros(200, 40), [i // 5 for i in range(200)], ks=(1, 5, 10, 39, 40))
    assert_metrics_equal(
        metrics,
        brute_force_metrics(
            np.zeros((200, 40)), [i // 5 for i in range(200)], range(200), ks=(1, 5, 10, 39, 40)
        ),
    )
    # T2A: 39 irrelevant clips, all tied with the relevant one -> position 39; A2T: 195 irrelevant captions.
    for k in (1, 5, 10, 39):
        assert metrics[f"t2a_R@{k}"] == 0.0 and metrics[f"a2t_R@{k}"] == 0.0
    assert metrics["t2a_R@40"] == 1.0 and metrics["t2a_mean_rank"] == 40.0
    assert metrics["t2a_mAP@10"] == 0.0 and metrics["a2t_mAP@10"] == 0.0
    assert metrics["a2t_median_rank"] == 196.0


@pytest.mark.parametrize("max_relevant", [1, 3])
def test_constant_scores_several_languages_both_directions(max_relevant):
    _, text_to_audio, languages, caption_groups = multilingual_problem(1, max_relevant=max_relevant)
    scores = np.full((len(languages), 8), 0.5)
    metrics = retrieval_metrics(scores, text_to_audio, languages, caption_groups, ks=(1, 4))
    assert_metrics_equal(
        metrics, brute_force_multilingual(scores, text_to_audio, languages, caption_groups, ks=(1, 4))
    )
    # Every query has irrelevant items tied with its relevant ones (T2A: 8 - R clips; A2T: the other
    # clips' captions of the language), so nothing is found at k = 1.
    assert all(metrics[f"{d}_R@1/{lang}"] == 0.0 for d in ("t2a", "a2t") for lang in ("eng", "fra", "jpn"))
    if max_relevant == 1:
        assert metrics["t2a_R@4"] == 0.0 and metrics["MRV"] == 0.0


def test_hand_computed_example():
    # Clip 0 has captions 0 and 2, clip 1 has caption 1. Column 0 ranks captions 0 > 1 > 2, so clip 0's
    # captions sit at positions 0 and 2: AP = (1/1 + 2/3) / 2 = 5/6, recall fraction@1 = 1/2.
    # Column 1 ranks caption 1 first: AP = 1. Rows: caption 0 -> clip 0 first (rank 0); caption 1 -> clip 1
    # first (rank 0); caption 2 ties 0.3 with clip 1, and ties count against the relevant clip (rank 1).
    scores = np.array([[0.9, 0.1], [0.5, 0.8], [0.3, 0.3]])
    metrics = retrieval_metrics(scores, [0, 1, 0], ks=(1, 2))
    assert metrics["a2t_mAP@10"] == pytest.approx((5 / 6 + 1) / 2)
    assert metrics["a2t_recall_fraction@1"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["a2t_recall_fraction@2"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["a2t_R@1"] == 1.0
    assert metrics["t2a_R@1"] == pytest.approx(2 / 3) and metrics["t2a_R@2"] == 1.0
    assert metrics["t2a_mean_rank"] == pytest.approx(4 / 3) and metrics["t2a_mAP@10"] == pytest.approx(5 / 6)
    assert metrics["a2t_median_rank"] == 1.0


def test_tied_relevant_items_take_consecutive_positions_after_tied_irrelevant_ones():
    # Three captions of clip 0 tie at the top: positions 0, 1, 2, so only one of them is in the top 1.
    metrics = retrieval_metrics(np.ones((3, 1)), [0, 0, 0], ks=(1, 2))
    assert metrics["a2t_recall_fraction@1"] == pytest.approx(1 / 3)
    assert metrics["a2t_recall_fraction@2"] == pytest.approx(2 / 3)
    assert metrics["a2t_mAP@10"] == 1.0
    # Clip 0's column: captions 0, 1 (relevant) and 2 (clip 1's) all score 0.5 -> positions 1 and 2.
    metrics = retrieval_metrics(np.array([[0.5, 0.0], [0.5, 0.0], [0.5, 0.9]]), [0, 0, 1], ks=(1, 2))
    assert metrics["a2t_recall_fraction@2"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["a2t_mAP@10"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1) / 2)


def test_several_relevant_clips_hand_computed():
    # Caption 0: clips 0 and 2 relevant; row 0.9 (clip 0), 0.8 (clip 1), 0.8 (clip 2), 0.1 (clip 3):
    # clip 0 at position 0, clip 2 ties irrelevant clip 1 -> position 2. AP@10 = (1 + 2/3) / 2.
    # Caption 1: clips 1, 2 and 3; row ties everything at 0.2 -> clip 0 first, relevant at 1, 2, 3:
    # AP@2 = (1/2) / 2, AP@10 = (1/2 + 2/3 + 3/4) / 3.
    scores = np.array([[0.9, 0.8, 0.8, 0.1], [0.2, 0.2, 0.2, 0.2]])
    metrics = retrieval_metrics(scores, [[0, 2], (1, 2, 3)], ks=(1, 2, 3), map_cutoffs=(2, 10))
    assert metrics["t2a_R@1"] == 0.5 and metrics["t2a_R@2"] == 1.0
    assert metrics["t2a_recall_fraction@2"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert metrics["t2a_recall_fraction@3"] == pytest.approx((1 + 2 / 3) / 2)
    assert metrics["t2a_mAP@10"] == pytest.approx(((1 + 2 / 3) / 2 + (1 / 2 + 2 / 3 + 3 / 4) / 3) / 2)
    assert metrics["t2a_mAP@2"] == pytest.approx((1 / 2 + (1 / 2) / 2) / 2)
    assert metrics["t2a_mean_rank"] == 1.5
    # A2T follows: clip 2 is listed by both captions (0.8 and 0.2): positions 0 and 1.
    assert metrics["a2t_recall_fraction@1"] == pytest.approx((1 + 1 / 2 + 1 + 0) / 4)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
def test_one_to_four_relevant_clips_with_ties_matrix_and_embeddings(seed, chunk_size):
    rng = np.random.default_rng(seed)
    n_audio, n_text = 12, 30
    text_to_audio = [list(rng.choice(n_audio, size=rng.integers(1, 5), replace=False)) for _ in range(n_text)]
    # Small integer embeddings: every score is exact in float32 and ties are frequent.
    audio = rng.integers(-1, 2, size=(n_audio, 3)).astype(np.float32)
    text = rng.integers(-1, 2, size=(n_text, 3)).astype(np.float32)
    languages = rng.choice(["eng", "fra"], size=n_text)
    expected = brute_force_multilingual(text @ audio.T, text_to_audio, languages, map_cutoffs=(3, 16))
    from_matrix = retrieval_metrics(
        text @ audio.T, text_to_audio, languages, map_cutoffs=(3, 16), chunk_size=chunk_size
    )
    from_embeddings = retrieval_metrics_from_embeddings(
        audio, text, text_to_audio, languages, map_cutoffs=(3, 16), chunk_size=chunk_size
    )
    assert_metrics_equal(from_matrix, expected)
    assert from_embeddings == from_matrix


def test_relevance_forms_agree():
    scores, _ = random_problem(3, n_audio=6)
    clips = np.arange(len(scores)) % 6
    expected = retrieval_metrics(scores, clips)
    assert retrieval_metrics(scores, list(clips)) == expected
    assert retrieval_metrics(scores, [[int(c)] for c in clips]) == expected
    assert retrieval_metrics(scores, torch.from_numpy(clips)[:, None]) == expected
    pairs = np.stack([clips, (clips + 1) % 6], axis=1)
    ragged = np.empty(len(pairs), dtype=object)
    ragged[:] = [list(row) for row in pairs]
    assert retrieval_metrics(scores, pairs) == retrieval_metrics(scores, ragged)
    assert retrieval_metrics(scores, pairs) == retrieval_metrics(scores, [tuple(row) for row in pairs])


def test_map_cutoffs_and_deprecated_map_cutoff():
    scores, text_to_audio = random_problem(4)
    metrics = retrieval_metrics(scores, text_to_audio, map_cutoffs=(1, 16, 1))
    assert [key for key in metrics if "mAP" in key] == ["t2a_mAP@1", "t2a_mAP@16", "a2t_mAP@1", "a2t_mAP@16"]
    with pytest.warns(HfAtrDeprecationWarning, match="map_cutoff` is deprecated"):
        deprecated = retrieval_metrics(scores, text_to_audio, map_cutoff=16)
    assert deprecated == retrieval_metrics(scores, text_to_audio, map_cutoffs=(16,))
    with pytest.deprecated_call(), pytest.raises(ValueError, match="either map_cutoffs or the deprecated"):
        retrieval_metrics(scores, text_to_audio, map_cutoffs=(5,), map_cutoff=16)
    with pytest.deprecated_call():
        from_embeddings = retrieval_metrics_from_embeddings(np.eye(3), np.eye(3), [0, 1, 2], map_cutoff=2)
    assert "t2a_mAP@2" in from_embeddings


def t2a_scores_with_ranks(ranks: list[int], clips: list[int], n_audio: int) -> np.ndarray:
    """A score row per caption in which exactly `rank` clips beat the caption's clip."""
    scores = np.zeros((len(ranks), n_audio))
    for row, (rank, clip) in enumerate(zip(ranks, clips)):
        scores[row, clip] = 0.5
        others = [c for c in range(n_audio) if c != clip]
        scores[row, others[:rank]] = 1.0
        scores[row, others[rank:]] = 0.1
    return scores


def test_mrv_on_hand_made_rank_table():
    # T2A ranks (0-based) per caption group, ATRI Eq. (16) as a per-group population variance:
    #   group "a" (clip 0): eng 0, fra 3, deu 0  -> mean 1, variance (1 + 4 + 1) / 3 = 2
    #   group "b" (clip 1): eng 0, fra 4 (no deu) -> mean 2, variance (4 + 4) / 2 = 4
    #   group "c" (clip 2): eng 2 only           -> no cross-language information, left out
    # MRV = (2 + 4) / 2 = 3.
    ranks = [0, 3, 0, 0, 4, 2]
    clips = [0, 0, 0, 1, 1, 2]
    languages = ["eng", "fra", "deu", "eng", "fra", "eng"]
    groups = ["a", "a", "a", "b", "b", "c"]
    scores = t2a_scores_with_ranks(ranks, clips, n_audio=6)
    metrics = retrieval_metrics(scores, clips, languages, groups)
    assert metrics["MRV"] == pytest.approx(3.0)
    assert metrics["t2a_mean_rank/fra"] == pytest.approx((4 + 5) / 2)


def test_mrv_left_out_without_multilingual_groups():
    metrics = retrieval_metrics(np.eye(3), [0, 1, 2], ["eng", "eng", "fra"], [0, 1, 2])
    assert "MRV" not in metrics
    assert metrics["t2a_R@1/fra"] == 1.0


@pytest.mark.parametrize("chunk_size", [1, 4, 1000])
def test_embeddings_match_score_matrix_and_brute_force(chunk_size):
    rng = np.random.default_rng(1)
    # Small integer embeddings: every score is exact in float32 and ties are frequent.
    audio = rng.integers(-2, 3, size=(11, 3)).astype(np.float32)
    text_to_audio = rng.permutation(np.repeat(np.arange(11), rng.integers(1, 4, size=11)))
    text = audio[text_to_audio] + rng.integers(-2, 3, size=(len(text_to_audio), 3)).astype(np.float32)
    languages = rng.choice(["eng", "fra"], size=len(text_to_audio))

    expected = retrieval_metrics(text @ audio.T, text_to_audio, languages)
    actual = retrieval_metrics_from_embeddings(audio, text, text_to_audio, languages, chunk_size=chunk_size)
    assert actual == expected
    assert_metrics_equal(actual, brute_force_multilingual(text @ audio.T, text_to_audio, languages))


def test_custom_score_fn_negative_distance():
    rng = np.random.default_rng(2)
    audio = torch.from_numpy(rng.integers(-3, 4, size=(10, 4)).astype(np.float64))
    text_to_audio = torch.arange(10).repeat(3)
    text = audio[text_to_audio] + torch.from_numpy(rng.integers(-2, 3, size=(30, 4)).astype(np.float64))

    def negative_squared_distance(text_chunk, audio_chunk):
        return -((text_chunk[:, None, :] - audio_chunk[None, :, :]) ** 2).sum(-1)

    actual = retrieval_metrics_from_embeddings(
        audio, text, text_to_audio, chunk_size=7, score_fn=negative_squared_distance
    )
    expected = brute_force_metrics(
        negative_squared_distance(text, audio).numpy(), text_to_audio.numpy(), range(30)
    )
    assert_metrics_equal(actual, expected)


def test_score_fn_sees_only_bounded_blocks():
    n_audio, n_text, chunk_size = 20, 100, 8
    rng = np.random.default_rng(3)
    audio = torch.from_numpy(rng.normal(size=(n_audio, 5)))
    text = torch.from_numpy(rng.normal(size=(n_text, 5)))
    block_sizes = []

    def recording_score_fn(text_chunk, audio_chunk):
        block_sizes.append(len(text_chunk) * len(audio_chunk))
        return inner_product_scores(text_chunk, audio_chunk)

    relevant = [[i % n_audio, (i + 7) % n_audio] for i in range(n_text)]
    metrics = retrieval_metrics_from_embeddings(
        audio, text, relevant, chunk_size=chunk_size, score_fn=recording_score_fn
    )
    assert max(block_sizes) <= chunk_size * n_audio
    assert metrics == retrieval_metrics(text @ audio.T, relevant)


def test_clip_without_captions_is_skipped_for_audio_to_text():
    # Clip 2 has no caption: it is a T2A distractor (caption 0's clip ranks 2) but no A2T query.
    # A2T: clip 0's caption (0.1) is beaten by caption 1 (0.2), clip 1's caption comes first.
    scores = np.array([[0.1, 0.2, 0.9], [0.2, 0.9, 0.1]])
    metrics = retrieval_metrics(scores, [0, 1])
    assert metrics["t2a_R@1"] == 0.5 and metrics["t2a_mean_rank"] == pytest.approx((3 + 1) / 2)
    assert metrics["a2t_R@1"] == 0.5 and metrics["a2t_mean_rank"] == pytest.approx((2 + 1) / 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scores": np.zeros(3)}, "scores must be 2-D"),
        ({"scores": np.array([[0.1, np.nan]] * 3)}, "scores contains NaN, e.g. at caption 0, clip 1"),
        ({"text_to_audio": [0, 1]}, r"text_to_audio must have shape \(3,\)"),
        ({"text_to_audio": [[0], [1]]}, r"text_to_audio must have one entry per caption \(3\), got 2"),
        ({"text_to_audio": [0, 1, 2]}, r"text_to_audio\[2\] = 2 is not a clip index in \[0, 2\)"),
        ({"text_to_audio": [0, -1, 1]}, r"text_to_audio\[1\] = -1"),
        (
            {"text_to_audio": [0, [1, 5], 1]},
            r"text_to_audio\[1\] contains 5, which is not a clip index in \[0, 2\)",
        ),
        (
            {"text_to_audio": np.array([[0, 1], [1, 2], [0, 1]])},
            r"text_to_audio\[1\] contains 2, which is not",
        ),
        ({"text_to_audio": [0.0, 1.0, 1.0]}, "text_to_audio must hold integer clip indices"),
        ({"text_to_audio": [0, [1, 0.5], 1]}, r"text_to_audio\[1\] must hold integer clip indices, got 0.5"),
        ({"text_to_audio": [0, [], 1]}, r"text_to_audio\[1\] is empty; every caption needs at least one"),
        ({"text_to_audio": [0, (1, 0, 1), 1]}, r"text_to_audio\[1\] lists clip 1 more than once"),
        ({"languages": ["eng", "fra"]}, r"languages must have shape \(3,\)"),
        ({"caption_groups": [0, 0, 1]}, "caption_groups needs languages"),
        (
            {"languages": ["eng", "fra", "eng"], "caption_groups": [0, 0, 0]},
            "caption 1 .clip 1. in a group with a caption of clip 0",
        ),
        (
            {
                "text_to_audio": [[0, 1], 0, 1],
                "languages": ["eng", "fra", "eng"],
                "caption_groups": [0, 0, 1],
            },
            r"caption 1 .clip 0. in a group with a caption of clips \[0, 1\]; translations of one caption",
        ),
        (
            {"text_to_audio": [0, 0, 1], "languages": ["eng", "eng", "fra"], "caption_groups": [0, 0, 1]},
            "several captions of one language in the group of caption 0",
        ),
        ({"ks": (1, 0)}, "ks must be positive integer"),
        ({"ks": ()}, "ks must be positive integer"),
        ({"map_cutoffs": (10, 0)}, "map_cutoffs must be positive integer"),
        ({"map_cutoffs": ()}, "map_cutoffs must be positive integer"),
        ({"map_cutoffs": 10}, r"map_cutoffs must be a sequence of positive integers, e.g. \(10,\), got 10"),
        ({"chunk_size": 0}, "chunk_size must be positive integer"),
    ],
)
def test_bad_input_raises_naming_the_argument(kwargs, message):
    arguments = {
        "scores": np.array([[0.9, 0.1], [0.2, 0.8], [0.1, 0.7]]),
        "text_to_audio": [0, 1, 1],
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(**arguments)


def test_empty_inputs_raise():
    with pytest.raises(ValueError, match="at least one caption and one clip"):
        retrieval_metrics(np.zeros((0, 3)), np.zeros(0, dtype=int))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"audio_embeds": np.full((2, 3), np.nan)},
            "audio_embeds contains NaN or infinite values, e.g. in row 0",
        ),
        ({"text_embeds": np.ones((3, 4))}, "same dimension, got 3 and 4"),
        ({"score_fn": lambda t, a: t @ a.T[:, :1]}, r"score_fn must return a \(3, 2\) tensor"),
        (
            {"score_fn": lambda t, a: torch.full((len(t), len(a)), float("nan"))},
            "score_fn returned NaN scores",
        ),
    ],
)
def test_bad_embeddings_raise(kwargs, message):
    arguments = {"audio_embeds": np.eye(2, 3), "text_embeds": np.eye(3), "text_to_audio": [0, 1, 1], **kwargs}
    with pytest.raises(ValueError, match=message):
        retrieval_metrics_from_embeddings(**arguments)


@pytest.mark.parametrize("chunk_size", [3, 1000])
@pytest.mark.parametrize("several_clips", [False, True])
def test_rounding_that_depends_on_block_shape_is_handled(chunk_size, several_clips):
    # BLAS may round a score differently depending on the block it is computed in. Simulate that for the
    # odd clips (flag in the last audio coordinate, which the text side zeroes): their scores shift by
    # 1e-3 whenever the audio side is not the full gallery. Each rank must still use consistent values.
    rng = np.random.default_rng(4)
    n_audio = 12
    audio = rng.normal(size=(n_audio, 4))
    audio[:, -1] = np.arange(n_audio) % 2
    clips = np.repeat(np.arange(n_audio), 3)
    text_to_audio = [[c, (c + 3) % n_audio] for c in clips] if several_clips else clips
    text = audio[clips] + rng.normal(size=(len(clips), 4))
    text[:, -1] = 0.0
    languages = rng.choice(["eng", "fra"], size=len(clips))

    def shape_dependent_scores(text_chunk, audio_chunk):
        scores = text_chunk @ audio_chunk.T
        return scores + 1e-3 * audio_chunk[:, -1] if len(audio_chunk) < n_audio else scores

    actual = retrieval_metrics_from_embeddings(
        torch.from_numpy(audio),
        torch.from_numpy(text),
        text_to_audio,
        languages,
        chunk_size=chunk_size,
        score_fn=shape_dependent_scores,
    )
    assert actual == retrieval_metrics(text @ audio.T, text_to_audio, languages)


# The ranks behind the metrics ----------------------------------------------------------------------------


@pytest.mark.parametrize("max_relevant", [1, 3])
def test_ranks_hold_the_brute_force_positions_and_give_the_metrics(max_relevant):
    scores, text_to_audio, languages, caption_groups = multilingual_problem(4, max_relevant=max_relevant)
    ranks = retrieval_ranks(
        scores, text_to_audio, languages=languages, caption_groups=caption_groups, chunk_size=5
    )
    assert ranks.languages == ["eng", "fra", "jpn"] and ranks.per_language
    relevance = as_relevance(text_to_audio)
    languages = np.asarray(languages)
    n_audio = scores.shape[1]
    for language in ranks.languages:
        captions = np.flatnonzero(languages == language)
        t2a = ranks.text_to_audio[language]
        assert t2a.gallery_size == n_audio
        for row, caption in enumerate(captions):
            expected = brute_force_positions(
                scores[caption], np.isin(np.arange(n_audio), list(relevance[caption]))
            )
            assert t2a.num_relevant[row] == len(expected)
            assert t2a.positions[row, : len(expected)].tolist() == expected
        a2t = ranks.audio_to_text[language]
        assert a2t.gallery_size == len(captions)
        clips = [clip for clip in range(n_audio) if any(clip in relevance[caption] for caption in captions)]
        for row, clip in enumerate(clips):
            expected = brute_force_positions(
                scores[captions, clip], np.array([clip in relevance[caption] for caption in captions])
            )
            assert a2t.positions[row, : len(expected)].tolist() == expected
        np.testing.assert_array_equal(t2a.best_ranks, t2a.positions[:, 0].numpy() + 1)
    metrics = retrieval_metrics(
        scores,
        text_to_audio,
        languages=languages,
        caption_groups=caption_groups,
        ks=(1, 4),
        map_cutoffs=(3, 10),
    )
    assert ranks.metrics(ks=(1, 4), map_cutoffs=(3, 10)) == metrics
    assert ranks.mean_rank_variance == metrics["MRV"]


def test_ranks_from_embeddings_equal_ranks_from_the_score_matrix():
    rng = np.random.default_rng(3)
    audio, text = rng.standard_normal((12, 5)), rng.standard_normal((30, 5))
    text_to_audio = rng.integers(0, 12, size=30)
    from_embeddings = retrieval_ranks_from_embeddings(audio, text, text_to_audio, chunk_size=4)
    from_matrix = retrieval_ranks(text @ audio.T, text_to_audio)
    assert not from_matrix.per_language and from_matrix.languages == [""]
    for direction in ("text_to_audio", "audio_to_text"):
        left, right = getattr(from_embeddings, direction)[""], getattr(from_matrix, direction)[""]
        assert torch.equal(left.positions, right.positions) and left.gallery_size == right.gallery_size
    assert from_embeddings.metrics() == retrieval_metrics_from_embeddings(audio, text, text_to_audio)


def test_recall_curve_counts_queries_with_a_relevant_item_in_the_top_k():
    scores, text_to_audio = random_problem(2, n_audio=12)
    ranks = retrieval_ranks(scores, text_to_audio).text_to_audio[""]
    best = [
        brute_force_positions(row, np.arange(scores.shape[1]) == clip)[0]
        for row, clip in zip(scores, text_to_audio)
    ]
    ks = range(1, 15)
    np.testing.assert_allclose(ranks.recall_at(ks), [np.mean([b < k for b in best]) for k in ks])
    metrics = retrieval_metrics(scores, text_to_audio, ks=(1, 5, 10))
    np.testing.assert_allclose(ranks.recall_at((1, 5, 10)), [metrics[f"t2a_R@{k}"] for k in (1, 5, 10)])
