"""A waveform-in audio graph: a float32 log-mel front end written for export, before the audio encoder.

hf-atr's batched feature twins (:mod:`hf_atr.features`) branch on the data (deep frames recomputed in float64,
padding frames computed once) and do not export. :class:`PannsLogMelFrontEnd` computes PANNs' log-mel with fixed
shapes only: reflect-pad by half the FFT, ``unfold`` into frames, window, ``rfft``, power, Slaney mel filterbank,
``10 log10(max(mel, power_floor))``. In float32 it matches ``PannsFeatureExtractor`` within
:data:`FRONT_END_TOLERANCE_DB` on recorded-like audio (noise, tones over a noise floor); bands far below a frame's
loudest lose precision to float32's FFT, up to 3e-2 dB in frames of a pure digital tone spanning 110 dB.

:func:`export_waveform_graph` writes ``audio_waveform_encoder.onnx``: ``waveforms: (batch, window_samples)`` float32 at
the extractor's rate, each clip padded with silence (or cut) to the window by the client, → ``audio_embeds``. It covers
PANNs (:data:`WAVEFORM_FAMILIES`); PE-Audio's audio graph takes the waveform already.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..modeling_atr import AtrDualEncoderModel
from ..processing_atr import AtrProcessor
from .onnx_encoder import OnnxExportError, onnx_feed

WAVEFORM_GRAPH = "audio_waveform_encoder.onnx"
WAVEFORM_FAMILIES = ("panns",)
"""Audio tower types with a waveform-in graph."""
FRONT_END_TOLERANCE_DB = 5e-3


class PannsLogMelFrontEnd(nn.Module):
    """``PannsFeatureExtractor``'s log-mel for clips already padded or cut to its window, export-friendly.

    ``forward(waveforms: (batch, max_length_samples))`` → ``(batch, frames, feature_size)`` dB, float32.
    """

    def __init__(self, extractor: object) -> None:
        super().__init__()
        self.register_buffer("window", torch.tensor(np.asarray(extractor.window), dtype=torch.float32))
        self.register_buffer(
            "mel_filters", torch.tensor(np.asarray(extractor.mel_filters), dtype=torch.float32)
        )
        self.fft_length = len(extractor.window)
        self.hop_length = int(extractor.hop_length)
        self.power_floor = float(extractor.power_floor)
        self.window_samples = int(extractor.max_length_samples)

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        half = self.fft_length // 2
        signal = nn.functional.pad(waveforms[:, None, :], (half, half), mode="reflect")[:, 0]
        frames = signal.unfold(-1, self.fft_length, self.hop_length) * self.window
        spectrum = torch.fft.rfft(frames)
        power = spectrum.real**2 + spectrum.imag**2
        mel = power @ self.mel_filters
        return 10.0 * torch.log10(mel.clamp(min=self.power_floor))


class WaveformAudioGraph(nn.Module):
    """The front end, then ``get_audio_features``: ``(batch, samples)`` → ``(batch, projection_dim)``."""

    def __init__(self, front_end: PannsLogMelFrontEnd, model: AtrDualEncoderModel) -> None:
        super().__init__()
        self.front_end = front_end
        self.model = model

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        return self.model.get_audio_features(input_features=self.front_end(waveforms))


def front_end_for(model: AtrDualEncoderModel, processor: AtrProcessor) -> PannsLogMelFrontEnd:
    """The export-friendly front end of ``processor``'s extractor.

    Raises:
        ValueError: a tower family without one (:data:`WAVEFORM_FAMILIES`).
    """
    family = model.config.audio_config.model_type
    if family not in WAVEFORM_FAMILIES:
        raise ValueError(
            f"No waveform-in graph for {family!r} audio towers (only {list(WAVEFORM_FAMILIES)}); use "
            "audio_encoder.onnx with the processor's features."
        )
    return PannsLogMelFrontEnd(processor.feature_extractor)


def export_waveform_graph(
    model: AtrDualEncoderModel,
    processor: AtrProcessor,
    out: str | os.PathLike,
    probe_clips: list[np.ndarray],
    *,
    tolerance: float = 1e-4,
) -> float:
    """Write :data:`WAVEFORM_GRAPH` to ``out`` (dynamo exporter, dynamic batch), load it in ONNX Runtime and compare it
    with the torch model fed the processor's features of ``probe_clips`` (at the processor's rate, within the window);
    returns the max abs difference.

    Raises:
        ValueError: no front end for this family.
        OnnxExportError: the graph misses ``tolerance``.
    """
    front_end = front_end_for(model, processor)
    graph = WaveformAudioGraph(front_end, model).eval()
    clips = list(probe_clips)
    waveforms = torch.zeros(len(clips), front_end.window_samples)
    for row, clip in enumerate(clips):
        waveforms[row, : len(clip)] = torch.from_numpy(clip[: front_end.window_samples])
    with torch.no_grad():
        expected = model.get_audio_features(**dict(processor(audio=clips, return_tensors="pt")))
        program = torch.onnx.export(
            graph,
            (waveforms,),
            dynamo=True,
            input_names=["waveforms"],
            output_names=["audio_embeds"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
    path = Path(out) / WAVEFORM_GRAPH
    program.save(str(path))
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, onnx_feed(session, {"waveforms": waveforms}))[0]
    error = float(np.abs(got - expected.numpy()).max())
    if not error <= tolerance:
        raise OnnxExportError(
            f"{WAVEFORM_GRAPH} differs from the torch model by {error:.2e}, above {tolerance:.0e}."
        )
    return error


__all__ = [
    "FRONT_END_TOLERANCE_DB",
    "WAVEFORM_FAMILIES",
    "WAVEFORM_GRAPH",
    "PannsLogMelFrontEnd",
    "WaveformAudioGraph",
    "export_waveform_graph",
    "front_end_for",
]
