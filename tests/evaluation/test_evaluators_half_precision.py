"""The evaluators with a model in bfloat16 or float16: their metrics are those of the model's float32 embeddings
(encoded as the evaluators encode), and their scores close to the float32 model's."""

from __future__ import annotations

import pytest
import torch
from tiny_models import WORD_CLASSES, feature_dataset, make_model, make_processor
from tiny_models import translated_feature_dataset as _clips

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import caption_table, encode_text
from hf_atr.evaluation.clip_evaluator import head_similarity
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.evaluation.zero_shot import ZeroShotEvaluator
from hf_atr.metrics.retrieval import retrieval_metrics

HALF_DTYPES = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("scoring", ["cosine", "mahalanobis"])
def test_retrieval_evaluator_in_half_precision(scoring, dtype):
    processor = make_processor()
    model = make_model(processor=processor, scoring=scoring).to(dtype)
    clips = _clips()
    metrics = RetrievalEvaluator(clips, processor, languages=["eng", "fra"], batch_size=4)(model)
    table = caption_table(clips, ["eng", "fra"])
    audio, text = encode_audio(model, processor, clips), encode_text(model, processor, table.captions)
    assert audio.dtype == text.dtype == torch.float32
    scores = head_similarity(model)(text, audio)
    assert scores.dtype == torch.float32
    expected = retrieval_metrics(
        scores, table.text_to_audio, languages=table.languages, caption_groups=table.caption_groups
    )
    assert metrics == pytest.approx(expected) and "MRV" in metrics


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_zero_shot_evaluator_in_half_precision(dtype):
    processor = make_processor()
    model = make_model(processor=processor)
    clips = feature_dataset(16).add_column(
        "label", [WORD_CLASSES[index % len(WORD_CLASSES)] for index in range(16)]
    )
    evaluator = ZeroShotEvaluator(clips, processor, templates=["a {} sound", "the {class}"])
    full = evaluator.predict(model)
    half = evaluator.predict(model.to(dtype))
    assert half.scores.dtype == torch.float32 and torch.isfinite(half.scores).all()
    torch.testing.assert_close(half.scores, full.scores, atol=0.03, rtol=0)
    assert set(half.metrics()) == set(full.metrics())
