"""pipeline("audio-text-retrieval"): text/audio queries and query by example vs brute force, zero-shot
classification, and the one audio-input contract of every method (indexing: test_indexing.py; saving and loading:
test_persistence.py; the Hub: test_sharing.py)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch
from pipeline_setups import CAPTIONS, caplog_warnings, save_model
from ranking_margin import clear_ranking
from synthetic_audio import recording_with_event, synthetic_clip
from tiny_models import SAMPLING_RATE, random_waveforms
from transformers import pipeline

from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio import encode_wav
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.encoding import label_prompts
from hf_atr.pipelines.retrieval_pipeline import (
    AudioTextRetrievalPipeline,
    MissingIndexError,
    register_pipeline,
)
from hf_atr.processing_atr import AtrProcessor
from hf_atr.windowing import Windowing

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


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
    scores = brute_force_text_to_audio(pipe, "a dog barks", waveforms)
    expected = clear_ranking(scores, k=4)
    assert [hit["id"] for hit in hits] == [f"clip{i}" for i in expected]
    np.testing.assert_allclose([hit["score"] for hit in hits], scores[expected].numpy(), atol=1e-5)


def test_audio_query_ranks_captions(pipe):
    pipe.index(CAPTIONS, show_progress=False)
    waveform = random_waveforms(1, seed=5)[0]
    hits = pipe(waveform, top_k=len(CAPTIONS))
    with torch.no_grad():
        audio = pipe.model.get_audio_features(**pipe.processor(audio=[waveform]))
        text = pipe.model.get_text_features(**pipe.processor(text=CAPTIONS))
        expected = clear_ranking(pipe.model.scoring_head.similarity(text, audio)[:, 0]).tolist()
    assert [hit["caption"] for hit in hits] == [CAPTIONS[i] for i in expected]
    assert [hit["id"] for hit in hits] == [str(i) for i in expected]


def test_audio_file_path_is_an_audio_query(pipe, tmp_path):
    waveform = random_waveforms(1, seed=5)[0]
    path = tmp_path / "clip.wav"
    path.write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype="FLOAT"))
    pipe.index(CAPTIONS, show_progress=False)
    from_path, from_array = pipe(str(path), top_k=3), pipe(waveform, top_k=3)
    assert [hit["id"] for hit in from_path] == [hit["id"] for hit in from_array]


def test_an_index_whose_every_file_was_skipped_is_refused_like_no_index(pipe, tmp_path):
    (tmp_path / "notes.wav").write_text("not audio")
    pipe.index([str(tmp_path / "notes.wav")], show_progress=False)
    assert len(pipe.audio_index) == 0 and len(pipe.skipped) == 1
    with pytest.raises(
        MissingIndexError, match="^A text query searches audio clips, and this pipeline holds none"
    ):
        pipe("a dog barks")


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
    scores = brute_force_text_to_audio(pipe, "birds sing", waveforms)
    expected = clear_ranking(scores)
    assert [hit["id"] for hit in hits] == [str(i) for i in expected]
    np.testing.assert_allclose([hit["score"] for hit in hits], scores[expected].numpy(), atol=1e-4)


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
    assert [entry["label"] for entry in result] == [labels[i] for i in clear_ranking(expected)]
    np.testing.assert_allclose(
        sorted(entry["score"] for entry in result), sorted(expected.tolist()), atol=1e-5
    )
    assert abs(sum(entry["score"] for entry in result) - 1.0) < 1e-5
    assert label_prompts("car_horn", ["This is a sound of {}."]) == ["This is a sound of car horn."]
    batch = pipe.classify(random_waveforms(2), labels=labels)
    assert len(batch) == 2 and all(len(entries) == 3 for entries in batch)


def test_bad_requests_are_explained(pipe):
    with pytest.raises(MissingIndexError) as error:
        pipe("a dog barks")
    assert (error.value.query_modality, error.value.missing) == ("text", "audio_index")
    assert str(error.value) == (
        "A text query searches audio clips, and this pipeline holds none: call `pipe.index(...)` with audio clips "
        "(or a Dataset), or `pipe.load_index(dir)`."
    )
    with pytest.raises(
        MissingIndexError, match="^An audio query searches captions, and this pipeline holds none"
    ):
        pipe(random_waveforms(1)[0])
    with pytest.raises(ValueError, match="non-empty list"):
        pipe.index([])
    with pytest.raises(ValueError, match="must be a string containing"):
        pipe.classify(random_waveforms(1)[0], labels=["dog"], templates=["no placeholder"])
    with pytest.raises(FileNotFoundError, match="No audio_index.json"):
        pipe.load_index(pipe.model.name_or_path)


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
    similarity = (example @ audio.T)[0]
    expected = similarity.sort(descending=True)
    # The random-init model scores these clips 0.9990 to 0.9994, two of them 8e-6 apart: clips whose scores
    # differ by float rounding may come in either order, so each hit must have the brute-force score of its rank.
    assert sorted(hit["id"] for hit in hits) == [str(i) for i in range(5)]
    np.testing.assert_allclose([hit["score"] for hit in hits], expected.values.numpy(), atol=1e-5)
    np.testing.assert_allclose(
        [float(similarity[int(hit["id"])]) for hit in hits], expected.values.numpy(), rtol=0, atol=1e-6
    )
    assert len(pipe(audio=[query, waveforms[0]], top_k=2)) == 2


def test_classify_pools_the_windows_of_a_long_clip(pipe):
    clip, _ = recording_with_event(4, 1.0, SAMPLING_RATE)
    labels = ["beep", "dog"]
    result = pipe.classify(clip, labels=labels, templates=["a {} sound"])
    with torch.no_grad():
        text = pipe.model.get_text_features(**pipe.processor(text=["a beep sound", "a dog sound"]))
    audio = encode_audio(pipe.model, pipe.processor, [{"audio": clip}], windowing=Windowing())
    expected = pipe.model.scoring_head.audio_logits(audio, text).softmax(-1)[0]
    # Two separate encodings of the windows: 2e-7 apart here; the first window alone or max pooling: 2.5e-3.
    assert {entry["label"]: entry["score"] for entry in result} == pytest.approx(
        dict(zip(labels, expected.tolist())), abs=1e-5
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
    """``hits`` are ``expected`` (every indexed item, best first), whose order is clear of float rounding."""
    clear_ranking([hit["score"] for hit in expected])
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


def test_read_audio_reads_every_input_as_the_pipeline_does(pipe, stereo_and_mono_files):
    stereo, mono = stereo_and_mono_files
    frames, rate = soundfile.read(stereo)
    one = pipe.read_audio(frames, rate)
    assert one.single and len(one.clips) == 1 and one.names == ["the audio"]
    assert one.clips[0]["sampling_rate"] == rate and one.clips[0]["array"].shape == (44100,)
    batch = pipe.read_audio([str(mono), {"raw": frames, "sampling_rate": rate}], name="the corpus")
    assert not batch.single and batch.names == [str(mono), "item 1"] and batch.clips[0] == str(mono)
    with pytest.raises(
        AudioDecodeError, match=r"^the query: an audio array must be 1-D .* got shape \(3, 2, 2\)"
    ):
        pipe.read_audio(np.zeros((3, 2, 2), dtype=np.float32), name="the query")
    with caplog_warnings() as logged:
        bare = [pipe.read_audio(frames[:, 0]) for _ in range(2)]
    assert all(given.rate_assumed == 1 for given in bare)
    assert bare[0].clips[0]["sampling_rate"] == pipe.processor.sampling_rate
    assert logged[0].count("An audio array was given without its sampling rate") == 1
