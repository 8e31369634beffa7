"""The step both evaluators share: the clips encoded once by one protocol, and what that encoding did recorded."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_model, make_processor, raw_audio_dataset

from hf_atr.audio_encoding import encode_audio
from hf_atr.evaluation.clip_evaluator import ClipEvaluator, describe_split, head_similarity
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.evaluation.zero_shot import ZeroShotEvaluator
from hf_atr.windowing import Windowing


def test_encode_clips_records_the_head_the_clips_and_those_left_out():
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    clips = raw_audio_dataset([1.0, 1.0, 1.0], broken={1})
    evaluator = ClipEvaluator(
        clips, processor, batch_size=2, show_progress=False, split="test", windowing=None, strict=False
    )
    evaluator.protocol = evaluator.encoding_protocol()
    assert evaluator.protocol == {
        "similarity": None, "window_pooling": None, "clips_cut_to_window": None, "skipped_clips": [],
    }  # fmt: skip
    encoded = evaluator.encode_clips(model)
    torch.testing.assert_close(encoded.embeddings, encode_audio(model, processor, clips.select([0, 2])))
    assert evaluator.protocol == {
        "similarity": "euclidean",
        "window_pooling": None,
        "clips_cut_to_window": 0,
        "skipped_clips": [{"audio_id": "clip1", "reason": encoded.skipped[0].reason}],
        "clips": 2,
    }


@pytest.mark.parametrize("evaluator_class", [RetrievalEvaluator, ZeroShotEvaluator])
def test_both_evaluators_record_the_encoding_the_same_way(evaluator_class):
    """One shared step: the same clips and windowing give the same protocol entries in either evaluator."""
    processor = make_processor()
    model = make_model(processor=processor)
    clips = raw_audio_dataset([3.0, 1.0, 1.0, 1.0], broken={2}, labels=True)
    windowing = Windowing(pooling="max")
    evaluator = evaluator_class(clips, processor, split="test", windowing=windowing)
    evaluator(model)
    shared = ClipEvaluator(
        clips, processor, batch_size=64, show_progress=False, split="test", windowing=windowing, strict=False
    )
    shared.protocol = shared.encoding_protocol()
    shared.encode_clips(model)
    assert {key: evaluator.protocol[key] for key in shared.protocol} == shared.protocol
    assert shared.protocol["window_pooling"]["pooling"] == "max" and shared.protocol["clips"] == 3


def test_a_window_the_extractor_cannot_read_is_refused_before_anything_is_encoded():
    processor = make_processor()
    with pytest.raises(
        ValueError, match=r"window_seconds=60 is longer than the 1\.015-s window ASTFeatureExtractor reads"
    ):
        ClipEvaluator(
            raw_audio_dataset([1.0]),
            processor,
            batch_size=2,
            show_progress=False,
            split=None,
            windowing=Windowing(window_seconds=60),
            strict=False,
        )


def test_head_similarity_is_the_scoring_head_on_cpu_and_splits_are_named():
    processor = make_processor()
    model = make_model(processor=processor, scoring="mahalanobis")
    text, audio = torch.randn(3, 16), torch.randn(5, 16)
    torch.testing.assert_close(
        head_similarity(model)(text, audio), model.scoring_head.similarity(text, audio).detach()
    )
    assert (
        describe_split("fold1") == "Split 'fold1'"
        and describe_split(None, capital=False) == "the evaluation set"
    )
