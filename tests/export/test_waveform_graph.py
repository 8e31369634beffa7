"""The waveform-in audio graph: an export-friendly log-mel front end, then the audio encoder, in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from export_models import build_family, clips_within_window

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hf_atr.audio_encoding import encode_audio
from hf_atr.export.onnx_encoder import onnx_feed  # noqa: E402
from hf_atr.export.onnx_graphs import export_onnx  # noqa: E402
from hf_atr.export.waveform_graph import (  # noqa: E402
    FRONT_END_TOLERANCE_DB,
    WAVEFORM_GRAPH,
    PannsLogMelFrontEnd,
    front_end_for,
)


def _recorded_like_clips(rate: int) -> list[np.ndarray]:
    """Noise, and a tone over a noise floor 60 dB down (as recordings have; a pure digital tone spans 110 dB)."""
    rng = np.random.default_rng(0)
    time = np.arange(rate) / rate
    tone = 0.3 * np.sin(2 * np.pi * 440 * time) + 3e-4 * rng.standard_normal(rate)
    return [(0.1 * rng.standard_normal(rate)).astype(np.float32), tone.astype(np.float32)]


def test_front_end_matches_the_panns_extractor_within_5e_3_db(tmp_path):
    _, processor = build_family("panns", tmp_path)
    clips = _recorded_like_clips(processor.sampling_rate)
    expected = processor(audio=clips, return_tensors="pt")["input_features"]
    front_end = PannsLogMelFrontEnd(processor.feature_extractor)
    got = front_end(torch.from_numpy(np.stack(clips)))
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < FRONT_END_TOLERANCE_DB


@pytest.mark.slow
def test_panns_export_adds_a_waveform_graph_that_encodes_as_torch(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    model, processor = build_family("panns", tmp_path / "source")
    report = export_onnx(model, processor, tmp_path / "onnx")
    assert report.graphs["waveform"].file == WAVEFORM_GRAPH and report.graphs["waveform"].max_abs_error < 1e-4
    session = onnxruntime.InferenceSession(
        str(tmp_path / "onnx" / WAVEFORM_GRAPH), providers=["CPUExecutionProvider"]
    )
    window = processor.feature_extractor.max_length_samples
    for batch in (1, 3):
        clips = clips_within_window(processor, batch, 0.7, seed=batch)
        waveforms = np.zeros((batch, window), dtype=np.float32)
        for row, clip in enumerate(clips):
            waveforms[row, : len(clip)] = clip
        got = session.run(None, onnx_feed(session, {"waveforms": waveforms}))[0]
        expected = encode_audio(model, processor, [{"audio": clip} for clip in clips])
        assert np.abs(got - expected.numpy()).max() < 1e-4


def test_families_without_a_front_end_are_named(tmp_path):
    model, processor = build_family("whisper", tmp_path)
    with pytest.raises(
        ValueError, match=r"No waveform-in graph for 'whisper' audio towers \(only \['panns'\]\)"
    ):
        front_end_for(model, processor)
