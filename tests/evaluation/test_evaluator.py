from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from tiny_models import make_model, make_processor
from tiny_models import translated_feature_dataset as _clips

from hf_atr.encoding import caption_table, encode_audio, encode_text
from hf_atr.evaluation.evaluator import RetrievalEvaluator, head_similarity, ot_plan_scores
from hf_atr.evaluation.retrieval import retrieval_metrics


@pytest.mark.parametrize("scoring", ["cosine", "mahalanobis"])
def test_evaluator_equals_metrics_on_directly_encoded_embeddings(scoring):
    processor = make_processor()
    model = make_model(processor=processor, scoring=scoring)
    clips = _clips()
    metrics = RetrievalEvaluator(clips, processor, languages=["eng", "fra"], batch_size=4)(model)
    table = caption_table(clips, ["eng", "fra"])
    audio = encode_audio(model, processor, clips)
    text = encode_text(model, processor, table.captions)
    expected = retrieval_metrics(
        head_similarity(model)(text, audio),
        table.text_to_audio,
        languages=table.languages,
        caption_groups=table.caption_groups,
    )
    assert metrics == pytest.approx(expected)
    assert "t2a_R@1/fra" in metrics and "MRV" in metrics


def test_ot_plan_scores_are_the_log_of_pots_plan_per_language():
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    clips = _clips()
    table = caption_table(clips, ["eng", "fra"])
    audio = encode_audio(model, processor, clips)
    text = encode_text(model, processor, table.captions)
    scores = ot_plan_scores(model, text, audio, table.languages, reg=0.05)
    english = [index for index, language in enumerate(table.languages) if language == "eng"]
    cost = model.scoring_head.distance(text[english], audio).detach().double().numpy()
    plan = ot.sinkhorn(
        np.full(len(english), 1 / len(english)),
        np.full(6, 1 / 6),
        cost,
        0.05,
        method="sinkhorn_log",
        stopThr=1e-9,
        numItermax=100000,
    )
    np.testing.assert_allclose(np.exp(scores[english].double().numpy()), plan, rtol=1e-3, atol=1e-7)


def test_evaluator_ot_plan_mode_and_bad_mode():
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    metrics = RetrievalEvaluator(_clips(), processor, scoring="ot_plan")(model)
    assert 0 <= metrics["t2a_R@1"] <= 1
    with pytest.raises(ValueError, match="scoring must be one of \\('head', 'ot_plan'\\)"):
        RetrievalEvaluator(_clips(), processor, scoring="plan")


def test_encoding_keeps_training_mode_of_the_model():
    processor = make_processor()
    model = make_model(processor=processor).train()
    RetrievalEvaluator(_clips(), processor)(model)
    assert model.training
    assert isinstance(encode_audio(model, processor, _clips(2)), torch.Tensor)
