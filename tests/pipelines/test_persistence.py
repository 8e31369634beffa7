"""A pipeline's indexes on disk (hf_atr.pipelines.persistence): save and load beside the model or anywhere, checked
against the model, with skipped.tsv."""

from __future__ import annotations

import pytest
from pipeline_setups import CAPTIONS, caplog_warnings, clips_dataset, save_model
from tiny_models import random_waveforms
from transformers import pipeline

from hf_atr.audio_encoding import SkippedAudio
from hf_atr.pipelines.index_storage import IndexFormatError
from hf_atr.pipelines.persistence import (
    INDEX_DIRNAME,
    SKIPPED_FILENAME,
    default_index_dir,
    holds_index,
    load_indexes,
    read_skipped_report,
    save_indexes,
    write_skipped_report,
)
from hf_atr.pipelines.retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline


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

    with caplog_warnings() as messages:
        reloaded = pipeline(
            "audio-text-retrieval", model=str(tmp_path)
        )  # loads the index saved next to the model
    assert (
        f"Loaded the retrieval index saved with the model in {tmp_path / INDEX_DIRNAME}: 4 audio clip(s) in 4 "
        "entries, 8 caption(s)." in messages[0]
    )
    assert (reloaded("a siren wails", top_k=3), reloaded(waveform, top_k=3)) == before


def test_index_of_another_model_is_refused(pipe, tmp_path):
    other_model, _ = save_model(tmp_path / "other", seed=1)
    pipe.index(CAPTIONS, show_progress=False)
    pipe.save_index(tmp_path / "index")
    other = pipeline("audio-text-retrieval", model=str(tmp_path / "other"))
    with pytest.raises(IndexFormatError, match="fingerprint .* Rebuild"):
        other.load_index(tmp_path / "index")


def test_save_and_load_indexes_with_the_list_of_skipped_files(pipe, tmp_path):
    pipe.index(random_waveforms(3), ids=["a", "b", "c"], show_progress=False)
    pipe.index(CAPTIONS[:2], show_progress=False)
    skipped = [SkippedAudio(0, "/data/field recordings/empty.wav", "the audio file is empty (0 bytes).")]
    assert not holds_index(tmp_path / "index")
    written = save_indexes(tmp_path / "index", pipe.audio_index, pipe.text_index, skipped)
    assert sorted(path.name for path in written) == [
        "audio_index.json", "audio_index.safetensors", SKIPPED_FILENAME, "text_index.json", "text_index.safetensors"
    ]  # fmt: skip
    assert holds_index(tmp_path / "index")
    audio_index, text_index, loaded_skipped = load_indexes(tmp_path / "index", pipe.model)
    assert (audio_index.ids, text_index.captions) == (["a", "b", "c"], CAPTIONS[:2])
    assert (audio_index.embeddings == pipe.audio_index.embeddings).all()
    assert loaded_skipped == skipped
    save_indexes(tmp_path / "index", pipe.audio_index, None, skipped, report_skipped=False)
    assert (tmp_path / "index" / SKIPPED_FILENAME).is_file()  # left as it was
    save_indexes(tmp_path / "index", pipe.audio_index, None, [])
    assert not (tmp_path / "index" / SKIPPED_FILENAME).exists()  # nothing skipped: no stale list stays


def test_loading_a_directory_without_an_index_names_it(pipe, tmp_path):
    with pytest.raises(
        FileNotFoundError, match=rf"^No audio_index\.json or text_index\.json in {tmp_path}\.$"
    ):
        load_indexes(tmp_path, pipe.model)


def test_load_index_keeps_an_index_of_a_kind_the_directory_does_not_hold(pipe, tmp_path):
    pipe.index(CAPTIONS, show_progress=False)
    pipe.save_index(tmp_path / "captions")
    pipe.index(random_waveforms(2), show_progress=False)
    audio_index = pipe.audio_index
    pipe.text_index = None
    pipe.load_index(tmp_path / "captions")
    assert pipe.audio_index is audio_index and pipe.text_index.captions == CAPTIONS
    assert load_indexes(tmp_path / "captions", pipe.model)[0] is None
    (tmp_path / "empty.wav").write_bytes(b"")
    pipe.index([str(tmp_path / "empty.wav")], show_progress=False)  # skipped: an audio index of no entries
    pipe.save_index(tmp_path / "nothing decodable")
    pipe.index(random_waveforms(2), show_progress=False)
    pipe.load_index(tmp_path / "nothing decodable")
    assert len(pipe.audio_index) == 0 and [item.reason for item in pipe.skipped] == [
        "the audio file is empty (0 bytes)."
    ]


def test_save_index_needs_a_directory_and_an_index(pipe, tmp_path, monkeypatch):
    with pytest.raises(
        ValueError, match=r"^Nothing to save: build an index with `pipe\.index\(\.\.\.\)` first\.$"
    ):
        pipe.save_index(tmp_path)
    pipe.index(CAPTIONS, show_progress=False)
    pipe.save_index(tmp_path / INDEX_DIRNAME)
    monkeypatch.chdir(
        tmp_path
    )  # holds a retrieval_index, which a model built in memory must not take for its own
    pipe.model.name_or_path = ""
    in_memory = AudioTextRetrievalPipeline(model=pipe.model, processor=pipe.processor)
    assert in_memory.text_index is None
    in_memory.index(CAPTIONS, show_progress=False)
    with pytest.raises(
        ValueError, match=r"^The model was not loaded from a directory; pass save_index\(directory\)\.$"
    ):
        in_memory.save_index()


def test_default_index_dir_is_beside_a_local_model_only(pipe, model_dir):
    assert default_index_dir(pipe.model) == model_dir / INDEX_DIRNAME
    pipe.model.name_or_path = "team/atr-tiny"
    assert default_index_dir(pipe.model) is None


def test_skipped_report_round_trips_paths_and_reasons_with_tabs_and_quotes(tmp_path):
    skipped = [
        SkippedAudio(0, "/data/field recordings/._dog bark.wav", "AppleDouble"),
        SkippedAudio(
            1, '/data/"odd"\tname.wav', "the audio is unreadable or corrupt (Format not recognised)."
        ),
    ]
    write_skipped_report(tmp_path / SKIPPED_FILENAME, skipped)
    assert (tmp_path / SKIPPED_FILENAME).read_text().splitlines()[:2] == [
        "path\treason",
        "/data/field recordings/._dog bark.wav\tAppleDouble",
    ]
    assert read_skipped_report(tmp_path / SKIPPED_FILENAME) == skipped
