"""The audio-text dual encoder: two transformers backbones, projections and a scoring head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.utils import logging

from .configuration_atr import AtrConfig

logger = logging.get_logger(__name__)

MAX_LOGIT_SCALE = 100.0
"""CLIP's cap on ``exp(logit_scale)`` (temperature ≥ 0.01), which keeps early training stable."""

_SQUARED_DISTANCE_FLOOR = 1e-12
"""Floor under squared distances before the square root, whose gradient is infinite at zero."""


@dataclass
class AtrOutput(ModelOutput):
    """Output of :class:`AtrDualEncoderModel`.

    Args:
        logits_per_text: ``(n_text, n_audio)`` scaled scores (higher is a better match).
        logits_per_audio: ``(n_audio, n_text)``, the transpose.
        text_embeds: ``(n_text, projection_dim)`` L2-normalised caption embeddings.
        audio_embeds: ``(n_audio, projection_dim)`` L2-normalised audio embeddings.
        text_model_output / audio_model_output: the backbones' raw outputs.
    """

    logits_per_text: torch.Tensor | None = None
    logits_per_audio: torch.Tensor | None = None
    text_embeds: torch.Tensor | None = None
    audio_embeds: torch.Tensor | None = None
    text_model_output: Any = None
    audio_model_output: Any = None


class AtrScoringHead(nn.Module):
    r"""Scores caption/audio embedding pairs: cosine similarity, or a negative ground-metric distance.

    - ``"cosine"``: ``s(t, a) = tᵀa`` (embeddings are unit vectors); ground metric ``1 − tᵀa``.
    - ``"euclidean"``: ``s(t, a) = −‖t − a‖₂``.
    - ``"mahalanobis"``: ``s(t, a) = −sqrt((t − a)ᵀ M (t − a))`` with a learnable PSD ``M``
      (m-LTM Eq. 9), kept PSD by :meth:`project_to_psd_` after each optimizer step.

    Logits are ``exp(logit_scale) · s`` with ``exp(logit_scale)`` capped at 100. Parameters are cast to
    the dtype of the embeddings they score, so float32 objectives can score with a half-precision model.
    """

    def __init__(self, kind: str, dim: int, logit_scale_init: float) -> None:
        super().__init__()
        self.kind = kind
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale_init)))
        if kind == "mahalanobis":
            self.metric_matrix = nn.Parameter(torch.eye(dim))

    def scale(self) -> torch.Tensor:
        """``exp(logit_scale)``, capped at :data:`MAX_LOGIT_SCALE`."""
        return self.logit_scale.exp().clamp(max=MAX_LOGIT_SCALE)

    def symmetric_metric(self) -> torch.Tensor:
        """``(dim, dim)`` ``(M + Mᵀ) / 2``, the matrix the quadratic form ``(x − y)ᵀ M (x − y)`` actually uses."""
        return (self.metric_matrix + self.metric_matrix.T) / 2

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Ground metric between rows: ``x`` ``(n, dim)``, ``y`` ``(m, dim)`` → ``(n, m)``.

        Squared distances come from the expansion ``xᵀSx + ySy − 2xᵀSy`` (never an ``n × m × dim`` tensor),
        floored at 1e-12 before the square root so coincident points keep finite gradients. For
        Mahalanobis, ``S = (M + Mᵀ)/2``: the expansion with ``M`` itself has the same value, but its gradient
        with respect to ``M`` carries a spurious antisymmetric part (``−2 x yᵀ`` is not symmetric) that Adam
        would amplify before the projection; with ``S`` the gradient of each squared distance is exactly
        ``(x − y)(x − y)ᵀ``, as for the explicit ``(x − y)ᵀ M (x − y)`` (m-LTM Eq. 9, 11).
        """
        if self.kind == "cosine":
            return 1.0 - x @ y.T
        if self.kind == "mahalanobis":
            metric = self.symmetric_metric().to(x.dtype)
            x_metric, y_metric = x @ metric, y @ metric
        else:
            x_metric, y_metric = x, y
        squared = (x_metric * x).sum(-1)[:, None] + (y_metric * y).sum(-1)[None, :] - 2.0 * x_metric @ y.T
        return squared.clamp(min=_SQUARED_DISTANCE_FLOOR).sqrt()

    def similarity(self, text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        """Unscaled ``(n_text, n_audio)`` similarity: cosine, or the negative ground metric."""
        if self.kind == "cosine":
            return text_embeds @ audio_embeds.T
        return -self.distance(text_embeds, audio_embeds)

    def forward(self, text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        """``(n_text, n_audio)`` logits = scale · similarity."""
        return self.scale() * self.similarity(text_embeds, audio_embeds)

    @torch.no_grad()
    def project_to_psd_(self) -> None:
        """Project ``M`` onto the PSD cone: symmetrise, clamp eigenvalues at 0 (DESIGN.md). No-op otherwise.

        m-LTM's ``Proj`` (after Eq. 11) clamps singular values, which are never negative; the eigenvalues of
        the symmetric part are what must be clamped.
        """
        if self.kind != "mahalanobis":
            return
        symmetric = self.symmetric_metric()
        eigenvalues, eigenvectors = torch.linalg.eigh(
            symmetric.to(torch.promote_types(symmetric.dtype, torch.float32))
        )
        projected = (eigenvectors * eigenvalues.clamp(min=0)) @ eigenvectors.T
        self.metric_matrix.copy_((projected + projected.T) / 2)

    @torch.no_grad()
    def transform(self, embeds: torch.Tensor) -> torch.Tensor:
        """Map ``(n, dim)`` embeddings so that their Euclidean geometry is the head's metric (``M^{1/2} x``).

        Used to index Mahalanobis embeddings in an L2 index; identity for the other kinds.
        """
        if self.kind != "mahalanobis":
            return embeds
        symmetric = self.symmetric_metric()
        eigenvalues, eigenvectors = torch.linalg.eigh(
            symmetric.to(torch.promote_types(symmetric.dtype, torch.float32))
        )
        square_root = (eigenvectors * eigenvalues.clamp(min=0).sqrt()) @ eigenvectors.T
        return embeds @ square_root.to(embeds.dtype)


class AtrPreTrainedModel(PreTrainedModel):
    config: AtrConfig
    config_class = AtrConfig
    base_model_prefix = "atr"
    main_input_name = "input_ids"
    input_modalities = ("audio", "text")
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, AtrScoringHead):
            init.constant_(module.logit_scale, self.config.logit_scale_init)
            if module.kind == "mahalanobis":
                init.copy_(module.metric_matrix, torch.eye(module.metric_matrix.shape[0]))
        elif isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        else:
            super()._init_weights(module)


def _encoder_only(model: PreTrainedModel) -> PreTrainedModel:
    """The encoder of an encoder-decoder backbone (e.g. Whisper), the model itself otherwise."""
    if getattr(model.config, "is_encoder_decoder", False):
        return model.get_encoder()
    return model


def _pool(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str, pooler_output: Any
) -> torch.Tensor:
    """``(batch, seq, hidden)`` → ``(batch, hidden)`` by masked mean, first token, or the backbone's pooler."""
    if pooling == "pooler":
        if pooler_output is None:
            raise ValueError(
                "pooling='pooler' but this backbone returns no `pooler_output`; use 'mean' or 'cls'."
            )
        return pooler_output
    if pooling == "cls":
        return hidden_states[:, 0]
    if attention_mask is None or attention_mask.shape[1] != hidden_states.shape[1]:
        return hidden_states.mean(dim=1)
    weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class AtrDualEncoderModel(AtrPreTrainedModel):
    """Audio backbone + text backbone + linear projections + :class:`AtrScoringHead`.

    Any transformers audio model (AST, Whisper's encoder, CLAP's audio tower, wav2vec2, ...) and any
    text model (BERT, RoBERTa, XLM-R, ...) can be combined, as ``VisionTextDualEncoderModel`` does
    for images. ``forward`` returns L2-normalised embeddings and scaled logits; training losses are
    computed by the objective that :class:`~hf_atr.AtrTrainer` builds from ``config.objective``.

    Example::

        model = AtrDualEncoderModel.from_audio_text_pretrained("MIT/ast-finetuned-audioset-10-10-0.4593",
                                                               "bert-base-uncased", projection_dim=512)
        outputs = model(input_ids=..., attention_mask=..., input_values=...)
        outputs.logits_per_text  # (n_text, n_audio)
    """

    def __init__(
        self,
        config: AtrConfig | None = None,
        audio_model: PreTrainedModel | None = None,
        text_model: PreTrainedModel | None = None,
    ) -> None:
        if config is None:
            if audio_model is None or text_model is None:
                raise ValueError("Pass either a config, or both an audio_model and a text_model.")
            config = AtrConfig(audio_config=audio_model.config, text_config=text_model.config)
        super().__init__(config)
        if audio_model is None:
            audio_model = _encoder_only(AutoModel.from_config(config.audio_config))
        if text_model is None:
            text_model = AutoModel.from_config(config.text_config)
        self.audio_model = audio_model
        self.text_model = text_model
        # The backbones must read the composite config so that edits to it reach them.
        self.config.audio_config = self.audio_model.config
        self.config.text_config = self.text_model.config

        self.audio_projection = nn.Linear(config.audio_config.hidden_size, config.projection_dim, bias=False)
        self.text_projection = nn.Linear(config.text_config.hidden_size, config.projection_dim, bias=False)
        self.scoring_head = AtrScoringHead(config.scoring, config.projection_dim, config.logit_scale_init)
        self.post_init()

    def get_audio_features(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
        is_longer: torch.Tensor | None = None,
        return_backbone_output: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Embed audio: ``(batch, projection_dim)``, L2-normalised.

        Args:
            input_values / input_features: what the backbone's feature extractor produced (AST and
                wav2vec2 take ``input_values``; Whisper and CLAP ``input_features``).
            audio_attention_mask: the feature extractor's ``attention_mask``, for backbones that take one.
            is_longer: CLAP's fusion flag.
        """
        audio_inputs = {
            name: value
            for name, value in (
                ("input_values", input_values),
                ("input_features", input_features),
                ("attention_mask", audio_attention_mask),
                ("is_longer", is_longer),
            )
            if value is not None
        }
        if "input_values" not in audio_inputs and "input_features" not in audio_inputs:
            raise ValueError(
                "get_audio_features needs `input_values` or `input_features` from the feature extractor."
            )
        backbone_output = self.audio_model(**audio_inputs, return_dict=True)
        pooled = _pool(
            backbone_output.last_hidden_state,
            audio_attention_mask,
            self.config.audio_pooling,
            getattr(backbone_output, "pooler_output", None),
        )
        embeds = nn.functional.normalize(self.audio_projection(pooled), dim=-1)
        return (embeds, backbone_output) if return_backbone_output else embeds

    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_backbone_output: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Embed token ids ``(batch, seq)``: ``(batch, projection_dim)``, L2-normalised."""
        text_inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            text_inputs["token_type_ids"] = token_type_ids
        backbone_output = self.text_model(**text_inputs, return_dict=True)
        pooled = _pool(
            backbone_output.last_hidden_state,
            attention_mask,
            self.config.text_pooling,
            getattr(backbone_output, "pooler_output", None),
        )
        embeds = nn.functional.normalize(self.text_projection(pooled), dim=-1)
        return (embeds, backbone_output) if return_backbone_output else embeds

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
        is_longer: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> AtrOutput:
        """Embed whichever modalities are given; logits when both are.

        Extra keyword arguments (batch metadata such as ``audio_ids`` that the collator carries for the
        objective) are ignored.
        """
        audio_embeds = audio_output = text_embeds = text_output = None
        if input_values is not None or input_features is not None:
            audio_embeds, audio_output = self.get_audio_features(
                input_values, input_features, audio_attention_mask, is_longer, return_backbone_output=True
            )
        if input_ids is not None:
            text_embeds, text_output = self.get_text_features(
                input_ids, attention_mask, token_type_ids, return_backbone_output=True
            )
        logits_per_text = logits_per_audio = None
        if audio_embeds is not None and text_embeds is not None:
            logits_per_text = self.scoring_head(text_embeds, audio_embeds)
            logits_per_audio = logits_per_text.T
        return AtrOutput(
            logits_per_text=logits_per_text,
            logits_per_audio=logits_per_audio,
            text_embeds=text_embeds,
            audio_embeds=audio_embeds,
            text_model_output=text_output,
            audio_model_output=audio_output,
        )

    @torch.no_grad()
    def project_parameters_(self) -> None:
        """Project the parameters that carry a constraint back onto their feasible set, in place.

        Today that is the Mahalanobis matrix of the scoring head, projected onto the PSD cone
        (:meth:`AtrScoringHead.project_to_psd_`, m-LTM §3.2: ``M = Proj(F(M, ∇M))``); a no-op for the
        other heads. :class:`~hf_atr.AtrTrainer` calls it after every optimizer step, whatever the
        objective; a hand-written training loop calls it after ``optimizer.step()``.
        """
        self.scoring_head.project_to_psd_()

    def save_pretrained(self, save_directory: str | Any, *args: Any, **kwargs: Any) -> None:
        """``PreTrainedModel.save_pretrained`` plus a generated model card (``README.md``)."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            from .model_card import write_model_card

            write_model_card(self, save_directory)

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Upload weights, config, the generated card (and optionally processor and index), see :func:`hf_atr.hub.push_to_hub`."""
        from .hub import push_to_hub

        return push_to_hub(self, repo_id, **kwargs)

    @classmethod
    def from_audio_text_pretrained(
        cls,
        audio_model_name_or_path: str,
        text_model_name_or_path: str,
        **kwargs: Any,
    ) -> AtrDualEncoderModel:
        """Combine two pretrained backbones; projections and scoring head start random.

        Keyword arguments prefixed ``audio_`` / ``text_`` go to the backbones' ``from_pretrained``
        (e.g. ``audio_revision="main"``); the others (``projection_dim``, ``scoring``, ``objective``, ...)
        and :class:`AtrConfig`'s own ``audio_pooling`` / ``text_pooling`` to :class:`AtrConfig`.
        """
        # AtrConfig's pooling fields start with a backbone prefix too; they are not from_pretrained arguments.
        backbone_keys = [key for key in list(kwargs) if key not in ("audio_pooling", "text_pooling")]
        audio_kwargs = {
            key[len("audio_") :]: kwargs.pop(key) for key in backbone_keys if key.startswith("audio_")
        }
        text_kwargs = {
            key[len("text_") :]: kwargs.pop(key) for key in backbone_keys if key.startswith("text_")
        }
        audio_model = _encoder_only(AutoModel.from_pretrained(audio_model_name_or_path, **audio_kwargs))
        text_model = AutoModel.from_pretrained(text_model_name_or_path, **text_kwargs)
        config = AtrConfig(audio_config=audio_model.config, text_config=text_model.config, **kwargs)
        return cls(config=config, audio_model=audio_model, text_model=text_model)


__all__ = ["AtrDualEncoderModel", "AtrOutput", "AtrPreTrainedModel", "AtrScoringHead"]


def register_auto_classes() -> None:
    """Make ``AutoConfig`` / ``AutoModel`` resolve ``model_type="audio-text-retrieval"`` without remote code."""
    AutoConfig.register(AtrConfig.model_type, AtrConfig, exist_ok=True)
    AutoModel.register(AtrConfig, AtrDualEncoderModel, exist_ok=True)
