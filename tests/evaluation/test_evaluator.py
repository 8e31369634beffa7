from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from datasets import Dataset
from tiny_models import make_model, make_processor

from hf_atr.evaluation.evaluator import (
    RetrievalEvaluator,
    caption_table,
    encode_audio,
    encode_text,
    head_similarity,
    ot_plan_scores,
)
from hf_atr.evaluation.retrieval import retrieval_metrics


def _clips(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return Dataset.from_dict(
        {
            "audio_id": [f"c{i}" for i in range(n)],
            "captions": [[f"a dog barks {i}", f"a siren wails {i}"] for i in range(n)],
            "translations": [
                {
                    "fra": [f"un chien {i}", f"une sirène {i}"],
                    "deu": None if i == 2 else [f"ein Hund {i}", f"eine Sirene {i}"],
                }
                for i in range(n)
            ],
            "input_values": [rng.standard_normal((100, 32)).astype(np.float32) for _ in range(n)],
        }
    )


def test_caption_table_flattens_languages_and_skips_missing_translations():
    table = caption_table(_clips(3), ["eng", "deu"])
    assert table.captions == [
        "a dog barks 0",
        "a siren wails 0",
        "ein Hund 0",
        "eine Sirene 0",
        "a dog barks 1",
        "a siren wails 1",
        "ein Hund 1",
        "eine Sirene 1",
        "a dog barks 2",
        "a siren wails 2",
    ]
    assert table.text_to_audio.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert table.languages == ["eng", "eng", "deu", "deu"] * 2 + ["eng", "eng"]
    assert table.caption_groups.tolist() == [0, 1, 0, 1, 2, 3, 2, 3, 4, 5]


def test_caption_table_names_missing_columns_and_empty_captions():
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['translations'\]"):
        caption_table(Dataset.from_dict({"captions": [["x"]]}), ["eng", "fra"])
    with pytest.raises(ValueError, match="Clip 0: eng caption 1 is empty"):
        caption_table(Dataset.from_dict({"captions": [["x", " "]]}))


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
