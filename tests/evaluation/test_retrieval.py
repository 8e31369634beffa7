"""Retrieval metrics against a brute-force reference (full argsort per query, explicit loops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_atr.evaluation.retrieval import (
    inner_product_scores,
    retrieval_metrics,
    retrieval_metrics_from_embeddings,
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


def brute_force_positions(gallery_scores: np.ndarray, is_relevant: np.ndarray) -> list[int]:
    """0-based positions of the relevant items after a full sort by decreasing score.

    Ties are broken in favour of relevant items, i.e. a relevant item is preceded only by items scoring
    strictly higher (and by tied relevant items).
    """
    order = np.lexsort((~is_relevant, -gallery_scores))  # last key is the primary one
    return [position for position, item in enumerate(order) if is_relevant[item]]


def brute_force_query(positions: list[int], ks, map_cutoff) -> dict:
    num_relevant = len(positions)
    precision_sum = 0.0
    for hits, position in enumerate(positions, start=1):
        if position < map_cutoff:
            precision_sum += hits / (position + 1)
    return {
        "R": {k: float(positions[0] < k) for k in ks},
        "recall_fraction": {k: sum(p < k for p in positions) / num_relevant for k in ks},
        "mAP": precision_sum / min(map_cutoff, num_relevant),
        "rank": positions[0] + 1,
    }


def brute_force_metrics(scores, text_to_audio, captions, ks=(1, 5, 10), map_cutoff=10) -> dict[str, float]:
    """Metrics for the gallery `captions` (one language) by looping over queries."""
    scores = np.asarray(scores, dtype=np.float64)
    text_to_audio = np.asarray(text_to_audio)
    n_audio = scores.shape[1]
    results = {"t2a": [], "a2t": []}
    for caption in captions:
        is_relevant = np.arange(n_audio) == text_to_audio[caption]
        results["t2a"].append(
            brute_force_query(brute_force_positions(scores[caption], is_relevant), ks, map_cutoff)
        )
    for clip in range(n_audio):
        is_relevant = text_to_audio[captions] == clip
        if is_relevant.any():
            positions = brute_force_positions(scores[captions, clip], is_relevant)
            results["a2t"].append(brute_force_query(positions, ks, map_cutoff))
    metrics = {}
    for direction, queries in results.items():
        for k in ks:
            metrics[f"{direction}_R@{k}"] = np.mean([q["R"][k] for q in queries])
            if direction == "a2t":
                metrics[f"a2t_recall_fraction@{k}"] = np.mean([q["recall_fraction"][k] for q in queries])
        metrics[f"{direction}_mAP@{map_cutoff}"] = np.mean([q["mAP"] for q in queries])
        metrics[f"{direction}_median_rank"] = float(np.median([q["rank"] for q in queries]))
        metrics[f"{direction}_mean_rank"] = np.mean([q["rank"] for q in queries])
    return metrics


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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_size", [1, 7, 1024])
def test_matches_brute_force_with_ties_and_uneven_captions(seed, chunk_size):
    scores, text_to_audio = random_problem(seed)
    ks = (1, 3, 7, 40)  # 40 exceeds both gallery sizes
    expected = brute_force_metrics(scores, text_to_audio, np.arange(len(text_to_audio)), ks=ks, map_cutoff=5)
    assert_metrics_equal(
        retrieval_metrics(scores, text_to_audio, ks=ks, map_cutoff=5, chunk_size=chunk_size), expected
    )


def test_matches_brute_force_without_ties():
    scores, text_to_audio = random_problem(0, n_audio=30, max_captions=5, levels=10**6)
    expected = brute_force_metrics(scores, text_to_audio, np.arange(len(text_to_audio)))
    actual = retrieval_metrics(torch.from_numpy(scores), torch.from_numpy(text_to_audio), chunk_size=13)
    assert set(actual) == EXPECTED_KEYS
    assert_metrics_equal(actual, expected)


def test_hand_computed_example():
    # Clip 0 has captions 0 and 2, clip 1 has caption 1. Column 0 ranks captions 0 > 1 > 2, so clip 0's
    # captions sit at positions 0 and 2: AP = (1/1 + 2/3) / 2 = 5/6, recall fraction@1 = 1/2.
    # Column 1 ranks caption 1 first: AP = 1. Rows: caption 0 -> clip 0 first (rank 0); caption 1 -> clip 1
    # first (rank 0); caption 2 ties 0.3 with clip 1, and ties resolve for the relevant clip (rank 0).
    scores = np.array([[0.9, 0.1], [0.5, 0.8], [0.3, 0.3]])
    metrics = retrieval_metrics(scores, [0, 1, 0], ks=(1, 2))
    assert metrics["a2t_mAP@10"] == pytest.approx((5 / 6 + 1) / 2)
    assert metrics["a2t_recall_fraction@1"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["a2t_recall_fraction@2"] == pytest.approx((1 / 2 + 1) / 2)
    assert metrics["a2t_R@1"] == 1.0
    assert metrics["t2a_R@1"] == 1.0
    assert metrics["t2a_mean_rank"] == 1.0 and metrics["a2t_median_rank"] == 1.0


def test_tied_relevant_items_take_consecutive_positions():
    # Three captions of clip 0 tie at the top: positions 0, 1, 2, so only one of them is in the top 1.
    metrics = retrieval_metrics(np.ones((3, 1)), [0, 0, 0], ks=(1, 2))
    assert metrics["a2t_recall_fraction@1"] == pytest.approx(1 / 3)
    assert metrics["a2t_recall_fraction@2"] == pytest.approx(2 / 3)
    assert metrics["a2t_mAP@10"] == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_several_languages_with_missing_captions(seed):
    rng = np.random.default_rng(seed)
    n_audio, slots = 8, 3
    languages_all = ["eng", "fra", "jpn"]
    rows = [
        (clip, slot, language)
        for clip in range(n_audio)
        for slot in range(slots)
        for language in languages_all
    ]
    # Drop a third of the translations, never English; clip 5 has no French caption at all.
    keep = [
        language == "eng" or (rng.random() > 1 / 3 and not (clip == 5 and language == "fra"))
        for clip, slot, language in rows
    ]
    rows = [row for row, kept in zip(rows, keep) if kept]
    text_to_audio = np.array([clip for clip, _, _ in rows])
    languages = [language for _, _, language in rows]
    caption_groups = [f"{clip}-{slot}" for clip, slot, _ in rows]
    scores = rng.integers(0, 6, size=(len(rows), n_audio)).astype(np.float64)

    metrics = retrieval_metrics(scores, text_to_audio, languages, caption_groups, chunk_size=10)

    per_language = {}
    for language in languages_all:
        captions = np.flatnonzero(np.array(languages) == language)
        per_language[language] = brute_force_metrics(scores, text_to_audio, captions)
        assert_metrics_equal(
            {k[: -len(language) - 1]: v for k, v in metrics.items() if k.endswith(f"/{language}")},
            per_language[language],
        )
    for key in EXPECTED_KEYS:
        assert metrics[key] == pytest.approx(np.mean([per_language[lang][key] for lang in languages_all]))
    assert "MRV" in metrics and metrics["MRV"] >= 0


def t2a_scores_with_ranks(ranks: list[int], clips: list[int], n_audio: int) -> np.ndarray:
    """A score row per caption in which exactly `rank` clips beat the caption's clip."""
    scores = np.zeros((len(ranks), n_audio))
    for row, (rank, clip) in enumerate(zip(ranks, clips)):
        scores[row, clip] = 0.5
        others = [c for c in range(n_audio) if c != clip][:rank]
        scores[row, others] = 1.0
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
    english = np.flatnonzero(languages == "eng")
    assert_metrics_equal(
        {k[:-4]: v for k, v in actual.items() if k.endswith("/eng")},
        brute_force_metrics(text @ audio.T, text_to_audio, english),
    )


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

    metrics = retrieval_metrics_from_embeddings(
        audio, text, torch.arange(n_text) % n_audio, chunk_size=chunk_size, score_fn=recording_score_fn
    )
    assert max(block_sizes) <= chunk_size * n_audio
    assert metrics == retrieval_metrics(text @ audio.T, torch.arange(n_text) % n_audio)


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
        ({"text_to_audio": [0, 1, 2]}, r"text_to_audio\[2\] = 2 is not a clip index in \[0, 2\)"),
        ({"text_to_audio": [0, -1, 1]}, r"text_to_audio\[1\] = -1"),
        ({"text_to_audio": [0.0, 1.0, 1.0]}, "text_to_audio must hold integer clip indices"),
        ({"languages": ["eng", "fra"]}, r"languages must have shape \(3,\)"),
        ({"caption_groups": [0, 0, 1]}, "caption_groups needs languages"),
        (
            {"languages": ["eng", "fra", "eng"], "caption_groups": [0, 0, 0]},
            "caption 1 .clip 1. in a group with a caption of clip 0",
        ),
        (
            {"text_to_audio": [0, 0, 1], "languages": ["eng", "eng", "fra"], "caption_groups": [0, 0, 1]},
            "several captions of one language in the group of caption 0",
        ),
        ({"ks": (1, 0)}, "ks must be positive integer"),
        ({"ks": ()}, "ks must be positive integer"),
        ({"map_cutoff": 0}, "map_cutoff must be positive integer"),
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
def test_rounding_that_depends_on_block_shape_is_handled(chunk_size):
    # BLAS may round a score differently depending on the block it is computed in. Simulate that for the
    # odd clips (flag in the last audio coordinate, which the text side zeroes): their scores shift by
    # 1e-3 whenever the audio side is not the full gallery. Each rank must still use consistent values.
    rng = np.random.default_rng(4)
    n_audio = 12
    audio = rng.normal(size=(n_audio, 4))
    audio[:, -1] = np.arange(n_audio) % 2
    text_to_audio = np.repeat(np.arange(n_audio), 3)
    text = audio[text_to_audio] + rng.normal(size=(len(text_to_audio), 4))
    text[:, -1] = 0.0
    languages = rng.choice(["eng", "fra"], size=len(text_to_audio))

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
