from __future__ import annotations

import csv
import logging
import sys

import numpy as np
import pytest
import torch
from datasets import concatenate_datasets
from ot_problems import pot_log_plan
from ranking_margin import clear_rank_of
from tiny_models import make_model, make_processor, raw_audio_dataset
from tiny_models import translated_feature_dataset as _clips

from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.schema import set_corpus_provenance
from hf_atr.encoding import caption_table, encode_text
from hf_atr.evaluation.clip_evaluator import head_similarity
from hf_atr.evaluation.evaluator import RetrievalEvaluator, embedding_spread
from hf_atr.evaluation.ot_scoring import batch_transport
from hf_atr.metrics.ranks import TIE_RULE
from hf_atr.metrics.retrieval import retrieval_metrics, retrieval_metrics_from_embeddings
from hf_atr.windowing import Windowing

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


def assert_clear_ranks(scores: torch.Tensor, relevant: list) -> None:
    """The ranks that retrieval metrics count on ``(captions, clips)`` ``scores`` are clear of rounding, both ways
    (tests/ranking_margin.py): ``relevant[i]`` is caption ``i``'s clip, or its clips. No two captions may tokenise
    alike (the tiny tokenizer reads no digits): their scores would tie to rounding, exactly on one CPU and not on
    another."""
    relevant = [np.atleast_1d(np.asarray(clips)) for clips in relevant]
    clear_rank_of(scores, relevant)
    captions_of = [
        [row for row, clips in enumerate(relevant) if clip in clips] for clip in range(scores.shape[1])
    ]
    has_captions = [bool(rows) for rows in captions_of]
    clear_rank_of(scores.T[has_captions], [rows for rows in captions_of if rows])


# Seeds whose ranks are clear of rounding, as assert_clear_ranks checks: the Mahalanobis head's distances of unit
# vectors bunch near sqrt(2), and seed 0 left two of them 2e-5 apart.
@pytest.mark.parametrize(("scoring", "seed"), [("cosine", 0), ("mahalanobis", 2)])
def test_evaluator_equals_metrics_on_directly_encoded_embeddings(scoring, seed):
    processor = make_processor()
    model = make_model(processor=processor, scoring=scoring, seed=seed)
    clips = _clips()
    evaluator = RetrievalEvaluator(clips, processor, languages=["eng", "fra"], batch_size=4)
    metrics = evaluator(model)
    assert (evaluator.name, evaluator.primary_metric, evaluator.greater_is_better) == (
        "retrieval",
        "t2a_mAP@10",
        True,
    )
    assert evaluator.primary_metric in metrics
    assert RetrievalEvaluator(clips, processor, map_cutoffs=(), ks=(5,)).primary_metric == "t2a_R@5"
    table = caption_table(clips, ["eng", "fra"])
    audio = encode_audio(model, processor, clips)
    text = encode_text(model, processor, table.captions)
    assert_clear_ranks(head_similarity(model)(text, audio), table.text_to_audio.tolist())
    expected = retrieval_metrics(
        head_similarity(model)(text, audio),
        table.text_to_audio,
        languages=table.languages,
        caption_groups=table.caption_groups,
    )
    assert metrics == pytest.approx(expected)
    assert "t2a_R@1/fra" in metrics and "MRV" in metrics


def test_evaluator_ot_plan_mode_ranks_by_pots_plan_and_bad_mode(monkeypatch):
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    clips = _clips()
    table = caption_table(clips)
    # Embeddings with a hub: clip 5 sits at the origin, near every caption, so the head's distances rank it
    # high for many captions, while the plan's uniform clip marginal (m-LTM Eq. 5) spreads the captions out.
    generator = torch.Generator().manual_seed(0)
    audio = torch.randn(6, 16, generator=generator)
    audio[5] = 0.0
    text = 0.5 * audio[table.text_to_audio] + 0.6 * torch.randn(12, 16, generator=generator)
    monkeypatch.setattr(model, "get_audio_features", lambda **inputs: audio)
    monkeypatch.setattr(model, "get_text_features", lambda **inputs: text)
    evaluator = RetrievalEvaluator(clips, processor, scoring="ot_plan", ot_reg=0.5)
    metrics = evaluator(model)
    cost = model.scoring_head.distance(text, audio).detach().double().numpy()
    plan = pot_log_plan(cost, 0.5)
    # The ranks the metrics count are clear of rounding, under the plan and under the head's distances.
    clear_rank_of(plan, table.text_to_audio)
    clear_rank_of(-cost, table.text_to_audio)
    assert metrics == pytest.approx(retrieval_metrics(plan, table.text_to_audio), abs=1e-12)
    head_metrics = retrieval_metrics(-cost, table.text_to_audio)
    assert metrics["t2a_R@1"] == 1.0 and head_metrics["t2a_R@1"] == pytest.approx(7 / 12)
    assert evaluator.protocol["scoring"] == "ot_plan" and evaluator.protocol["ot_reg"] == 0.5
    with pytest.raises(ValueError, match="scoring must be one of \\('head', 'ot_plan'\\)"):
        RetrievalEvaluator(_clips(), processor, scoring="plan")


def test_evaluator_leaves_the_model_in_its_mode():
    processor = make_processor()
    model = make_model(processor=processor).train()
    RetrievalEvaluator(_clips(3), processor)(model)
    assert all(module.training for module in model.modules())
    RetrievalEvaluator(_clips(3), processor)(model.eval())
    assert not any(module.training for module in model.modules())


def test_embedding_spread():
    assert embedding_spread(torch.ones(4, 3)) == 0.0
    assert embedding_spread(torch.zeros(4, 3)) == 0.0
    assert embedding_spread(torch.eye(4)) == pytest.approx(1 - 1 / 4)  # 1 - ||mean||^2 for unit rows
    assert embedding_spread(torch.eye(4) * 1e-3 + torch.ones(4, 4)) == pytest.approx(3e-6 / 4 / 4, rel=1e-2)


def test_collapsed_embeddings_are_reported_naming_the_split(caplog):
    processor = make_processor()
    model = make_model(processor=processor)
    with caplog.at_level(logging.WARNING):
        RetrievalEvaluator(_clips(), processor, split="validation")(model)
    assert "collapsed" not in caplog.text
    model.audio_projection.weight.data.zero_()  # every clip embeds to the same (zero) vector
    with caplog.at_level(logging.WARNING):
        metrics = RetrievalEvaluator(_clips(), processor, split="test")(model)
    assert "Evaluating on split 'test': the audio embeddings have collapsed" in caplog.text
    assert "across the 6 clips" in caplog.text and "caption embeddings" not in caplog.text
    # All six clips tie for every caption: the relevant one is ranked last (it used to be ranked first).
    assert metrics["t2a_R@1"] == 0.0 and metrics["t2a_R@5"] == 0.0 and metrics["t2a_mean_rank"] == 6.0


def test_collapse_is_judged_on_distinct_captions(caplog):
    """Two clips sharing one caption embed it once: no collapse. Distinct captions that all embed alike are one."""
    processor = make_processor()
    model = make_model(processor=processor)
    clips = _clips(2).map(lambda row: {"captions": ["a dog barks"]}).remove_columns("translations")
    with caplog.at_level(logging.WARNING):
        RetrievalEvaluator(clips, processor, split="test")(model)
    assert "collapsed" not in caplog.text  # it fired with "variance 0.0e+00" when judged on the two queries
    model.text_projection.weight.data.zero_()  # every caption embeds to the same vector
    with caplog.at_level(logging.WARNING):
        RetrievalEvaluator(_clips(), processor, split="test")(model)
    assert "Evaluating on split 'test': the caption embeddings have collapsed" in caplog.text
    assert "across the 12 distinct captions" in caplog.text


def test_protocol_records_how_the_figures_were_obtained():
    processor = make_processor()
    model = make_model(processor=processor, scoring="mahalanobis")
    evaluator = RetrievalEvaluator(
        _clips(), processor, languages=["eng", "deu"], split="test", ks=(1, 3), map_cutoffs=(10, 16)
    )
    assert evaluator.protocol["similarity"] is None
    metrics = evaluator(model)
    assert evaluator.protocol == {
        "tie_rule": TIE_RULE,
        "split": "test",
        "clips": 6,
        "official_clips": None,  # the dataset records no provenance
        "corpus": None,
        "captions": 12 + 10,  # clip 2 has no German caption
        "languages": ["eng", "deu"],
        "relevance": "own clip",
        "relevance_file": None,
        "relevance_threshold": None,
        "captions_without_judgement": 0,
        "relevant_clips_per_caption": 1.0,
        "ks": [1, 3],
        "map_cutoffs": [10, 16],
        "scoring": "head",
        "similarity": "mahalanobis",
        "window_pooling": None,
        "clips_cut_to_window": 0,
        "skipped_clips": [],
    }
    assert {"t2a_R@3/deu", "a2t_mAP@16", "MRV"} <= set(metrics) and "t2a_R@5" not in metrics


def test_protocol_records_the_corpus_split_and_its_official_size():
    processor = make_processor()
    provenance = {
        "corpus": "AudioCaps",
        "layout": "official CSV",
        "split": "test",
        "corpus_split": "test",
        "metadata": ["test.csv"],
        "official_release": "AudioCaps v1",
        "official_clips": 975,
        "skipped": 969,
        "clips_found": 6,
        "filters": [],
    }
    clips = set_corpus_provenance(_clips(), provenance)
    protocol = RetrievalEvaluator(clips, processor, split="test").protocol
    assert protocol["official_clips"] == 975 and protocol["clips"] == 6 and protocol["corpus"] == provenance
    other_split = set_corpus_provenance(
        _clips(), {**provenance, "split": "validation", "official_clips": 495}
    )
    joined = concatenate_datasets([clips, other_split])  # as ESC-50 folds are joined
    assert RetrievalEvaluator(joined, processor).protocol["official_clips"] == 975 + 495
    unknown = set_corpus_provenance(_clips(), {**provenance, "official_clips": None})
    assert (
        RetrievalEvaluator(concatenate_datasets([clips, unknown]), processor).protocol["official_clips"]
        is None
    )


def test_relevance_judgements_choose_the_queries_and_their_clips(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    clips = _clips()
    judged = {"a dog barks loudly": [0, 3], "a siren wails together": [4], "a dog barks high": [5, 1, 2]}
    evaluator = RetrievalEvaluator(
        clips, processor, languages=["eng", "fra"], relevance=judged, map_cutoffs=(16,)
    )
    metrics = evaluator(model)
    # Expected: the judged English captions and their French translations, with the judged clips.
    table = caption_table(clips, ["eng", "fra"])
    english_of_group = {
        int(group): caption
        for caption, language, group in zip(table.captions, table.languages, table.caption_groups)
        if language == "eng"
    }
    rows = [
        row for row, group in enumerate(table.caption_groups.tolist()) if english_of_group[group] in judged
    ]
    assert [table.captions[row] for row in rows] == [
        "a dog barks loudly",
        "un chien loudly",
        "a siren wails together",
        "une sirène together",
        "a dog barks high",
        "un chien high",
    ]
    audio = encode_audio(model, processor, clips)
    text = encode_text(model, processor, [table.captions[row] for row in rows])
    judged_clips = [judged[english_of_group[int(table.caption_groups[row])]] for row in rows]
    assert_clear_ranks(head_similarity(model)(text, audio), judged_clips)
    expected = retrieval_metrics_from_embeddings(
        audio,
        text,
        judged_clips,
        languages=[table.languages[row] for row in rows],
        caption_groups=table.caption_groups[rows],
        map_cutoffs=(16,),
    )
    assert metrics == pytest.approx(expected)
    assert "t2a_recall_fraction@1/fra" in metrics
    assert evaluator.protocol["relevance"] == "judgements" and evaluator.protocol["captions"] == 6
    assert evaluator.protocol["captions_without_judgement"] == 24 - 6
    assert evaluator.protocol["relevant_clips_per_caption"] == pytest.approx((2 + 2 + 1 + 1 + 3 + 3) / 6)

    path = tmp_path / "judgements.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(
            [
                ["caption", "file_name", "relevance"],
                ["a dog barks loudly", "c0", "90"],
                ["a dog barks loudly", "c3", "70"],
                ["a dog barks loudly", "c1", "10"],
                ["a siren wails together", "c4", "80"],
                ["a dog barks high", "c5", "99"],
                ["a dog barks high", "c1", "60"],
                ["a dog barks high", "c2", "55"],
            ]
        )
    from_file = RetrievalEvaluator(
        clips, processor, languages=["eng", "fra"], relevance=path, relevance_threshold=50, map_cutoffs=(16,)
    )
    assert from_file(model) == pytest.approx(metrics)
    assert (
        from_file.protocol["relevance_file"] == str(path) and from_file.protocol["relevance_threshold"] == 50
    )
    with pytest.raises(
        ValueError, match="None of the 12 English captions of the evaluation set has relevance"
    ):
        RetrievalEvaluator(clips, processor, relevance={"a cat meows": [0]})
    with pytest.raises(ValueError, match="relevance_threshold applies to a relevance file"):
        RetrievalEvaluator(clips, processor, relevance=judged, relevance_threshold=0.5)


def test_window_pooling_encodes_long_clips_whole_and_is_recorded():
    processor = make_processor()
    model = make_model(processor=processor)
    clips = raw_audio_dataset([0.5, 3.0, 2.2, 4.0])
    windowing = Windowing(pooling="max")
    evaluator = RetrievalEvaluator(clips, processor, windowing=windowing)
    metrics = evaluator(model)
    table = caption_table(clips)
    audio = encode_audio(model, processor, clips, windowing=windowing)
    text = encode_text(model, processor, table.captions)
    assert_clear_ranks(head_similarity(model)(text, audio), table.text_to_audio.tolist())
    expected = retrieval_metrics_from_embeddings(audio, text, table.text_to_audio)
    assert metrics == pytest.approx(expected)
    assert evaluator.protocol["window_pooling"] == {
        "pooling": "max",
        "window_seconds": 1.015,
        "hop_seconds": 0.5075,
    }
    assert evaluator.protocol["clips_cut_to_window"] == 0
    own = RetrievalEvaluator(clips, processor)
    own(model)
    assert own.protocol["window_pooling"] is None and own.protocol["clips_cut_to_window"] == 3


def test_undecodable_clips_are_left_out_with_their_captions_and_judgements(caplog):
    processor = make_processor()
    model = make_model(processor=processor)
    clips = raw_audio_dataset([1.0] * 5, broken={1, 3})
    judged = {"a dog barks loudly": [0, 1], "a siren wails falling": [3], "a siren wails together": [4, 2]}
    evaluator = RetrievalEvaluator(clips, processor, relevance=judged, split="test")
    with caplog.at_level(logging.WARNING):
        metrics = evaluator(model)
    assert (
        "Evaluating on split 'test': 2 clip(s) cannot be decoded and are left out with their captions or labels: "
        "clip1" in caplog.text
    )
    kept = clips.select([0, 2, 4])
    audio = encode_audio(model, processor, kept)
    text = encode_text(model, processor, ["a dog barks loudly", "a siren wails together"])
    assert_clear_ranks(head_similarity(model)(text, audio), [[0], [2, 1]])
    expected = retrieval_metrics_from_embeddings(
        audio, text, [[0], [2, 1]]
    )  # clip rows re-indexed to 0, 1, 2
    assert metrics == pytest.approx(expected)
    assert evaluator.protocol["clips"] == 3 and evaluator.protocol["captions"] == 2
    assert [item["audio_id"] for item in evaluator.protocol["skipped_clips"]] == ["clip1", "clip3"]
    with pytest.raises(AudioDecodeError, match="clip1: the audio is unreadable or corrupt"):
        RetrievalEvaluator(clips, processor, strict=True)(model)


# The report -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_report_has_the_metrics_of_a_call_and_every_figure(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot", "reg": 0.1}, scoring="euclidean")
    evaluator = RetrievalEvaluator(_clips(), processor, languages=["eng", "fra"], split="test")
    report = evaluator.report(model, tmp_path / "report", transport_batch_size=4)
    assert report.metrics == evaluator(model)
    assert report.path == tmp_path / "report" / "report.html"
    assert sorted(path.name for path in report.path.parent.glob("*.png")) == [
        "rank_histogram.png",
        "recall_at_k.png",
        "transport_plan.png",
    ]
    page = report.path.read_text()
    assert "Retrieval on split &#x27;test&#x27; (6 clips)" in page and "<td>fra</td>" in page
    assert "the `iot` objective&#x27;s plan, reg = 0.1" in page


def test_empty_split_or_no_captions_is_refused_naming_the_split():
    processor = make_processor()
    with pytest.raises(ValueError, match="Split 'test' has no clips: nothing to evaluate"):
        RetrievalEvaluator(_clips().select([]), processor, split="test")
    no_captions = _clips(2).map(lambda row: {"captions": []})
    with pytest.raises(
        ValueError, match=r"The evaluation set has no captions in \['eng'\]: nothing to evaluate"
    ):
        RetrievalEvaluator(no_captions, processor)


def test_report_without_matplotlib_fails_before_encoding(monkeypatch, tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(model, "get_audio_features", lambda **inputs: pytest.fail("encoded in vain"))
    with pytest.raises(ImportError, match=r"pip install 'hf-atr\[plots\]'"):
        RetrievalEvaluator(_clips(), processor).report(model, tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_report_with_undecodable_clips_draws_the_plan_of_the_kept_ones(tmp_path, monkeypatch):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot", "reg": 0.1}, scoring="euclidean")
    clips = raw_audio_dataset([1.0] * 5, broken={1})
    drawn = {}

    def spy(model, processor, dataset, audio_embeds, **kwargs):
        drawn.update(audio_ids=dataset["audio_id"], audio_embeds=audio_embeds)
        return batch_transport(model, processor, dataset, audio_embeds, **kwargs)

    monkeypatch.setattr("hf_atr.evaluation.evaluator.batch_transport", spy)
    evaluator = RetrievalEvaluator(clips, processor, split="test")
    report = evaluator.report(model, tmp_path, transport_batch_size=4)
    kept = clips.select([0, 2, 3, 4])
    assert drawn["audio_ids"] == ["clip0", "clip2", "clip3", "clip4"]
    torch.testing.assert_close(drawn["audio_embeds"], encode_audio(model, processor, kept))
    assert report.metrics == evaluator(model)
    assert "Retrieval on split &#x27;test&#x27; (4 clips)" in report.path.read_text()
    assert (tmp_path / "transport_plan.png").is_file()
    assert [item["audio_id"] for item in evaluator.protocol["skipped_clips"]] == ["clip1"]
