"""pipeline("audio-text-retrieval"): indexing, text/audio queries vs brute force, round trip, zero-shot."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms
from transformers import pipeline

from hf_atr.data.audio import encode_wav
from hf_atr.pipelines.index import IndexFormatError
from hf_atr.pipelines.retrieval_pipeline import (
    INDEX_DIRNAME,
    AudioTextRetrievalPipeline,
    label_prompts,
    register_pipeline,
)
from hf_atr.processing_atr import AtrProcessor

CAPTIONS = ["a dog barks loudly", "birds sing", "a siren wails", "a car passes quietly", "beep tone high"]


def save_model(directory, **config_kwargs):
    processor = make_processor()
    model = make_model(processor=processor, **config_kwargs)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return model, processor


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    save_model(directory)
    return directory


@pytest.fixture
def pipe(model_dir):
    register_pipeline()
    return pipeline("audio-text-retrieval", model=str(model_dir))


@torch.no_grad()
def brute_force_text_to_audio(pipe, query, waveforms):
    text = pipe.model.get_text_features(**pipe.processor(text=[query]))
    audio = pipe.model.get_audio_features(**pipe.processor(audio=waveforms))
    return pipe.model.scoring_head.similarity(text, audio)[0]


def test_pipeline_factory_builds_our_pipeline_with_the_saved_processor(pipe):
    assert isinstance(pipe, AudioTextRetrievalPipeline)
    assert isinstance(pipe.processor, AtrProcessor)
    register_pipeline()  # idempotent


def test_text_query_ranks_clips_like_brute_force(pipe):
    waveforms = random_waveforms(6)
    pipe.index(waveforms, ids=[f"clip{i}" for i in range(6)], show_progress=False)
    hits = pipe("a dog barks", top_k=4)
    expected = brute_force_text_to_audio(pipe, "a dog barks", waveforms).topk(4)
    assert [hit["id"] for hit in hits] == [f"clip{i}" for i in expected.indices.tolist()]
    np.testing.assert_allclose([hit["score"] for hit in hits], expected.values.numpy(), atol=1e-5)


def test_audio_query_ranks_captions(pipe):
    pipe.index(CAPTIONS, show_progress=False)
    waveform = random_waveforms(1, seed=5)[0]
    hits = pipe(waveform, top_k=len(CAPTIONS))
    with torch.no_grad():
        audio = pipe.model.get_audio_features(**pipe.processor(audio=[waveform]))
        text = pipe.model.get_text_features(**pipe.processor(text=CAPTIONS))
        expected = pipe.model.scoring_head.similarity(text, audio)[:, 0].argsort(descending=True).tolist()
    assert [hit["caption"] for hit in hits] == [CAPTIONS[i] for i in expected]
    assert [hit["id"] for hit in hits] == [str(i) for i in expected]


def test_audio_file_path_is_an_audio_query(pipe, tmp_path):
    waveform = random_waveforms(1, seed=5)[0]
    path = tmp_path / "clip.wav"
    path.write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype="FLOAT"))
    pipe.index(CAPTIONS, show_progress=False)
    from_path, from_array = pipe(str(path), top_k=3), pipe(waveform, top_k=3)
    assert [hit["id"] for hit in from_path] == [hit["id"] for hit in from_array]


def clips_dataset(count=4):
    waveforms = random_waveforms(count, seed=7)
    return Dataset.from_dict(
        {
            "audio_id": [f"clip{i}" for i in range(count)],
            "audio": [
                {"bytes": encode_wav(w, SAMPLING_RATE, subtype="FLOAT"), "path": None} for w in waveforms
            ],
            "captions": [[CAPTIONS[i % 5], CAPTIONS[(i + 1) % 5]] for i in range(count)],
        }
    )


def test_dataset_index_round_trip_through_the_model_directory(tmp_path):
    register_pipeline()
    save_model(tmp_path)
    pipe = pipeline("audio-text-retrieval", model=str(tmp_path))
    pipe.index(clips_dataset(), show_progress=False)
    assert pipe.audio_index.ids == [f"clip{i}" for i in range(4)]
    assert pipe.text_index.ids[:3] == ["clip0#0", "clip0#1", "clip1#0"]
    waveform = random_waveforms(1, seed=9)[0]
    before = pipe("a siren wails", top_k=3), pipe(waveform, top_k=3)
    written = pipe.save_index()
    assert {path.parent for path in written} == {tmp_path / INDEX_DIRNAME}

    reloaded = pipeline(
        "audio-text-retrieval", model=str(tmp_path)
    )  # loads the index saved next to the model
    assert (reloaded("a siren wails", top_k=3), reloaded(waveform, top_k=3)) == before


def test_index_of_another_model_is_refused(pipe, tmp_path):
    other_model, _ = save_model(tmp_path / "other", seed=1)
    pipe.index(CAPTIONS, show_progress=False)
    pipe.save_index(tmp_path / "index")
    other = pipeline("audio-text-retrieval", model=str(tmp_path / "other"))
    with pytest.raises(IndexFormatError, match="fingerprint .* Rebuild"):
        other.load_index(tmp_path / "index")


def test_mahalanobis_model_searches_in_the_heads_metric(tmp_path):
    register_pipeline()
    model, _ = save_model(tmp_path, scoring="mahalanobis")
    with torch.no_grad():
        matrix = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
        model.scoring_head.metric_matrix.copy_(matrix @ matrix.T / 16)
    model.save_pretrained(tmp_path)
    pipe = pipeline("audio-text-retrieval", model=str(tmp_path))
    waveforms = random_waveforms(6)
    pipe.index(waveforms, show_progress=False)
    hits = pipe("birds sing", top_k=6)
    expected = brute_force_text_to_audio(pipe, "birds sing", waveforms).sort(descending=True)
    assert [hit["id"] for hit in hits] == [str(i) for i in expected.indices.tolist()]
    np.testing.assert_allclose([hit["score"] for hit in hits], expected.values.numpy(), atol=1e-4)


def test_classify_matches_template_averaged_brute_force(pipe):
    waveform = random_waveforms(1, seed=3)[0]
    labels = ["dog", "siren", "car_horn"]
    result = pipe.classify(waveform, labels=labels, templates=["a {} sound", "This is a sound of {class}."])
    with torch.no_grad():
        prompts = [
            prompt
            for label in labels
            for prompt in label_prompts(label, ["a {} sound", "This is a sound of {}."])
        ]
        text = pipe.model.get_text_features(**pipe.processor(text=prompts)).view(3, 2, -1).mean(1)
        text = torch.nn.functional.normalize(text, dim=-1)
        audio = pipe.model.get_audio_features(**pipe.processor(audio=[waveform]))
        expected = pipe.model.scoring_head(text, audio)[:, 0].softmax(0)
    assert [entry["label"] for entry in result] == [
        labels[i] for i in expected.argsort(descending=True).tolist()
    ]
    np.testing.assert_allclose(
        sorted(entry["score"] for entry in result), sorted(expected.tolist()), atol=1e-5
    )
    assert abs(sum(entry["score"] for entry in result) - 1.0) < 1e-5
    assert label_prompts("car_horn", ["This is a sound of {}."]) == ["This is a sound of car horn."]
    batch = pipe.classify(random_waveforms(2), labels=labels)
    assert len(batch) == 2 and all(len(entries) == 3 for entries in batch)


def test_bad_requests_are_explained(pipe):
    with pytest.raises(ValueError, match="needs an index of audio clips"):
        pipe("a dog barks")
    with pytest.raises(ValueError, match="needs an index of captions"):
        pipe(random_waveforms(1)[0])
    with pytest.raises(ValueError, match="non-empty list"):
        pipe.index([])
    with pytest.raises(ValueError, match="must be a string containing"):
        pipe.classify(random_waveforms(1)[0], labels=["dog"], templates=["no placeholder"])
    with pytest.raises(FileNotFoundError, match="No audio_index.json"):
        pipe.load_index(pipe.model.name_or_path)


def test_index_pushed_with_a_hub_model_is_fetched_and_loaded(pipe, tmp_path):
    pipe.index(random_waveforms(3), show_progress=False)
    pipe.save_index(tmp_path / "snapshot" / INDEX_DIRNAME)
    model = pipe.model
    model.name_or_path = "team/atr-tiny"
    with mock.patch(
        "hf_atr.pipelines.retrieval_pipeline.snapshot_download", return_value=str(tmp_path / "snapshot")
    ) as download:
        from_hub = AudioTextRetrievalPipeline(model=model, processor=pipe.processor)
    assert download.call_args.args == ("team/atr-tiny",)
    assert download.call_args.kwargs == {"allow_patterns": [f"{INDEX_DIRNAME}/*"]}
    assert from_hub("a dog barks", top_k=2) == pipe("a dog barks", top_k=2)
    with mock.patch("hf_atr.pipelines.retrieval_pipeline.snapshot_download", side_effect=OSError("offline")):
        assert AudioTextRetrievalPipeline(model=model, processor=pipe.processor).audio_index is None
