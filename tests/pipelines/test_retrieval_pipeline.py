"""pipeline("audio-text-retrieval"): indexing, text/audio queries vs brute force, round trip, zero-shot."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import soundfile
import torch
from datasets import Dataset
from synthetic_audio import recording_with_event, synthetic_clip
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms
from transformers import pipeline

from hf_atr.data.audio import AudioDecodeError, encode_wav
from hf_atr.encoding import encode_audio, encode_audio_windows, label_prompts
from hf_atr.pipelines.index import IndexFormatError
from hf_atr.pipelines.persistence import INDEX_DIRNAME, SKIPPED_FILENAME
from hf_atr.pipelines.retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline
from hf_atr.processing_atr import AtrProcessor
from hf_atr.windowing import Windowing

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


@contextlib.contextmanager
def caplog_warnings():
    """The warnings logged by hf_atr inside the block, as one string (the pipeline factory resets handlers)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("hf_atr")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        records[:] = ["\n".join(records)]


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
        "hf_atr.pipelines.sharing.snapshot_download", return_value=str(tmp_path / "snapshot")
    ) as download:
        from_hub = AudioTextRetrievalPipeline(model=model, processor=pipe.processor)
    assert download.call_args.args == ("team/atr-tiny",)
    assert download.call_args.kwargs == {"allow_patterns": [f"{INDEX_DIRNAME}/*"]}
    assert from_hub("a dog barks", top_k=2) == pipe("a dog barks", top_k=2)
    with mock.patch("hf_atr.pipelines.sharing.snapshot_download", side_effect=OSError("offline")):
        assert AudioTextRetrievalPipeline(model=model, processor=pipe.processor).audio_index is None


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


def test_a_long_recording_is_found_at_the_span_of_its_event(pipe, recordings, monkeypatch, tmp_path):
    directory, files = recordings
    monkeypatch.chdir(tmp_path)  # paths must not depend on where the index is searched from
    pipe.index([str(path) for path in files], root=directory, show_progress=False)
    assert pipe.audio_index.ids.count("field/long take 1.wav") > 100  # kept window by window
    hits = pipe(audio=str(directory / "query.wav"), top_k=3)
    assert [hit["id"] for hit in hits][0] == "field/long take 1.wav" and len(hits) == 3
    assert hits[0]["start"] <= 40.2 and hits[0]["end"] >= 40.7
    assert hits[0]["path"] == str(directory / "field" / "long take 1.wav")
    # A text query ranks files by their best window, as brute force over every window does.
    encoded = encode_audio_windows(
        pipe.model, pipe.processor, [{"audio": str(path)} for path in files], windowing=Windowing()
    )
    with torch.no_grad():
        text = pipe.model.get_text_features(**pipe.processor(text=["a dog barks"]))
    scores = (text @ encoded.embeddings.T)[0]
    best = {
        clip: max(range(len(scores)), key=lambda i: scores[i] if encoded.clip_indices[i] == clip else -2)
        for clip in range(3)
    }
    expected = sorted(best.items(), key=lambda item: -float(scores[item[1]]))
    hits = pipe("a dog barks", top_k=3)
    assert [hit["id"] for hit in hits] == [
        pipe.audio_index.ids[0] if clip == 0 else f"noise{clip - 1}.wav" for clip, _ in expected
    ]
    for hit, (_, window) in zip(hits, expected):
        assert (hit["start"], hit["end"]) == (float(encoded.starts[window]), float(encoded.ends[window]))
        assert hit["score"] == pytest.approx(float(scores[window]), abs=1e-5)


def test_pooled_indexing_stores_one_entry_per_file(pipe, recordings):
    directory, files = recordings
    pipe.index([str(path) for path in files], root=directory, pool=True, show_progress=False)
    assert pipe.audio_index.ids == ["field/long take 1.wav", "noise0.wav", "noise1.wav"]
    assert pipe.audio_index.spans == [(0.0, 60.0), (0.0, 20.0), (0.0, 20.0)]
    pooled = encode_audio(pipe.model, pipe.processor, [{"audio": str(files[0])}], windowing=Windowing())
    np.testing.assert_allclose(pipe.audio_index.embeddings[0], pooled[0].numpy(), atol=1e-6)
    hits = pipe(audio=str(directory / "query.wav"), top_k=1)
    assert (hits[0]["start"], hits[0]["end"]) == (0.0, 60.0)


def bad_folder(directory):
    """Two good clips and the three kinds of unreadable file a real folder holds."""
    waveforms = random_waveforms(2, seed=11)
    (directory / "a.wav").write_bytes(encode_wav(waveforms[0], SAMPLING_RATE))
    (directory / "b.wav").write_bytes(encode_wav(waveforms[1], SAMPLING_RATE))
    (directory / "._a.wav").write_bytes((directory / "a.wav").read_bytes()[:200])
    (directory / "empty.wav").write_bytes(b"")
    (directory / "readme.wav").write_text("renamed text")
    return sorted(directory.iterdir())


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


def test_a_query_that_looks_like_a_missing_audio_file_is_an_error(pipe):
    pipe.index(CAPTIONS, show_progress=False)
    with pytest.raises(
        FileNotFoundError, match=r"The query 'dog bark 2\.WAV' looks like an audio file path, but"
    ):
        pipe("dog bark 2.WAV")
    with pytest.raises(ValueError, match=r"Give a query: pipe\('a dog barks'\)"):
        pipe()
    with pytest.raises(ValueError, match="Give either a query or `audio=`"):
        pipe("a dog", audio=random_waveforms(1)[0])


def test_query_by_example_ranks_clips_like_brute_force(pipe):
    waveforms = random_waveforms(5, seed=21)
    pipe.index(waveforms, show_progress=False)
    query = random_waveforms(1, seed=22)[0]
    hits = pipe(audio=query, top_k=5)
    with torch.no_grad():
        audio = pipe.model.get_audio_features(**pipe.processor(audio=waveforms))
        example = pipe.model.get_audio_features(**pipe.processor(audio=[query]))
    expected = (example @ audio.T)[0].sort(descending=True)
    assert [hit["id"] for hit in hits] == [str(i) for i in expected.indices.tolist()]
    np.testing.assert_allclose([hit["score"] for hit in hits], expected.values.numpy(), atol=1e-5)
    assert len(pipe(audio=[query, waveforms[0]], top_k=2)) == 2


def test_classify_pools_the_windows_of_a_long_clip(pipe):
    clip, _ = recording_with_event(4, 1.0, SAMPLING_RATE)
    labels = ["beep", "dog"]
    result = pipe.classify(clip, labels=labels, templates=["a {} sound"])
    with torch.no_grad():
        text = pipe.model.get_text_features(**pipe.processor(text=["a beep sound", "a dog sound"]))
    audio = encode_audio(pipe.model, pipe.processor, [{"audio": clip}], windowing=Windowing())
    expected = pipe.model.scoring_head.audio_logits(audio, text).softmax(-1)[0]
    assert {entry["label"]: entry["score"] for entry in result} == pytest.approx(
        dict(zip(labels, expected.tolist()))
    )


@pytest.fixture(scope="module")
def stereo_and_mono_files(tmp_path_factory):
    """A 2-s stereo PCM-16 WAV at 22.05 kHz written with soundfile (different sounds left and right), and a
    2-s mono one at the processor's rate."""
    directory = tmp_path_factory.mktemp("recordings")
    rate = 22050
    stereo = directory / "dog bark.wav"
    channels = [synthetic_clip(2 * rate, rate, seed=1), 0.5 * synthetic_clip(2 * rate, rate, seed=2)]
    soundfile.write(stereo, np.stack(channels, axis=1), rate, subtype="PCM_16")
    mono = directory / "rain.wav"
    soundfile.write(
        mono, synthetic_clip(2 * SAMPLING_RATE, SAMPLING_RATE, seed=3), SAMPLING_RATE, subtype="PCM_16"
    )
    return stereo, mono


def _scores(result):
    return {entry["label"]: entry["score"] for entry in result}


def _assert_same_hits(hits, expected):
    assert [hit["id"] for hit in hits] == [hit["id"] for hit in expected]
    np.testing.assert_allclose([hit["score"] for hit in hits], [hit["score"] for hit in expected], atol=1e-6)


def test_a_stereo_array_scores_as_its_file_wherever_audio_is_accepted(pipe, stereo_and_mono_files):
    path, other = stereo_and_mono_files
    frames, rate = soundfile.read(path)  # as users read a file: (samples, channels) float64
    assert frames.shape == (44100, 2) and rate == 22050
    given_as = [
        (frames, rate),
        (frames.T, rate),
        ({"raw": frames, "sampling_rate": rate}, None),
        ({"array": frames.T, "sampling_rate": rate}, None),
    ]
    labels = ["dog", "siren", "beep"]
    expected = _scores(pipe.classify(str(path), labels=labels))
    for audio, sampling_rate in given_as:
        result = pipe.classify(audio, labels=labels, sampling_rate=sampling_rate)
        assert isinstance(result[0], dict)  # one clip, one result (not one per sample or per channel)
        assert _scores(result).keys() == expected.keys()
        np.testing.assert_allclose(list(_scores(result).values()), list(expected.values()), atol=1e-6)
    pipe.index(CAPTIONS, show_progress=False)
    expected_captions = pipe(str(path), top_k=5)
    for audio, sampling_rate in given_as:
        _assert_same_hits(pipe(audio, sampling_rate=sampling_rate, top_k=5), expected_captions)
    pipe.index([str(path), str(other)], ids=["dog", "rain"], show_progress=False)
    file_entries = pipe.audio_index.embeddings.copy()
    expected_clips = pipe(audio=str(path), top_k=2)
    for audio, sampling_rate in given_as:
        _assert_same_hits(pipe(audio=audio, sampling_rate=sampling_rate, top_k=2), expected_clips)
        pipe.index([audio, str(other)], ids=["dog", "rain"], sampling_rate=sampling_rate, show_progress=False)
        np.testing.assert_allclose(pipe.audio_index.embeddings, file_entries, atol=1e-6)


def test_an_array_without_its_rate_is_taken_at_the_processors_rate_said_once(pipe, stereo_and_mono_files):
    _, path = stereo_and_mono_files
    mono, rate = soundfile.read(path)
    assert mono.ndim == 1 and rate == pipe.processor.sampling_rate
    labels = ["dog", "siren"]
    expected = _scores(pipe.classify(str(path), labels=labels))
    with caplog_warnings() as logged:
        without_rate = _scores(pipe.classify(mono, labels=labels))
        with_rate = _scores(pipe.classify(mono, labels=labels, sampling_rate=rate))
        assert len(pipe.classify([mono, mono], labels=labels)) == 2
        pipe.index([mono], show_progress=False)
        pipe(audio=mono)
    for scores in (without_rate, with_rate):
        np.testing.assert_allclose(
            [scores[label] for label in labels], [expected[label] for label in labels], atol=1e-6
        )
    message = (
        "An audio array was given without its sampling rate: it is taken at 16000 Hz, the processor's rate (said "
        "once per pipeline). If it was recorded at another rate, give the rate: {'raw': array, 'sampling_rate': "
        "rate}, or sampling_rate=rate."
    )
    assert logged[0].count(message) == 1 and logged[0].count("sampling rate") == 1


def test_a_stacked_batch_is_refused_and_a_list_is_a_batch(pipe):
    stacked = np.stack(random_waveforms(8))  # (8, 16000): eight clips stacked into one array
    refusal = (
        r"an audio array of shape \(8, 16000\) is not one clip: its shorter axis \(8\) is read as channels, and "
        r"a clip has at most 7\. Pass a batch of clips as a list \(e\.g\. list\(array\)\); give a recording "
        r"with more channels by its file path, or mix it down to 1-D first\."
    )
    with pytest.raises(AudioDecodeError, match="the audio: " + refusal):
        pipe.classify(stacked, labels=["dog", "siren"])
    pipe.index(CAPTIONS, show_progress=False)
    with pytest.raises(AudioDecodeError, match="the audio query: " + refusal):
        pipe(stacked)
    with pytest.raises(
        ValueError, match=r"index\(\) takes a list of clips, got one ndarray: .* Pass \[clip\]"
    ):
        pipe.index(stacked)
    with pytest.raises(AudioDecodeError, match="item 2: " + refusal.replace("8, 16000", "16000, 8")):
        pipe.index([stacked[0], stacked[1], stacked.T], show_progress=False)
    with pytest.raises(ValueError, match=r"A query is one clip, got a tuple of 2: pass a list of queries"):
        pipe((stacked[0], stacked[1]))
    batch = pipe.classify(list(stacked), labels=["dog", "siren"])
    assert len(batch) == 8 and all(len(result) == 2 for result in batch)
    assert len(pipe(list(stacked), top_k=1)) == 8
