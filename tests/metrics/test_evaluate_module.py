"""The `evaluate` wrapper loads offline and returns exactly what `retrieval_metrics` returns."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.metrics.retrieval import retrieval_metrics

evaluate = pytest.importorskip("evaluate")


@pytest.fixture(scope="module")
def metric(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf_home")
    # evaluate reads HF_HOME at import time, so point its already-computed cache paths at the temp dir too.
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("HF_HOME", str(cache))
        monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", cache / "modules")
        monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", cache / "metrics")
        monkeypatch.setattr(evaluate.config, "HF_EVALUATE_CACHE", cache / "evaluate")
        from hf_atr.metrics.retrieval import load_retrieval_metric

        yield load_retrieval_metric(cache_dir=str(cache / "metrics"))


def multilingual_problem():
    rng = np.random.default_rng(0)
    n_audio = 6
    text_to_audio = np.repeat(np.arange(n_audio), 2)[:-1]  # clip 5 has no French caption
    languages = ["eng", "fra"] * n_audio
    languages = languages[:-1]
    caption_groups = list(text_to_audio)
    scores = rng.integers(0, 5, size=(len(text_to_audio), n_audio)).astype(np.float32) / 5
    return scores, text_to_audio, languages, caption_groups


def test_compute_matches_retrieval_metrics(metric):
    scores, text_to_audio, languages, caption_groups = multilingual_problem()
    result = metric.compute(
        predictions=scores.tolist(),
        references=text_to_audio.tolist(),
        languages=languages,
        caption_groups=caption_groups,
        ks=(1, 3),
    )
    assert result == retrieval_metrics(scores, text_to_audio, languages, caption_groups, ks=(1, 3))
    assert {"MRV", "t2a_R@1/fra", "a2t_mAP@10/eng", "a2t_recall_fraction@3"} <= set(result)


def test_add_batch_then_compute(metric):
    scores, text_to_audio, _, _ = multilingual_problem()
    for start in range(0, len(scores), 4):
        metric.add_batch(predictions=scores[start : start + 4], references=text_to_audio[start : start + 4])
    assert metric.compute() == retrieval_metrics(scores, text_to_audio)


def test_module_errors_are_clear(metric):
    with pytest.raises(ValueError, match=r"text_to_audio\[1\] = 7 is not a clip index"):
        metric.compute(predictions=[[0.1, 0.2], [0.3, 0.4]], references=[0, 7])


def test_ragged_score_rows_are_rejected(metric):
    with pytest.raises(ValueError, match=r"score rows of one length .* got lengths \[1, 2\]"):
        metric.compute(predictions=[[0.1, 0.2], [0.3]], references=[0, 1])


def test_several_relevant_clips_per_caption_and_map_cutoffs(metric):
    scores, text_to_audio, languages, _ = multilingual_problem()
    relevant = [[int(clip), (int(clip) + 1) % scores.shape[1]] for clip in text_to_audio]
    relevant[0] = relevant[0][:1]
    result = metric.compute(
        predictions=scores.tolist(), references=relevant, languages=languages, map_cutoffs=(2, 16)
    )
    assert result == retrieval_metrics(scores, relevant, languages, map_cutoffs=(2, 16))
    assert {"t2a_recall_fraction@5", "t2a_mAP@16/fra", "a2t_mAP@2"} <= set(result)
    assert "t2a_mAP@10" not in result
    for start in range(0, len(scores), 4):
        metric.add_batch(predictions=scores[start : start + 4], references=relevant[start : start + 4])
    assert metric.compute() == retrieval_metrics(scores, relevant)


def test_deprecated_map_cutoff_still_works(metric):
    scores, text_to_audio, _, _ = multilingual_problem()
    with pytest.deprecated_call(match="map_cutoff` is deprecated"):
        result = metric.compute(predictions=scores.tolist(), references=text_to_audio.tolist(), map_cutoff=3)
    assert result == retrieval_metrics(scores, text_to_audio, map_cutoffs=(3,))
