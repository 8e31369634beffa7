"""hf_atr.audio_encoding: clips and windows encoded, undecodable clips skipped and named (the rest of
hf_atr.encoding: tests/test_encoding.py)."""

from __future__ import annotations

import logging
import tempfile

import pytest
import torch
from datasets import Dataset
from ranking_margin import clear_best_among
from synthetic_audio import recording_with_event, synthetic_clip
from tiny_models import SAMPLING_RATE, feature_dataset, make_model, make_processor, save_tiny_clap_checkpoint

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.audio_encoding import (
    encode_audio,
    encode_audio_clips,
    encode_audio_windows,
    encode_evaluation_clips,
)
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.windowing import Windowing, pool_window_embeddings, window_bounds

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


@pytest.fixture(scope="module")
def raw_setup():
    processor = make_processor()
    return make_model(processor=processor), processor


@pytest.mark.slow
def test_a_long_recording_is_encoded_window_by_window_with_spans_and_pooled(raw_setup):
    model, processor = raw_setup
    recording, query = recording_with_event(60, 40.2, SAMPLING_RATE)
    windowing = Windowing()
    window, hop = windowing.samples(processor.feature_extractor)
    encoded = encode_audio_windows(
        model, processor, [{"audio": recording, "audio_id": "field"}], windowing=windowing
    )
    bounds = window_bounds(len(recording), window, hop)
    assert len(encoded.embeddings) == len(bounds) > 100 and encoded.clip_indices.unique().tolist() == [0]
    assert encoded.starts.tolist() == [start / SAMPLING_RATE for start, _ in bounds]
    assert encoded.ends.tolist() == [stop / SAMPLING_RATE for _, stop in bounds]
    # Each window embeds as that stretch of audio alone does (the reference: the processor on the slice).
    with torch.no_grad():
        reference = model.get_audio_features(**processor(audio=[recording[slice(*bounds[80])]]))
    torch.testing.assert_close(encoded.embeddings[80:81], reference, rtol=1e-5, atol=1e-6)
    # The event at 40.2-40.7 s: the best window for the query is one that holds it, by a wide margin.
    query_embed = encode_audio(model, processor, [{"audio": query}])
    holds_event = (encoded.starts <= 40.2) & (encoded.ends >= 40.7)
    best = clear_best_among((encoded.embeddings @ query_embed.T)[:, 0], holds_event)
    assert encoded.starts[best] <= 40.2 and encoded.ends[best] >= 40.7
    # The clip embedding pools every window: not the first window (all the model's own protocol reads).
    pooled = encode_audio(model, processor, [{"audio": recording}], windowing=windowing)
    torch.testing.assert_close(pooled, pool_window_embeddings(encoded.embeddings)[None])
    first_window = encode_audio(model, processor, [{"audio": recording}])
    torch.testing.assert_close(first_window, encoded.embeddings[:1], rtol=1e-5, atol=1e-6)
    assert float(pooled @ first_window.T) < 0.999


def test_clap_fusion_keeps_its_own_embedding_of_a_long_clip_but_windows_for_the_index():
    with tempfile.TemporaryDirectory() as directory:
        save_tiny_clap_checkpoint(directory, fused=True)
        model, processor = AtrDualEncoderModel.from_clap(directory), AtrProcessor.from_clap(directory)
    clip = synthetic_clip(3 * SAMPLING_RATE, SAMPLING_RATE)
    fused = encode_audio(model, processor, [{"audio": clip}], windowing=Windowing())
    own = encode_audio(model, processor, [{"audio": clip}])
    torch.testing.assert_close(fused, own, rtol=0, atol=0)  # fusion's views are fixed at inference
    windows = encode_audio_windows(model, processor, [{"audio": clip}], windowing=Windowing())
    assert len(windows.embeddings) == 5  # 1-s chunks every 0.5 s: the index still gets spans


def test_undecodable_clips_are_skipped_and_reported_or_raise_when_strict(raw_setup, tmp_path):
    model, processor = raw_setup
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "notes.wav").write_text("not audio")
    rows = [
        {"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE), "audio_id": "good0"},
        {"audio": str(tmp_path / "empty.wav"), "audio_id": "empty"},
        {"audio": str(tmp_path / "notes.wav"), "audio_id": "notes"},
        {"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE, seed=1), "audio_id": "good3"},
    ]
    encoded = encode_audio_windows(model, processor, rows, windowing=Windowing(), strict=False)
    assert encoded.kept_clips == [0, 3] and encoded.pooled("mean").shape == (2, 16)
    assert [(item.index, item.name, item.reason) for item in encoded.skipped] == [
        (1, "empty", "the audio file is empty (0 bytes)."),
        (2, "notes", "the audio is unreadable or corrupt (Format not recognised)."),
    ]
    with pytest.raises(AudioDecodeError, match=r"^empty: the audio file is empty \(0 bytes\)\.$"):
        encode_audio(model, processor, rows)


def test_windows_need_the_waveform(raw_setup):
    model, processor = raw_setup
    with pytest.raises(
        ValueError, match="clip0: windowed encoding needs the waveform, but the rows hold only"
    ):
        encode_audio_windows(model, processor, feature_dataset(2), windowing=Windowing())
    encoded = encode_audio_windows(model, processor, feature_dataset(2))
    assert encoded.starts is None and encoded.embeddings.shape == (2, 16)


def test_encode_audio_clips_pools_each_clips_windows_into_one_entry_spanning_it(raw_setup, tmp_path):
    model, processor = raw_setup
    windowing = Windowing(pooling="max")
    window, hop = windowing.samples(processor.feature_extractor)
    (tmp_path / "empty.wav").write_bytes(b"")
    long_clip = synthetic_clip(3 * window, SAMPLING_RATE)
    rows = [
        {"audio": long_clip, "audio_id": "long"},
        {"audio": str(tmp_path / "empty.wav"), "audio_id": "empty"},
        {"audio": synthetic_clip(SAMPLING_RATE // 2, SAMPLING_RATE, seed=1), "audio_id": "short"},
    ]
    clips = encode_audio_clips(model, processor, rows, windowing=windowing, strict=False)
    windows = encode_audio_windows(model, processor, rows, windowing=windowing, strict=False)
    assert clips.clip_indices.tolist() == [0, 2] and [item.name for item in clips.skipped] == ["empty"]
    assert clips.starts.tolist() == [0.0, 0.0]
    assert clips.ends.tolist() == [3 * window / SAMPLING_RATE, 0.5]
    long_windows = windows.embeddings[windows.clip_indices == 0]
    assert len(long_windows) == len(window_bounds(len(long_clip), window, hop)) > 1
    torch.testing.assert_close(clips.embeddings[0], pool_window_embeddings(long_windows, "max"))
    # Without windowing: the model's own protocol, one forward pass per clip (as encode_audio_windows).
    own = encode_audio_clips(model, processor, rows, strict=False)
    torch.testing.assert_close(
        own.embeddings, encode_audio_windows(model, processor, rows, strict=False).embeddings
    )


def test_evaluation_clips_name_the_first_undecodable_ones_and_count_the_rest(raw_setup, tmp_path, caplog):
    model, processor = raw_setup
    (tmp_path / "empty.wav").write_bytes(b"")
    rows = [{"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE), "audio_id": "good0"}]
    rows += [{"audio": str(tmp_path / "empty.wav"), "audio_id": f"empty{row}"} for row in range(1, 8)]
    rows += [{"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE, seed=8), "audio_id": "good8"}]
    with caplog.at_level(logging.WARNING):
        clips = encode_evaluation_clips(model, processor, rows, description="Evaluating on split 'test'")
    assert (
        "Evaluating on split 'test': 7 clip(s) cannot be decoded and are left out with their captions or labels: "
        "empty1 (the audio file is empty (0 bytes).); " in caplog.text
    )
    assert (
        "empty5 (the audio file is empty (0 bytes).) and 2 more. The metrics cover the other clips."
        in caplog.text
    )
    assert "empty6" not in caplog.text
    assert clips.kept == [0, 8] and clips.cut_clips == 0
    torch.testing.assert_close(clips.embeddings, encode_audio(model, processor, [rows[0], rows[8]]))
    assert clips.protocol_entries() == {
        "clips": 2,
        "clips_cut_to_window": 0,
        "skipped_clips": [
            {"audio_id": f"empty{row}", "reason": "the audio file is empty (0 bytes)."} for row in range(1, 8)
        ],
    }
    dataset = Dataset.from_dict({"audio_id": [row["audio_id"] for row in rows]})
    assert clips.dataset_rows(dataset)["audio_id"] == ["good0", "good8"]
    with pytest.raises(AudioDecodeError, match=r"^empty1: the audio file is empty \(0 bytes\)\.$"):
        encode_evaluation_clips(model, processor, rows, strict=True)
