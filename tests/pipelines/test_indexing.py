"""Indexing, the one owner behind ``pipe.index`` and ``hf-atr index`` (hf_atr.pipelines.indexing): windows and
pooled entries, skipped and strict, ids and roots, the steps cut once and saved every N files, and the run of
``hf-atr index`` that resumes from its --out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from pipeline_setups import bad_folder, clips_dataset, save_model, write_clips
from ranking_margin import clear_argmax, clear_best_among, clear_ranking
from tiny_models import SAMPLING_RATE, random_waveforms
from transformers import pipeline

from hf_atr.audio_encoding import encode_audio, encode_audio_windows
from hf_atr.data.audio import encode_wav
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.pipelines.index_storage import IndexFormatError, model_fingerprint
from hf_atr.pipelines.indexing import (
    IndexingOptions,
    IndexingRun,
    filling,
    index_vectors,
    indexed_files,
    new_index,
    relative_id,
)
from hf_atr.pipelines.persistence import SKIPPED_FILENAME
from hf_atr.windowing import Windowing

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


@pytest.mark.slow
def test_a_long_recording_is_found_at_the_span_of_its_event(pipe, recordings, monkeypatch, tmp_path):
    directory, files = recordings
    monkeypatch.chdir(tmp_path)  # paths must not depend on where the index is searched from
    pipe.index([str(path) for path in files], root=directory, show_progress=False)
    assert pipe.audio_index.ids.count("field/long take 1.wav") > 100  # kept window by window
    encoded = encode_audio_windows(
        pipe.model, pipe.processor, [{"audio": str(path)} for path in files], windowing=Windowing()
    )
    # The query holds the tone: a window of the long take that holds it beats every other window by a wide margin.
    query = encode_audio(pipe.model, pipe.processor, [{"audio": str(directory / "query.wav")}])
    holds_tone = (encoded.clip_indices == 0) & (encoded.starts <= 40.2) & (encoded.ends >= 40.7)
    clear_best_among((query @ encoded.embeddings.T)[0], holds_tone)
    hits = pipe(audio=str(directory / "query.wav"), top_k=3)
    assert [hit["id"] for hit in hits][0] == "field/long take 1.wav" and len(hits) == 3
    assert hits[0]["start"] <= 40.2 and hits[0]["end"] >= 40.7
    assert hits[0]["path"] == str(directory / "field" / "long take 1.wav")
    # A text query ranks files by their best window, as brute force over every window does.
    with torch.no_grad():
        text = pipe.model.get_text_features(**pipe.processor(text=["a dog barks"]))
    scores = (text @ encoded.embeddings.T)[0]
    windows = [torch.nonzero(encoded.clip_indices == clip)[:, 0] for clip in range(3)]
    best = [int(clip_windows[clear_argmax(scores[clip_windows])]) for clip_windows in windows]
    expected = [(clip, best[clip]) for clip in clear_ranking(scores[best])]
    hits = pipe("a dog barks", top_k=3)
    assert [hit["id"] for hit in hits] == [
        pipe.audio_index.ids[0] if clip == 0 else f"noise{clip - 1}.wav" for clip, _ in expected
    ]
    for hit, (_, window) in zip(hits, expected):
        assert (hit["start"], hit["end"]) == (float(encoded.starts[window]), float(encoded.ends[window]))
        assert hit["score"] == pytest.approx(float(scores[window]), abs=1e-5)


@pytest.mark.slow
def test_pooled_indexing_stores_one_entry_per_file(pipe, recordings):
    directory, files = recordings
    pipe.index([str(path) for path in files], root=directory, pool=True, show_progress=False)
    assert pipe.audio_index.ids == ["field/long take 1.wav", "noise0.wav", "noise1.wav"]
    assert pipe.audio_index.spans == [(0.0, 60.0), (0.0, 20.0), (0.0, 20.0)]
    pooled = encode_audio(pipe.model, pipe.processor, [{"audio": str(files[0])}], windowing=Windowing())
    np.testing.assert_allclose(pipe.audio_index.embeddings[0], pooled[0].numpy(), atol=1e-6)
    hits = pipe(audio=str(directory / "query.wav"), top_k=1)
    assert (hits[0]["start"], hits[0]["end"]) == (0.0, 60.0)


def test_frame_entries_are_refused_with_pooling_and_for_a_model_without_frames(model_dir, recordings):
    directory, files = recordings
    framed = pipeline("audio-text-retrieval", model=str(model_dir), windowing=Windowing(frame_seconds=0.2))
    with pytest.raises(ValueError) as error:
        framed.index([str(files[1])], root=directory, pool=True, show_progress=False)
    assert str(error.value) == (
        "pool=True makes one entry per clip, spanning all of it, but the pipeline's windowing asks for entries of "
        "frame_seconds=0.2 each: leave out pool for frame entries, or index with a pipeline without frame_seconds "
        "for pooled clips."
    )
    assert framed.audio_index is None  # refused before anything was encoded
    framed.index(["a dog barks"], pool=True, show_progress=False)  # captions have no frames: indexed
    assert framed.text_index.ids == ["0"]
    with pytest.raises(ValueError) as error:  # without pool: this tiny model has no frames
        framed.index([str(files[1])], root=directory, show_progress=False)
    assert str(error.value) == (
        "frame_seconds needs a model with frame-level audio embeddings (config.audio_frame_rate), e.g. one "
        "converted from a PeAudioFrameLevelModel checkpoint; this model embeds whole windows only."
    )
    assert framed.audio_index is None


def test_unreadable_files_are_skipped_reported_and_listed_in_skipped_tsv(pipe, tmp_path, caplog):
    (tmp_path / "audio").mkdir()
    files = bad_folder(tmp_path / "audio")
    with caplog.at_level(logging.WARNING):
        pipe.index([str(path) for path in files], root=tmp_path / "audio", show_progress=False)
    assert sorted(set(pipe.audio_index.ids)) == ["a.wav", "b.wav"]
    skipped = {Path(item.name).name: item.reason for item in pipe.skipped}
    assert skipped == {
        "._a.wav": "AppleDouble",
        "empty.wav": "the audio file is empty (0 bytes).",
        "readme.wav": "the audio is unreadable or corrupt (Format not recognised).",
    }
    assert "Skipped 3 of 5 audio item(s) that cannot be decoded:" in caplog.text
    written = pipe.save_index(tmp_path / "index")
    report = tmp_path / "index" / SKIPPED_FILENAME
    assert report in written
    lines = report.read_text().splitlines()
    assert (
        lines[0] == "path\treason"
        and f"{tmp_path / 'audio' / 'empty.wav'}\tthe audio file is empty (0 bytes)." in lines
    )
    pipe.skipped = []
    pipe.load_index(tmp_path / "index")
    assert {Path(item.name).name for item in pipe.skipped} == set(skipped)


def test_strict_stops_at_the_first_unreadable_file_and_keeps_what_was_indexed(pipe, tmp_path):
    good = [str(tmp_path / f"clip{i}.wav") for i in range(9)]
    for path, waveform in zip(good, random_waveforms(9, seed=2)):
        Path(path).write_bytes(encode_wav(waveform, SAMPLING_RATE))
    (tmp_path / "zz_empty.wav").write_bytes(b"")
    with pytest.raises(AudioDecodeError, match=r"zz_empty\.wav: the audio file is empty \(0 bytes\)\."):
        pipe.index([*good, str(tmp_path / "zz_empty.wav")], batch_size=1, strict=True, show_progress=False)
    assert len(set(pipe.audio_index.ids)) == 8  # the first step (8 clips of batch 1) was kept
    pipe.index([str(tmp_path / "._x.wav")], strict=True, append=True, show_progress=False)  # never audio
    assert pipe.skipped[-1].reason == "AppleDouble"


def test_duplicate_ids_are_rejected_naming_both_items(pipe, tmp_path):
    waveforms = random_waveforms(2)
    with pytest.raises(
        ValueError, match=r"Duplicate id 'x': item 0 and item 1\. Each item of an index needs"
    ):
        pipe.index(waveforms, ids=["x", "x"], show_progress=False)
    pipe.index(waveforms, ids=["x", "y"], show_progress=False)
    with pytest.raises(ValueError, match=r"Duplicate id 'y': item 1 and y, which is already in the index"):
        pipe.index(waveforms, ids=["z", "y"], append=True, show_progress=False)
    pipe.index(waveforms[:1], ids=["z"], append=True, show_progress=False)
    assert pipe.audio_index.ids == ["x", "y", "z"]
    dataset = clips_dataset(3)
    duplicated = dataset.map(lambda row: {"audio_id": "same"})
    with pytest.raises(ValueError, match=r"Duplicate id 'same': row 0 \(same\) and row 1 \(same\)"):
        pipe.index(duplicated, show_progress=False)


def test_files_indexed_under_ids_of_ones_own_carry_no_made_up_path(pipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = []
    for name, waveform in zip(["dog bark.wav", "dawn chorus.wav"], random_waveforms(2)):
        (tmp_path / name).write_bytes(encode_wav(waveform, SAMPLING_RATE))
        files.append(str(tmp_path / name))
    pipe.index(files[:1], ids=["dog"], show_progress=False)
    assert pipe.audio_index.root is None and "path" not in pipe("a dog barks", top_k=1)[0]
    with pytest.raises(
        ValueError,
        match=rf"Duplicate id 'dog': {files[1]} and dog, which is already in the index\. Give it another id",
    ):
        pipe.index(files[1:], ids=["dog"], append=True, show_progress=False)
    pipe.index(files[:1], ids=["dog"], root=tmp_path, show_progress=False)
    assert pipe("a dog barks", top_k=1)[0]["path"] == str(
        tmp_path / "dog"
    )  # root given: ids are relative paths
    pipe.index(["dog bark.wav"], show_progress=False)
    assert pipe("a dog barks", top_k=1)[0]["path"] == files[0]


def test_indexing_options_refuse_bad_values(tmp_path):
    with pytest.raises(ValueError, match=r"^batch_size must be at least 1, got 0\.$"):
        IndexingOptions(0)
    with pytest.raises(ValueError, match=r"^save_every must be at least 1, got 0\.$"):
        IndexingOptions(save_every=0, save_to=tmp_path)
    with pytest.raises(
        ValueError, match=r"^save_every and save_to go together: how often to save, and where\.$"
    ):
        IndexingOptions(save_every=3)


def record_steps(monkeypatch, pipe):
    """The clips of each encoding call (one per step) and the files the index held at each save."""
    steps, saves = [], []
    encode, save = filling.encode_audio_windows, pipe.save_index

    def recorded_encode(model, processor, part, **kwargs):
        steps.append(len(part))
        return encode(model, processor, part, **kwargs)

    def recorded_save(directory, **kwargs):
        saves.append(indexed_files(pipe))
        return save(directory, **kwargs)

    monkeypatch.setattr(filling, "encode_audio_windows", recorded_encode)
    monkeypatch.setattr(pipe, "save_index", recorded_save)
    return steps, saves


def test_steps_are_cut_once_and_saved_every_n_files(pipe, tmp_path, monkeypatch):
    files = write_clips(tmp_path / "audio", 9)
    steps, saves = record_steps(monkeypatch, pipe)
    pipe.index(files, batch_size=1, show_progress=False)
    assert steps == [8, 1] and saves == []  # batch_size × CLIPS_PER_STEP clips a step
    steps.clear()
    run = IndexingRun(pipe, IndexingOptions(1, show_progress=False, save_every=4, save_to=tmp_path / "index"))
    run.add_files([Path(path) for path in files], tmp_path / "audio")
    assert steps == [4, 4, 1] and saves == [
        4,
        8,
    ]  # steps no longer than --save-every, saved after each full one
    saved = json.loads((tmp_path / "index" / "audio_index.json").read_text())["ids"]
    assert saved == [f"clip{i}.wav" for i in range(8)]


def test_a_strict_stop_keeps_the_skipped_list_of_the_steps_done(pipe, tmp_path):
    (tmp_path / "audio").mkdir()
    files = bad_folder(tmp_path / "audio")  # ._a.wav a.wav b.wav empty.wav readme.wav
    with pytest.raises(AudioDecodeError, match=r"empty\.wav: the audio file is empty"):
        pipe.index([str(path) for path in files], strict=True, show_progress=False)
    assert [(Path(item.name).name, item.reason) for item in pipe.skipped] == [("._a.wav", "AppleDouble")]
    options = IndexingOptions(show_progress=False, strict=True, save_every=1, save_to=tmp_path / "index")
    with pytest.raises(AudioDecodeError, match=r"empty\.wav"):
        IndexingRun(pipe, options).add_files(files, tmp_path / "audio")
    assert sorted(set(pipe.audio_index.ids)) == ["a.wav", "b.wav"]
    lines = (tmp_path / "index" / SKIPPED_FILENAME).read_text().splitlines()
    assert lines == ["path\treason", f"{tmp_path / 'audio' / '._a.wav'}\tAppleDouble"]


def test_a_run_starts_from_its_out_directory_never_from_the_models_index(tmp_path):
    save_model(tmp_path / "model")
    first, second = write_clips(tmp_path / "first", 2), write_clips(tmp_path / "second", 3, seed=4)
    pipe = pipeline("audio-text-retrieval", model=str(tmp_path / "model"))
    pipe.index(first, root=tmp_path / "first", show_progress=False)
    pipe.save_index()  # model/retrieval_index: the next pipeline loads it
    pipe = pipeline("audio-text-retrieval", model=str(tmp_path / "model"))
    assert indexed_files(pipe) == 2
    out = tmp_path / "index"
    run = IndexingRun(pipe, IndexingOptions(show_progress=False, save_every=1000, save_to=out))
    assert pipe.audio_index is None and run.files_before == 0
    run.add_files([Path(path) for path in second[:2]], tmp_path / "second")
    assert pipe.audio_index.ids == ["clip0.wav", "clip1.wav"] and pipe.audio_index.root == str(
        tmp_path / "second"
    )
    pipe.save_index(out)
    resumed = IndexingRun(
        pipe, IndexingOptions(show_progress=False, append=True, save_every=1000, save_to=out)
    )
    resumed.add_files([Path(path) for path in second], tmp_path / "second")
    assert (resumed.files_before, resumed.already, resumed.attempted) == (2, 2, {second[2]})
    assert pipe.audio_index.ids == ["clip0.wav", "clip1.wav", "clip2.wav"]
    other = tmp_path / "other"
    save_model(other, seed=1)
    other_pipe = pipeline("audio-text-retrieval", model=str(other))
    with pytest.raises(IndexFormatError, match="fingerprint .* Rebuild"):
        IndexingRun(other_pipe, IndexingOptions(append=True, save_every=1, save_to=out))


def test_a_run_leaves_out_the_rows_and_captions_already_indexed(pipe, tmp_path):
    out = tmp_path / "index"
    run = IndexingRun(pipe, IndexingOptions(show_progress=False, save_every=1000, save_to=out))
    run.add_dataset(clips_dataset(2))
    run.add_captions(["x", "y"], ["a dog barks", "rain"])
    assert (pipe.audio_index.ids, len(pipe.text_index), run.already) == (["clip0", "clip1"], 6, 0)
    pipe.save_index(out)
    resumed = IndexingRun(
        pipe, IndexingOptions(show_progress=False, append=True, save_every=1000, save_to=out)
    )
    resumed.add_dataset(clips_dataset(3))
    resumed.add_captions(["y", "z"], ["rain", "a siren"])
    assert pipe.audio_index.ids == ["clip0", "clip1", "clip2"] and resumed.already == 2
    assert pipe.text_index.ids == [
        "clip0#0",
        "clip0#1",
        "clip1#0",
        "clip1#1",
        "x",
        "y",
        "clip2#0",
        "clip2#1",
        "z",
    ]
    assert (resumed.files_before, resumed.captions_before, resumed.audio_given) == (2, 6, True)


def test_relative_id_is_the_posix_path_under_root_else_the_absolute_path(tmp_path):
    (tmp_path / "field" / "birds").mkdir(parents=True)
    assert (
        relative_id(tmp_path / "field" / "birds" / "dawn chorus.flac", tmp_path / "field")
        == "birds/dawn chorus.flac"
    )
    assert relative_id(tmp_path / "take.wav", tmp_path / "field") == str(tmp_path / "take.wav")


def test_new_indexes_and_their_vectors_follow_the_models_scoring(tmp_path):
    model, _ = save_model(tmp_path, scoring="mahalanobis")
    with torch.no_grad():
        matrix = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
        model.scoring_head.metric_matrix.copy_(matrix @ matrix.T / 16)
    model.save_pretrained(tmp_path)
    pipe = pipeline(
        "audio-text-retrieval", model=str(tmp_path), index_kind="hnsw", index_options={"ef_search": 9}
    )
    index = new_index(pipe, root="/data/field")
    assert (index.dim, index.metric, index.kind, index.ef_search) == (16, "l2", "hnsw", 9)
    assert (index.fingerprint, index.root, len(index)) == (model_fingerprint(pipe.model), "/data/field", 0)
    text, audio = torch.randn(3, 16, dtype=torch.float64), torch.randn(5, 16, dtype=torch.float64)
    mapped_text, mapped_audio = index_vectors(pipe.model, text), index_vectors(pipe.model, audio)
    assert mapped_text.dtype == torch.float32 and mapped_text.device.type == "cpu"
    # L2 distances between the mapped vectors are the head's Mahalanobis distances (m-LTM Eq. 9).
    expected = pipe.model.scoring_head.similarity(text.float(), audio.float())
    torch.testing.assert_close(-torch.cdist(mapped_text, mapped_audio), expected, atol=1e-4, rtol=1e-4)
    cosine = save_model(tmp_path / "cosine")[0]
    assert torch.equal(index_vectors(cosine, audio), audio.float())
