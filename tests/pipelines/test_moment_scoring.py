"""``pipe.moments``: a long recording scored window by window into a similarity curve, or from the index's stored
windows, then moments; a tone planted in a 60-s recording found by a model whose text tower is planted to say
"the tone"; one ranked list across the indexed files; the messages."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch
from pe_audio_planting import plant_tone_caption
from pipeline_setups import save_model
from ranking_margin import clear_best_among
from synthetic_audio import recording_with_event
from tiny_models import PE_AUDIO_SAMPLING_RATE, SAMPLING_RATE, save_converted_pe_audio
from transformers import pipeline

from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio import encode_wav
from hf_atr.encoding import encode_text
from hf_atr.moments import MomentProposalConfig, SimilarityCurve, propose_moments
from hf_atr.pipelines import moment_scoring
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing import index_vectors
from hf_atr.pipelines.moment_scoring import (
    entry_scores,
    file_curves,
    frame_windowing,
    recording_curve,
)
from hf_atr.pipelines.retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline
from hf_atr.windowing import Windowing, moment_windowing, window_bounds

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

EVENT = (40.2, 40.7)
"""The tone of the pipelines' field recording (conftest ``recordings``)."""
FIELD = "field/long take 1.wav"


@pytest.fixture(scope="module")
def planted_pipe(tmp_path_factory, recordings):
    """A tiny model with CLAP's two-layer text projection whose last layer is planted: its weight is zero and its
    bias is the audio embedding of the query clip (the tone in noise), so that every caption embeds as the tone
    sounds. Nothing else is trained."""
    directory, _ = recordings
    model_dir = tmp_path_factory.mktemp("planted")
    model, processor = save_model(model_dir, projection="mlp")
    tone = encode_audio(model, processor, [{"audio": str(directory / "query.wav")}])[0]
    with torch.no_grad():
        model.text_projection.linear2.weight.zero_()
        model.text_projection.linear2.bias.copy_(tone)
    model.save_pretrained(model_dir)
    register_pipeline()
    return pipeline("audio-text-retrieval", model=str(model_dir))


@pytest.mark.slow
def test_a_planted_tone_is_found_closer_than_the_baselines_window_holding_it(planted_pipe, recordings):
    directory, files = recordings
    moments = planted_pipe.moments("a beep", str(files[0]), hop_seconds=0.25)
    assert set(moments[0]) == {"start", "end", "score"}
    assert [m["score"] for m in moments] == sorted((m["score"] for m in moments), reverse=True)
    baseline = planted_pipe.moments(
        "a beep", str(files[0]), hop_seconds=0.25, proposal=MomentProposalConfig(proposer="sliding_window")
    )
    baseline_holds = [m["start"] <= EVENT[0] + 0.1 and m["end"] >= EVENT[1] - 0.1 for m in baseline]
    assert clear_best_among([m["score"] for m in baseline], baseline_holds) == 0

    def iou(moment):
        inside = min(moment["end"], EVENT[1]) - max(moment["start"], EVENT[0])
        return inside / (max(moment["end"], EVENT[1]) - min(moment["start"], EVENT[0]))

    # the 0.5-s tone is half a window long: the best moment holds it and overlaps it more than the window does
    holds = [m["start"] <= EVENT[0] and m["end"] >= EVENT[1] - 0.25 for m in moments]
    assert clear_best_among([m["score"] for m in moments], holds) == 0
    assert iou(moments[0]) > iou(baseline[0])
    assert baseline[0]["end"] - baseline[0]["start"] == pytest.approx(
        16240 / SAMPLING_RATE
    )  # one whole window
    assert len(baseline) == 10


def test_the_curve_scores_each_window_as_the_model_scores_that_stretch_alone(pipe, recordings):
    directory, files = recordings
    windowing = moment_windowing(pipe.windowing, pipe.processor.feature_extractor, 0.5)
    text = encode_text(pipe.model, pipe.processor, ["a dog barks"])
    curve = recording_curve(pipe.model, pipe.processor, str(files[1]), text, windowing)
    window, hop = windowing.samples(pipe.processor.feature_extractor)
    assert hop == SAMPLING_RATE // 2
    audio, _ = soundfile.read(files[1], dtype="float32")
    bounds = window_bounds(len(audio), window, hop)
    np.testing.assert_array_equal(curve.starts, [start / SAMPLING_RATE for start, _ in bounds])
    np.testing.assert_array_equal(curve.ends, [stop / SAMPLING_RATE for _, stop in bounds])
    for step in (0, 17, len(bounds) - 1):
        with torch.no_grad():
            reference = pipe.model.get_audio_features(**pipe.processor(audio=[audio[slice(*bounds[step])]]))
        expected = float(pipe.model.scoring_head.similarity(text, reference)[0, 0])
        assert curve.scores[step] == pytest.approx(expected, abs=1e-5)


def test_an_indexed_recording_is_scored_from_its_stored_windows_without_encoding(
    pipe, recordings, monkeypatch
):
    directory, files = recordings
    pipe.index([str(path) for path in files], root=directory, show_progress=False)
    index = pipe.audio_index
    rows = [row for row, item in enumerate(index.ids) if item == FIELD]
    text = encode_text(pipe.model, pipe.processor, ["a dog barks"])
    scores = entry_scores(index.embeddings[rows], index.metric, index_vectors(pipe.model, text))
    expected = propose_moments(file_curves(index, rows, scores)[FIELD])

    def no_encoding(*args, **kwargs):
        raise AssertionError("an indexed recording was encoded again")

    monkeypatch.setattr(moment_scoring, "encode_audio_windows", no_encoding)
    moments = pipe.moments("a dog barks", str(files[0]))
    assert moments == [moment.as_dict() for moment in expected]
    with pytest.raises(AssertionError, match="encoded again"):
        pipe.moments("a dog barks", str(files[0]), hop_seconds=0.5)  # a hop of its own: encoded afresh


def test_moments_across_the_index_are_one_ranked_list_of_files_and_spans(pipe, recordings):
    directory, files = recordings
    pipe.index([str(path) for path in files], root=directory, show_progress=False)
    index = pipe.audio_index
    text = encode_text(pipe.model, pipe.processor, ["birds sing"])
    scores = entry_scores(index.embeddings, index.metric, index_vectors(pipe.model, text))
    # the scores the index's own search gives every entry
    searched, positions = index.search(index_vectors(pipe.model, text), len(index))
    np.testing.assert_allclose(scores[positions[0]], searched[0], rtol=1e-5, atol=1e-6)
    per_file = file_curves(index, range(len(index)), scores)
    assert list(per_file) == [FIELD, "noise0.wav", "noise1.wav"]
    expected = sorted(
        ((item, m) for item, curve in per_file.items() for m in propose_moments(curve)),
        key=lambda x: -x[1].score,
    )[:7]
    hits = pipe.moments("birds sing", top_k=7)
    assert [(hit["id"], hit["start"], hit["end"], hit["score"]) for hit in hits] == [
        (item, m.start, m.end, m.score) for item, m in expected
    ]
    assert hits[0]["path"] == str(directory / hits[0]["id"])
    assert list(hits[0]) == ["id", "score", "start", "end", "path"]


def test_entry_scores_are_the_negative_distance_of_a_distance_head():
    rng = np.random.default_rng(0)
    vectors, query = rng.standard_normal((6, 4)), torch.tensor(rng.standard_normal((1, 4)))
    expected = -np.sqrt(((vectors - query.numpy()) ** 2).sum(axis=1))
    np.testing.assert_allclose(entry_scores(vectors, "l2", query), expected)
    np.testing.assert_allclose(entry_scores(vectors, "inner_product", query), vectors @ query.numpy()[0])


def test_the_old_paths_of_moment_windowing_warn_and_give_the_windowing_module_s_names():
    with pytest.deprecated_call(match="moved to `hf_atr.windowing.moment_windowing`"):
        assert moment_scoring.moment_windowing is moment_windowing
    with pytest.deprecated_call(match="DEFAULT_MOMENT_HOP_SECONDS"):
        assert moment_scoring.DEFAULT_MOMENT_HOP_SECONDS == 1.0
    with pytest.raises(AttributeError):
        moment_scoring.nothing_here  # noqa: B018


def test_a_frame_level_source_feeds_the_same_proposers():
    scores = np.full(750, 0.1)
    scores[250:300] = 0.8  # frames 10.0-12.0 s at 25 frames/s
    best = propose_moments(SimilarityCurve.from_frames(scores))[0]
    assert (best.start, best.end) == pytest.approx((10.0, 12.0), abs=1e-4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda pipe, files: pipe.moments("  ", str(files[0])),
            "pipe.moments needs a text query describing the sound",
        ),
        (
            lambda pipe, files: pipe.moments(str(files[1]), str(files[0])),
            "pipe.moments takes a text query, and '",
        ),
        (
            lambda pipe, files: pipe.moments("a dog", str(files[0]), top_k=0),
            "top_k must be a positive integer, got 0.",
        ),
        (
            lambda pipe, files: pipe.moments("a dog", [str(files[0]), str(files[1])]),
            "pipe.moments searches one recording, got a list of 2",
        ),
        (
            lambda pipe, files: pipe.moments("a dog"),
            "pipe.moments(query) searches the files of the audio index, and this pipeline holds none",
        ),
    ],
    ids=["empty", "audio query", "top_k", "several recordings", "no index"],
)
def test_a_moment_query_that_cannot_be_answered_says_why(pipe, recordings, call, message):
    _, files = recordings
    with pytest.raises(ValueError) as error:
        call(pipe, files)
    assert message in str(error.value)


@pytest.mark.slow
def test_a_pooled_index_gives_whole_files_and_an_index_without_spans_none(pipe, recordings):
    directory, files = recordings
    pipe.index([str(path) for path in files], root=directory, pool=True, show_progress=False)
    hits = pipe.moments("a dog barks")
    assert sorted((hit["id"], hit["start"], hit["end"]) for hit in hits) == [
        (FIELD, 0.0, 60.0),
        ("noise0.wav", 0.0, 20.0),
        ("noise1.wav", 0.0, 20.0),
    ]
    inside = pipe.moments("a dog barks", str(files[0]))  # one recording of a pooled index: encoded afresh
    assert len(inside) > 1 and all(hit["end"] - hit["start"] < 60.0 for hit in inside)
    without_spans = EmbeddingIndex(2)
    without_spans.add(np.eye(2, dtype=np.float32), ["a.wav", "b.wav"])  # format 1, or a dataset's clips
    with pytest.raises(ValueError) as error:
        file_curves(without_spans, [0, 1], np.zeros(2))
    assert str(error.value) == (
        "Moments need the audio index's windows with their time spans, and this index holds none (saved before "
        "spans existed, with format 1): rebuild it with `pipe.index(...)` or `hf-atr index`."
    )


# Frame-level models (PE-Audio): scored frame by frame ------------------------------------------------------------

PE_EVENT = (12.3, 12.8)
""":func:`recording_with_event` at 48 kHz: the 0.5-s tone of a 20-s recording."""
PE_FRAME = 1 / 25


@pytest.fixture(scope="module")
def frame_pipe(tmp_path_factory):
    """A pipeline on a tiny PE-Audio frame-level model planted to score the tone's frames highest
    (:func:`pe_audio_planting.plant_tone_caption`), with its 20-s recording and a 3-s one."""
    directory = tmp_path_factory.mktemp("pe-frames")
    model_dir = save_converted_pe_audio(directory, frame_level=True)
    register_pipeline()
    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    recording, query = recording_with_event(20, PE_EVENT[0], PE_AUDIO_SAMPLING_RATE)
    plant_tone_caption(pipe.model, pipe.processor, query, "a tone")
    (directory / "field.wav").write_bytes(encode_wav(recording, PE_AUDIO_SAMPLING_RATE, subtype="FLOAT"))
    (directory / "short.wav").write_bytes(
        encode_wav(recording[: 3 * PE_AUDIO_SAMPLING_RATE], PE_AUDIO_SAMPLING_RATE)
    )
    return pipe, directory


@pytest.mark.slow
def test_a_frame_level_model_finds_an_event_within_frames_where_its_windows_find_it_within_a_hop(
    frame_pipe, monkeypatch
):
    pipe, directory = frame_pipe
    moments = pipe.moments("a tone", str(directory / "field.wav"))
    # The moments that overlap the tone lead the rest by a wide margin.
    overlaps = [m["start"] < PE_EVENT[1] and m["end"] > PE_EVENT[0] for m in moments]
    clear_best_among([m["score"] for m in moments], overlaps)
    start, end = moments[0]["start"], moments[0]["end"]
    # End within one frame. Stated tolerance for the start: 4 frames (0.16 s). The waveform encoder's convolutions
    # reach across the onset, so the three frames before the tone already read some of it and score above the
    # boundary level (measured: 3.5-8 σ above the median, the onset's frame 4.8 σ, the tone's frames 10-23 σ).
    assert PE_EVENT[0] - 4 * PE_FRAME - 1e-9 <= start <= PE_EVENT[0] + PE_FRAME
    assert abs(end - PE_EVENT[1]) <= PE_FRAME + 1e-9
    assert start == pytest.approx(round(start / PE_FRAME) * PE_FRAME)  # on the frame grid
    # The same model scored window by window (1-s windows every 0.5 s; mean pooling, so that a window's embedding
    # reads its frames as the clip-level pooler of the planted model, whose attention is zeroed, cannot): the event
    # within one hop, its moment looser than the frames'.
    monkeypatch.setattr(pipe.model.config, "audio_pooling", "mean")
    windowed = AudioTextRetrievalPipeline(
        model=pipe.model, processor=pipe.processor, windowing=Windowing(window_seconds=1.0)
    )
    window_moment = windowed.moments("a tone", str(directory / "field.wav"), hop_seconds=0.5)[0]
    assert abs(window_moment["start"] - PE_EVENT[0]) <= 0.5 and abs(window_moment["end"] - PE_EVENT[1]) <= 0.5

    def iou(moment):
        inside = min(moment["end"], PE_EVENT[1]) - max(moment["start"], PE_EVENT[0])
        return inside / (max(moment["end"], PE_EVENT[1]) - min(moment["start"], PE_EVENT[0]))

    assert iou(moments[0]) > iou(window_moment) + 0.1


def test_a_frame_level_model_scores_frames_unless_a_hop_is_asked_for(frame_pipe, monkeypatch):
    pipe, directory = frame_pipe
    scored = []

    def spy(model, processor, recording, text_embeds, windowing, **kwargs):
        scored.append(windowing)
        return recording_curve(model, processor, recording, text_embeds, windowing, **kwargs)

    monkeypatch.setattr(moment_scoring, "recording_curve", spy)
    pipe.moments("a tone", str(directory / "short.wav"))
    pipe.moments("a tone", str(directory / "short.wav"), hop_seconds=0.5)
    assert scored == [
        Windowing(frame_seconds=PE_FRAME),  # one entry per frame, in the extractor's 10-s forward passes
        Windowing(window_seconds=10.0, hop_seconds=0.5),
    ]


def test_a_recording_indexed_with_frames_is_scored_from_them_and_one_indexed_with_windows_afresh(
    frame_pipe, monkeypatch
):
    pipe, directory = frame_pipe
    short = str(directory / "short.wav")
    framed = AudioTextRetrievalPipeline(
        model=pipe.model, processor=pipe.processor, windowing=Windowing(frame_seconds=0.2)
    )
    index = framed.index([short], root=directory, show_progress=False)
    assert len(index) == 15 and index.spans[1] == pytest.approx((0.2, 0.4))
    text = encode_text(pipe.model, pipe.processor, ["a tone"])
    scores = entry_scores(index.embeddings, index.metric, index_vectors(pipe.model, text))
    expected = [
        moment.as_dict() for moment in propose_moments(file_curves(index, range(15), scores)["short.wav"])
    ]

    def no_encoding(*args, **kwargs):
        raise AssertionError("an indexed recording was encoded again")

    monkeypatch.setattr(moment_scoring, "encode_audio_windows", no_encoding)
    assert framed.moments("a tone", short) == expected
    windows = AudioTextRetrievalPipeline(
        model=pipe.model, processor=pipe.processor, windowing=Windowing(window_seconds=1.0)
    )
    windows.index([short], root=directory, show_progress=False)
    assert windows.audio_index.frame_seconds is None and len(windows.audio_index) == 5
    with pytest.raises(AssertionError, match="encoded again"):
        windows.moments("a tone", short)  # stored windows, but this model scores frames: encoded afresh


def test_frame_windowing_takes_one_frame_per_entry_and_needs_a_frame_level_model(frame_pipe, pipe):
    frame_level, _ = frame_pipe
    windowing = Windowing(window_seconds=4.0, hop_seconds=1.0, pooling="max")
    assert frame_windowing(windowing, frame_level.model) == Windowing(
        window_seconds=4.0, pooling="max", frame_seconds=PE_FRAME
    )
    assert frame_windowing(windowing, frame_level.model).frames_per_entry(25.0) == 1
    with pytest.raises(ValueError) as error:
        frame_windowing(windowing, pipe.model)
    assert str(error.value) == (
        "frame_seconds needs a model with frame-level audio embeddings (config.audio_frame_rate), e.g. one converted "
        "from a PeAudioFrameLevelModel checkpoint; this model embeds whole windows only."
    )
