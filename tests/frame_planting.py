"""Planted weights for a tiny frame-level PE-Audio model: its caption embedding points from noise frames to the tone
frames of :func:`synthetic_audio.recording_with_event`'s query clip, so that frames of that tone score highest."""

from __future__ import annotations

import numpy as np
import torch

from hf_atr import AtrDualEncoderModel, AtrProcessor


def plant_tone_caption(
    model: AtrDualEncoderModel, processor: AtrProcessor, query: np.ndarray, caption: str
) -> None:
    """Plant ``model`` in place: the encoder's transformer layers add nothing (each frame keeps its own waveform
    features), and ``caption``'s embedding is the direction from the noise frames to the tone frames of the 1-s
    ``query`` clip (the tone fills 0.25-0.75 s of it), not of any recording searched."""
    with torch.no_grad():
        for layer in model.audio_model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        frames, _ = model.get_audio_frame_features(**processor(audio=[query]))
        times = (torch.arange(frames.shape[1]) + 0.5) / model.config.audio_frame_rate
        tone = (times > 0.3) & (times < 0.7)
        quiet = (times < 0.2) | (times > 0.8)
        direction = frames[0, tone].mean(0) - frames[0, quiet].mean(0)
        tokens = processor(text=[caption])
        _, text_output = model.get_text_features(**tokens, return_backbone_output=True)
        normed = model.text_projection.layer_norm(text_output.last_hidden_state[0, 0])
        model.text_projection.proj.weight.copy_(torch.outer(direction, normed) / normed.dot(normed))
