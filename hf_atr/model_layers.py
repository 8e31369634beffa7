"""The dual encoder's building blocks: projection heads, pooling, and how a tower is called.

Each is what :class:`~hf_atr.modeling_atr.AtrDualEncoderModel` puts between a backbone's hidden states and its
scoring head: ``(batch, seq, hidden)`` pooled to ``(batch, hidden)`` (:func:`pool_hidden_states`), then projected to
``(batch, projection_dim)`` (:func:`tower_projection`: linear, CLAP's two-layer head, PE-Audio's LayerNorm first).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN

from .configuration_atr import AtrConfig


def encoder_only(model: PreTrainedModel) -> PreTrainedModel:
    """The encoder of an encoder-decoder backbone (e.g. Whisper), the model itself otherwise."""
    if getattr(model.config, "is_encoder_decoder", False):
        return model.get_encoder()
    return model


class AtrProjectionMLP(nn.Module):
    """CLAP's projection head (``ClapProjectionLayer``): linear → activation → linear, both with bias.

    ``(batch, in_dim)`` → ``(batch, out_dim)``; the first layer maps to ``out_dim`` already.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_act: str) -> None:
        super().__init__()
        self.linear1 = nn.Linear(in_dim, out_dim)
        self.activation = ACT2FN[hidden_act]
        self.linear2 = nn.Linear(out_dim, out_dim)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.activation(self.linear1(hidden_states)))


class AtrNormedProjection(nn.Module):
    """PE-Audio's contrastive head (``PeAudioContrastiveHead``): LayerNorm (eps 1e-6) → the projection.

    ``(batch, in_dim)`` → ``(batch, out_dim)``; ``config.projection_layer_norm``.
    """

    LAYER_NORM_EPS = 1e-6

    def __init__(self, in_dim: int, projection: nn.Module) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(in_dim, eps=self.LAYER_NORM_EPS)
        self.proj = projection

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.proj(self.layer_norm(hidden_states))


def tower_projection(config: AtrConfig, in_dim: int) -> nn.Module:
    """A tower's projection to ``config.projection_dim``: bias-free linear, or CLAP's two-layer head; behind a
    LayerNorm with ``projection_layer_norm`` (PE-Audio)."""
    if config.projection == "mlp":
        projection = AtrProjectionMLP(in_dim, config.projection_dim, config.projection_hidden_act)
    else:
        projection = nn.Linear(in_dim, config.projection_dim, bias=False)
    return AtrNormedProjection(in_dim, projection) if config.projection_layer_norm else projection


def pool_hidden_states(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str, pooler_output: Any
) -> torch.Tensor:
    """``(batch, seq, hidden)`` → ``(batch, hidden)``: masked mean, first token, masked max, or the backbone's pooler.

    Mean and max follow sentence-transformers' ``Pooling`` (padding excluded by the attention mask).
    """
    if pooling == "pooler":
        if pooler_output is None:
            raise ValueError(
                "pooling='pooler' but this backbone returns no `pooler_output`; use 'mean', 'cls' or 'max'."
            )
        return pooler_output
    if pooling == "cls":
        return hidden_states[:, 0]
    mask = None
    if attention_mask is not None and attention_mask.shape[1] == hidden_states.shape[1]:
        mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
    if pooling == "max":
        if mask is None:
            return hidden_states.max(dim=1).values
        return hidden_states.masked_fill(mask == 0, float("-inf")).max(dim=1).values
    if mask is None:
        return hidden_states.mean(dim=1)
    return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def audio_mask_argument(audio_model: nn.Module) -> str:
    """The name under which ``audio_model.forward`` takes the audio mask: ``attention_mask``, or ``padding_mask``
    for towers that take only that (PE-Audio's encoder raises a ``TypeError`` on ``attention_mask``)."""
    parameters = inspect.signature(audio_model.forward).parameters
    return (
        "padding_mask"
        if "padding_mask" in parameters and "attention_mask" not in parameters
        else "attention_mask"
    )


def at_model_dtype(features: torch.Tensor | None, tower: nn.Module) -> torch.Tensor | None:
    """Float ``features`` (any shape) in the dtype of ``tower``'s weights, what a tower loaded in bfloat16 or float16
    needs at its door (features are computed in float32; CLIP's vision embeddings cast the same way); masks, flags
    and ``None`` pass as they are."""
    if features is None or not features.is_floating_point():
        return features
    weights = next((parameter for parameter in tower.parameters() if parameter.is_floating_point()), None)
    return features if weights is None else features.to(weights.dtype)


def frozen_context(frozen: bool) -> contextlib.AbstractContextManager:
    """No autograd through a frozen tower (nothing to store for a backward pass that never reaches it)."""
    return torch.no_grad() if frozen else contextlib.nullcontext()


__all__ = [
    "AtrNormedProjection",
    "AtrProjectionMLP",
    "at_model_dtype",
    "audio_mask_argument",
    "encoder_only",
    "frozen_context",
    "pool_hidden_states",
    "tower_projection",
]
