"""The retrieval pipeline's fixtures: a saved tiny model, a pipeline on it, and long field recordings."""

from __future__ import annotations

import pytest
from pipeline_setups import save_model
from synthetic_audio import recording_with_event
from tiny_models import SAMPLING_RATE
from transformers import pipeline

from hf_atr.data.audio import encode_wav
from hf_atr.pipelines.retrieval_pipeline import register_pipeline


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    save_model(directory)
    return directory


@pytest.fixture
def pipe(model_dir):
    register_pipeline()
    return pipeline("audio-text-retrieval", model=str(model_dir))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """A 60-s field recording with one tone at 40.2 s, two 20-s recordings of noise, and the 1-s query."""
    directory = tmp_path_factory.mktemp("recordings")
    recording, query = recording_with_event(60, 40.2, SAMPLING_RATE)
    (directory / "field").mkdir()
    (directory / "field" / "long take 1.wav").write_bytes(
        encode_wav(recording, SAMPLING_RATE, subtype="FLOAT")
    )
    for index, seed in enumerate((3, 4)):
        noise, _ = recording_with_event(20, None, SAMPLING_RATE, seed=seed)
        (directory / f"noise{index}.wav").write_bytes(encode_wav(noise, SAMPLING_RATE, subtype="FLOAT"))
    (directory / "query.wav").write_bytes(encode_wav(query, SAMPLING_RATE, subtype="FLOAT"))
    files = [directory / "field" / "long take 1.wav", directory / "noise0.wav", directory / "noise1.wav"]
    return directory, files
