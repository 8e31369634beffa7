"""The retrieval pipeline with a model in bfloat16 or float16: every query kind, classify and moments run; the index
records the dtype its embeddings were computed in, recognises its model in another precision, says once when the
query's dtype differs, and refuses to mix precisions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from moment_fixtures import write_moment_set
from pipeline_setups import CAPTIONS, caplog_warnings, save_model, write_clips
from safetensors import safe_open
from safetensors.torch import save_file
from tiny_models import make_model, make_processor
from transformers import pipeline

from hf_atr.data.moments import load_moments
from hf_atr.evaluation.moment_evaluator import MomentEvaluator
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.index_storage import (
    IndexFormatError,
    IndexMismatchError,
    model_dtype,
    model_fingerprint,
    model_fingerprints,
)
from hf_atr.pipelines.retrieval_pipeline import register_pipeline

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

HALF_DTYPES = [torch.bfloat16, torch.float16]
SCORE_TOLERANCE = 0.03
"""Scores of a half-precision query against float32's (cosines of unit vectors; bfloat16 keeps ~3 digits)."""


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return write_clips(tmp_path_factory.mktemp("clips"), 4)


@pytest.fixture(scope="module")
def float32_index(model_dir, clips, tmp_path_factory):
    """The float32 pipeline's index of the clips and captions, saved, and its text-query hits."""
    register_pipeline()
    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    pipe.index(clips, show_progress=False)
    pipe.index(CAPTIONS, show_progress=False)
    directory = tmp_path_factory.mktemp("index32")
    pipe.save_index(directory)
    return directory, pipe("a dog barks", top_k=4)


def half_pipeline(model_dir, dtype, **kwargs):
    register_pipeline()
    return pipeline("audio-text-retrieval", model=str(model_dir), dtype=dtype, **kwargs)


def scores_by_id(hits):
    return {hit["id"]: hit["score"] for hit in hits}


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_every_query_kind_runs_in_half_precision(model_dir, clips, float32_index, dtype):
    pipe = half_pipeline(model_dir, dtype)
    assert pipe.model.dtype == dtype
    pipe.index(clips, show_progress=False)
    pipe.index(CAPTIONS, show_progress=False)
    assert pipe.audio_index.embeddings.dtype == pipe.text_index.embeddings.dtype == "float32"
    assert pipe.audio_index.embedding_dtype == pipe.text_index.embedding_dtype == model_dtype(pipe.model)
    text_hits = pipe("a dog barks", top_k=4)
    expected = scores_by_id(float32_index[1])
    assert scores_by_id(text_hits) == pytest.approx(expected, abs=SCORE_TOLERANCE)
    assert [hit["caption"] for hit in pipe(clips[0], top_k=5)] and len(pipe(audio=clips[1], top_k=2)) == 2
    by_example = pipe(audio=clips[1], top_k=4)
    assert max(hit["score"] for hit in by_example) <= 1.0 + 1e-6  # unit vectors in float32: no cosine above 1
    labels = pipe.classify(clips[0], labels=["dog", "siren", "beep"])
    assert sum(label["score"] for label in labels) == pytest.approx(1.0, abs=1e-5)
    assert pipe.moments("a dog barks", clips[0]) and pipe.moments("a dog barks")
    assert {parameter.dtype for parameter in pipe.model.parameters()} == {dtype}


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_the_saved_index_records_its_dtype_and_fingerprints(model_dir, clips, tmp_path, dtype):
    pipe = half_pipeline(model_dir, dtype)
    pipe.index(clips, show_progress=False)
    pipe.save_index(tmp_path)
    with safe_open(tmp_path / "audio_index.safetensors", framework="pt") as handle:
        metadata = handle.metadata()
        assert handle.get_tensor("embeddings").dtype == torch.float32
    name = model_dtype(pipe.model)
    assert metadata["embedding_dtype"] == name
    assert json.loads(metadata["fingerprints"]) == {name: model_fingerprint(pipe.model)}
    assert EmbeddingIndex.load(tmp_path, "audio_index").embedding_dtype == name


def test_a_float32_model_records_its_fingerprint_in_each_half_precision(model_dir):
    model = half_pipeline(model_dir, torch.float32).model
    fingerprints = model_fingerprints(model)
    assert set(fingerprints) == {"float32", "bfloat16", "float16"}
    for dtype in HALF_DTYPES:  # the weights rounded to a half precision are those of the model loaded in it
        half = half_pipeline(model_dir, dtype).model
        assert (
            fingerprints[model_dtype(half)]
            == model_fingerprint(half)
            == model_fingerprint(model, model_dtype(half))
        )
    assert len(set(fingerprints.values())) == 3


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_a_query_of_another_dtype_works_with_one_notice(model_dir, float32_index, dtype):
    directory, float32_hits = float32_index
    with caplog_warnings() as warnings:
        pipe = half_pipeline(
            model_dir, dtype, index_dir=directory
        )  # the fingerprint checked in the half dtype
        first = pipe("a dog barks", top_k=4)
        pipe("a siren wails", top_k=4)
        pipe.moments("a dog barks")
    assert warnings[0].count("The index's embeddings were computed in float32 and this model computes") == 1
    assert scores_by_id(first) == pytest.approx(scores_by_id(float32_hits), abs=SCORE_TOLERANCE)
    with caplog_warnings() as warnings:
        pipe(CAPTIONS[0])
        pipe("a dog barks", top_k=1)
    assert "computed in float32" not in warnings[0]


def test_a_float32_model_reads_a_half_precision_index(model_dir, clips, tmp_path):
    half = half_pipeline(model_dir, torch.bfloat16)
    half.index(clips, show_progress=False)
    half.save_index(tmp_path)
    with caplog_warnings() as warnings:
        pipe = half_pipeline(model_dir, torch.float32, index_dir=tmp_path)
        pipe("a dog barks", top_k=2)
    assert "computed in bfloat16 and this model computes the queries in float32" in warnings[0]
    assert pipe.audio_index.embedding_dtype == "bfloat16"


def test_an_index_of_other_weights_is_refused_in_any_precision(model_dir, float32_index, tmp_path):
    directory, _ = float32_index
    save_model(tmp_path, seed=1)  # other weights
    for dtype in (torch.float32, *HALF_DTYPES):
        with pytest.raises(
            IndexMismatchError, match=r"fingerprint .* \(the weights rounded to|fingerprint [0-9a-f]+"
        ):
            half_pipeline(tmp_path, dtype, index_dir=directory)


def test_bfloat16_and_float16_cannot_check_each_other_and_say_so(model_dir, clips, tmp_path):
    bf16 = half_pipeline(model_dir, torch.bfloat16)
    bf16.index(clips, show_progress=False)
    bf16.save_index(tmp_path)
    with caplog_warnings() as warnings:
        pipe = half_pipeline(model_dir, torch.float16, index_dir=tmp_path)
    assert "records its model's fingerprint in bfloat16, and this model computes in float16" in warnings[0]
    assert len(pipe(audio=clips[0], top_k=2)) == 2


def test_appending_embeddings_of_another_dtype_is_refused(model_dir, clips, float32_index):
    directory, _ = float32_index
    pipe = half_pipeline(model_dir, torch.bfloat16, index_dir=directory)
    with pytest.raises(
        ValueError, match=r"holds embeddings computed in float32, and this model computes in bfloat16"
    ):
        pipe.index(clips[:1], ids=["new"], append=True, show_progress=False)
    with pytest.raises(ValueError, match=r"holds embeddings computed in float32"):
        pipe.index(["a new caption"], ids=["new"], append=True, show_progress=False)


def test_an_index_saved_before_dtypes_were_recorded_reads_as_float32(model_dir, float32_index, tmp_path):
    directory, _ = float32_index
    for suffix in (".safetensors", ".json"):
        (tmp_path / f"audio_index{suffix}").write_bytes((directory / f"audio_index{suffix}").read_bytes())
    path = tmp_path / "audio_index.safetensors"
    with safe_open(path, framework="pt") as handle:
        metadata, vectors = handle.metadata(), handle.get_tensor("embeddings")
    older = {key: value for key, value in metadata.items() if key not in ("embedding_dtype", "fingerprints")}
    save_file({"embeddings": vectors}, path, older)  # as an earlier hf-atr wrote it: one float32 fingerprint
    loaded = EmbeddingIndex.load(tmp_path, "audio_index", expected_fingerprint=model_fingerprints(
        half_pipeline(model_dir, torch.float32).model))  # fmt: skip
    assert (loaded.embedding_dtype, set(loaded.fingerprints)) == ("float32", {"float32"})
    with caplog_warnings() as warnings:
        half_pipeline(model_dir, torch.bfloat16, index_dir=tmp_path)
    assert "records its model's fingerprint in float32, and this model computes in bfloat16" in warnings[0]


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_the_moment_evaluator_runs_in_half_precision(tmp_path, dtype):
    write_moment_set(tmp_path, recordings=2, split="test", seed=1)
    moments = load_moments(tmp_path / "moments_test_release.jsonl")
    processor = make_processor()
    model = make_model(processor=processor)
    evaluator = MomentEvaluator(moments, processor, hop_seconds=0.5)
    full = evaluator.evaluate(model)
    half = evaluator.evaluate(model.to(dtype))
    assert half.metrics.keys() == full.metrics.keys()
    for qid, curve in half.curves.items():
        np.testing.assert_array_equal(curve.starts, full.curves[qid].starts)
        np.testing.assert_allclose(curve.scores, full.curves[qid].scores, atol=SCORE_TOLERANCE)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("embedding_dtype", "int8", "unknown embedding dtype 'int8'"),
        ("fingerprints", '["abc"]', "are not a JSON object of dtype names to strings"),
        ("fingerprints", '{"float32": 3}', "are not a JSON object of dtype names to strings"),
    ],
)
def test_a_corrupt_dtype_record_is_reported(float32_index, tmp_path, key, value, message):
    directory, _ = float32_index
    for suffix in (".safetensors", ".json"):
        (tmp_path / f"audio_index{suffix}").write_bytes((directory / f"audio_index{suffix}").read_bytes())
    path = tmp_path / "audio_index.safetensors"
    with safe_open(path, framework="pt") as handle:
        metadata, vectors = handle.metadata(), handle.get_tensor("embeddings")
    save_file({"embeddings": vectors}, path, {**metadata, key: value})
    with pytest.raises(IndexFormatError, match=message):
        EmbeddingIndex.load(tmp_path, "audio_index")
