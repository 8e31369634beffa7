"""The same clip gives the same output on every call, through every inference path, for every feature family
(CLAP unfused and fused, whose extractor crops at random in training; a dithering Whisper; AST, PANNs, PE-Audio):
equal bit for bit, call after call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from synthetic_audio import synthetic_clip
from tiny_models import (
    make_model,
    make_processor,
    save_tiny_clap_checkpoint,
    save_tiny_pe_audio_checkpoint,
)

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio import encode_wav
from hf_atr.evaluation import RetrievalEvaluator, ZeroShotEvaluator
from hf_atr.features import batched_features_for
from hf_atr.pipelines.retrieval_pipeline import AudioTextRetrievalPipeline
from hf_atr.windowing import Windowing, extractor_window

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

FAMILIES = ["clap", "clap_fused", "whisper_dither", "ast", "panns", "pe_audio"]
LABELS = ["dog", "siren"]


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request, tmp_path_factory):
    """``(model, processor, long_clip, short_clip)``: the long clip spans three extractor windows (PE-Audio: 3.1 s)."""
    family = request.param
    directory = tmp_path_factory.mktemp(family)
    if family.startswith("clap"):
        save_tiny_clap_checkpoint(directory, fused=family == "clap_fused")
        model, processor = AtrDualEncoderModel.from_clap(directory), AtrProcessor.from_clap(directory)
    elif family == "pe_audio":
        save_tiny_pe_audio_checkpoint(directory)
        model, processor = AtrDualEncoderModel.from_pe_audio(directory), AtrProcessor.from_pe_audio(directory)
    else:
        audio_family = "whisper" if family == "whisper_dither" else family
        processor = make_processor(audio_family)
        model = make_model(audio_family, processor=processor)
        if family == "whisper_dither":
            processor.feature_extractor.dither = 0.01  # noise: training's, never inference's
    rate = processor.sampling_rate
    window = extractor_window(processor.feature_extractor).samples
    if family == "pe_audio":  # reads every sample, with nothing random: 2 s (10-s windows cost minutes here)
        window = rate
    long_clip = synthetic_clip(3 * window + rate // 10, rate, seed=1)
    short_clip = synthetic_clip(window // 2, rate, seed=2)
    return model.eval(), processor, long_clip, short_clip


def _twice(compute):
    """``compute()`` called twice; both results, each a tensor, an array, or a structure of them."""
    return compute(), compute()


def _assert_identical(first, again):
    if isinstance(first, dict):
        assert first.keys() == again.keys()
        for key in first:
            _assert_identical(first[key], again[key])
    elif isinstance(first, (list, tuple)):
        assert len(first) == len(again)
        for one, other in zip(first, again):
            _assert_identical(one, other)
    elif isinstance(first, torch.Tensor):
        torch.testing.assert_close(first, again, rtol=0, atol=0)
    elif isinstance(first, np.ndarray):
        np.testing.assert_array_equal(first, again)
    else:
        assert first == again


def _dataset(processor, clips):
    rate = processor.sampling_rate
    return Dataset.from_dict(
        {
            "audio_id": [f"clip{index}" for index in range(len(clips))],
            "audio": [{"bytes": encode_wav(clip, rate, subtype="FLOAT"), "path": None} for clip in clips],
            "captions": [["a dog barks"], ["a siren wails"]][: len(clips)],
            "label": LABELS[: len(clips)],
        }
    )


def test_processor_features(setup):
    _, processor, long_clip, short_clip = setup
    _assert_identical(*_twice(lambda: dict(processor(audio=[long_clip]))))
    _assert_identical(*_twice(lambda: dict(processor(audio=[short_clip, short_clip]))))
    if batched_features_for(processor.feature_extractor) is not None:
        _assert_identical(*_twice(lambda: dict(processor(audio=[long_clip], feature_backend="torch"))))


@pytest.mark.parametrize("windowing", [None, Windowing()], ids=["own_protocol", "windows"])
def test_encode_audio(setup, windowing):
    model, processor, long_clip, _ = setup
    _assert_identical(
        *_twice(lambda: encode_audio(model, processor, [{"audio": long_clip}], windowing=windowing))
    )


def test_a_clip_in_a_batch_is_embedded_as_alone(setup):
    model, processor, long_clip, short_clip = setup
    alone = encode_audio(model, processor, [{"audio": short_clip}])
    # Two copies, and beside a long clip: CLAP fusion marked one clip of a batch without long clips at random.
    copies = encode_audio(model, processor, [{"audio": short_clip}, {"audio": short_clip}])
    beside_long = encode_audio(model, processor, [{"audio": short_clip}, {"audio": long_clip}])
    for embedded in (copies[0], copies[1], beside_long[0]):
        torch.testing.assert_close(embedded, alone[0], atol=1e-5, rtol=0)


def test_pipeline_queries_classify_and_index(setup):
    model, processor, long_clip, short_clip = setup
    pipe = AudioTextRetrievalPipeline(model=model, processor=processor)
    rate = processor.sampling_rate
    corpus = [{"raw": long_clip, "sampling_rate": rate}, {"raw": short_clip, "sampling_rate": rate}]
    example = {"raw": long_clip, "sampling_rate": rate}

    def indexed():
        return pipe.index(corpus, ids=["long", "short"], show_progress=False).embeddings.copy()

    _assert_identical(*_twice(indexed))
    _assert_identical(*_twice(lambda: pipe(audio=example, top_k=2)))
    _assert_identical(*_twice(lambda: pipe.classify(example, labels=LABELS)))


@pytest.mark.slow
def test_evaluators(setup):
    model, processor, long_clip, short_clip = setup
    dataset = _dataset(processor, [long_clip, short_clip])
    retrieval = RetrievalEvaluator(dataset, processor)
    _assert_identical(*_twice(lambda: retrieval.encode_clips(model).embeddings))
    _assert_identical(*_twice(lambda: retrieval(model)))
    zero_shot = ZeroShotEvaluator(dataset, processor, labels=LABELS)
    _assert_identical(*_twice(lambda: zero_shot.predict(model).metrics()))
