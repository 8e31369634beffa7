"""Planted weights for tiny PE-Audio models, so that a tone scores highest by a wide margin: a caption's embedding
points from noise to the tone of :func:`synthetic_audio.recording_with_event`'s 1-s query clip (the tone fills
0.25-0.75 s of it), measured on that query, not on any recording searched."""

from __future__ import annotations

import numpy as np
import torch

from hf_atr import AtrDualEncoderModel, AtrProcessor


def plant_caption_embeddings(
    model: AtrDualEncoderModel, processor: AtrProcessor, captions: list[str], directions: torch.Tensor
) -> None:
    """Set ``model``'s text projection in place so that the (unnormalised) embedding of ``captions[i]`` is
    ``directions[i]``: ``directions`` ``(len(captions), projection_dim)``, at most as many captions as the text
    model is wide."""
    with torch.no_grad():
        _, text_output = model.get_text_features(
            **processor(text=list(captions), padding=True), return_backbone_output=True
        )
        normed = model.text_projection.layer_norm(text_output.last_hidden_state[:, 0])  # (captions, hidden)
        model.text_projection.proj.weight.copy_(directions.T @ torch.linalg.pinv(normed.T))


def plant_tone_caption(
    model: AtrDualEncoderModel, processor: AtrProcessor, query: np.ndarray, caption: str
) -> None:
    """Plant a frame-level ``model`` in place: the encoder's transformer layers add nothing (each frame keeps its
    own waveform features), and ``caption``'s embedding is the direction from the noise frames to the tone frames
    of ``query``."""
    with torch.no_grad():
        for layer in model.audio_model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        frames, _ = model.get_audio_frame_features(**processor(audio=[query]))
    times = (torch.arange(frames.shape[1]) + 0.5) / model.config.audio_frame_rate
    tone = (times > 0.3) & (times < 0.7)
    quiet = (times < 0.2) | (times > 0.8)
    plant_caption_embeddings(
        model, processor, [caption], (frames[0, tone].mean(0) - frames[0, quiet].mean(0))[None]
    )


def plant_tone_window_caption(
    model: AtrDualEncoderModel, processor: AtrProcessor, query: np.ndarray, quiet: np.ndarray, caption: str
) -> None:
    """Plant a clip-level ``model`` in place: its class token starts at zero, so that the clip embedding it pools
    is read from the audio alone (a random-init class token outweighs the audio: windows of a recording then
    score within 1e-5 of each other), and ``caption``'s embedding is the direction from the ``quiet`` clip's
    embedding to ``query``'s."""
    with torch.no_grad():
        model.audio_model.patch_embedder.class_embedding.zero_()
        tone, noise = model.get_audio_features(**processor(audio=[query, quiet]))
    plant_caption_embeddings(model, processor, [caption], (tone - noise)[None])
