"""The audio-text dual encoder: two transformers backbones, projections and a scoring head.

Its building blocks (projection heads, pooling) are in :mod:`hf_atr.model_layers`, its starting points from
other checkpoints (two backbones, CLAP, PE-Audio) in :mod:`hf_atr.model_starting_points`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.utils import logging

from . import hub, scoring_head
from .configuration_atr import CLAP_AUDIO_MODEL_TYPE, AtrConfig, register_auto_config
from .deprecation import moved_names
from .file_permissions import apply_umask
from .model_files import write_model_files
from .model_layers import (
    at_model_dtype,
    audio_mask_argument,
    encoder_only,
    frozen_context,
    pool_hidden_states,
    tower_projection,
)
from .model_starting_points import AtrStartingPoints
from .scoring_head import stored_logit_scale
from .towers import pooler_modules, tower_from_config

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .hub import HubUpload

logger = logging.get_logger(__name__)


@dataclass
class AtrOutput(ModelOutput):
    """Output of :class:`AtrDualEncoderModel`.

    Args:
        logits_per_text: ``(n_text, n_audio)`` scaled scores (higher is a better match).
        logits_per_audio: ``(n_audio, n_text)``, the transpose.
        text_embeds: ``(n_text, projection_dim)`` caption embeddings, L2-normalised (not with ``scoring="dot"``).
        audio_embeds: ``(n_audio, projection_dim)`` audio embeddings, L2-normalised (not with ``scoring="dot"``).
        text_model_output / audio_model_output: the backbones' raw outputs.
    """

    logits_per_text: torch.Tensor | None = None
    logits_per_audio: torch.Tensor | None = None
    text_embeds: torch.Tensor | None = None
    audio_embeds: torch.Tensor | None = None
    text_model_output: Any = None
    audio_model_output: Any = None


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
        if isinstance(module, scoring_head.AtrScoringHead):
            initial_scale = stored_logit_scale(self.config.logit_scale_init, module.scale_form)
            init.constant_(module.logit_scale, initial_scale)
            if hasattr(module, "audio_logit_scale"):
                init.constant_(module.audio_logit_scale, initial_scale)
            if hasattr(module, "logit_bias"):
                init.constant_(module.logit_bias, self.config.logit_bias_init)
            if module.kind == "mahalanobis":
                init.copy_(module.metric_matrix, torch.eye(module.metric_matrix.shape[0]))
        elif isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        else:
            super()._init_weights(module)


class AtrDualEncoderModel(AtrPreTrainedModel, AtrStartingPoints):
    """Audio backbone + text backbone + projections + :class:`~hf_atr.scoring_head.AtrScoringHead`.

    Any transformers audio model (AST, Whisper's encoder, CLAP's audio tower, PANNs, wav2vec2, ...) and
    any text model (BERT, RoBERTa, XLM-R, a sentence-transformers encoder, ...) can be combined, as
    ``VisionTextDualEncoderModel`` does for images. ``forward`` returns L2-normalised embeddings and scaled
    logits; training losses are computed by the objective that :class:`~hf_atr.AtrTrainer` builds from
    ``config.objective``. Towers are built by :func:`hf_atr.towers.tower_from_config` (``AutoModel``, or
    hf-atr's mapping for towers ``AutoModel`` cannot build, such as CLAP's).

    Starting points: :meth:`from_audio_text_pretrained` (two backbones, new projections),
    :meth:`from_clap` (a whole ``ClapModel`` checkpoint), :meth:`from_pe_audio` (a whole ``PeAudioModel``
    checkpoint), or ``from_pretrained`` (an hf-atr model).

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
            audio_model = encoder_only(tower_from_config(config.audio_config))
        if text_model is None:
            text_model = tower_from_config(config.text_config)
        if config.audio_config.model_type == CLAP_AUDIO_MODEL_TYPE:
            # transformers' CLAP modelling code takes a second to import: loaded for CLAP towers only.
            from .models.clap.window_attention import use_sdpa_window_attention

            use_sdpa_window_attention(audio_model, config.audio_window_attention == "sdpa")
        self.audio_model = audio_model
        self.text_model = text_model
        # The backbones must read the composite config so that edits to it reach them.
        self.config.audio_config = self.audio_model.config
        self.config.text_config = self.text_model.config

        self.audio_projection = tower_projection(config, config.audio_config.hidden_size)
        self.text_projection = tower_projection(config, config.text_config.hidden_size)
        self.scoring_head = scoring_head.AtrScoringHead(
            config.scoring,
            config.projection_dim,
            config.logit_scale_init,
            config.separate_logit_scales,
            scale_form=config.logit_scale_form,
            bias_init=config.logit_bias_init if config.logit_bias else None,
        )
        self.post_init()
        self._freeze_towers()

    def _frozen_towers(self) -> list[PreTrainedModel]:
        return [
            tower
            for tower, frozen in (
                (self.audio_model, self.config.freeze_audio),
                (self.text_model, self.config.freeze_text),
            )
            if frozen
        ]

    def _freeze_towers(self) -> None:
        """Apply ``config.freeze_audio`` / ``freeze_text`` (no gradients, eval mode), and freeze what the config
        never reads (:meth:`unread_modules`)."""
        for tower in self._frozen_towers():
            tower.requires_grad_(False)
            tower.eval()
        for module in self.unread_modules():
            module.requires_grad_(False)

    def unread_modules(self) -> list[nn.Module]:
        """Tower submodules whose output the configured pooling never reads, kept built but frozen.

        A tower's pooler (BERT's, PANNs' ``fc1``, see :func:`hf_atr.towers.pooler_modules`) computes
        ``pooler_output``, which only ``audio_pooling`` / ``text_pooling="pooler"`` reads. Left trainable, its
        parameters would get no gradient, and multi-process training would need DDP's
        ``find_unused_parameters=True`` (an extra traversal of the autograd graph every step). They stay in the
        model, so checkpoints with and without their weights load as before.
        """
        return [
            module
            for tower, pooling in (
                (self.audio_model, self.config.audio_pooling),
                (self.text_model, self.config.text_pooling),
            )
            if pooling != "pooler"
            for module in pooler_modules(tower)
        ]

    def train(self, mode: bool = True) -> AtrDualEncoderModel:
        """``nn.Module.train``, except that frozen towers stay in eval mode (fixed dropout and batch-norm)."""
        super().train(mode)
        for tower in self._frozen_towers():
            tower.eval()
        return self

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """``PreTrainedModel.from_pretrained``, then the configured towers frozen again (loading the weights
        replaces the parameters, and with them ``requires_grad``)."""
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_towers()
        return loaded

    def get_audio_features(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
        is_longer: torch.Tensor | None = None,
        return_backbone_output: bool = False,
        project: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Embed audio: ``(batch, projection_dim)``, L2-normalised (not with ``scoring="dot"``).

        Args:
            input_values / input_features: what the backbone's feature extractor produced (AST and
                wav2vec2 take ``input_values``; Whisper, CLAP and PANNs ``input_features``), in float32: they
                are cast to the audio tower's dtype here, so a model loaded in bfloat16 or float16 takes the
                processor's features as they are (:func:`~hf_atr.model_layers.at_model_dtype`).
            audio_attention_mask: the feature extractor's ``attention_mask`` (``padding_mask`` for PE-Audio), for
                backbones that take one: passed under the name the tower's ``forward`` takes.
            is_longer: CLAP's fusion flag ``(batch, 1)`` (used by fused CLAP checkpoints).
            project: ``False`` returns the tower's pooled embedding ``(batch, hidden_size)`` before the
                projection (not normalised).
        """
        audio_inputs = {
            name: value
            for name, value in (
                ("input_values", at_model_dtype(input_values, self.audio_model)),
                ("input_features", at_model_dtype(input_features, self.audio_model)),
                (audio_mask_argument(self.audio_model), audio_attention_mask),
                ("is_longer", is_longer),
            )
            if value is not None
        }
        if "input_values" not in audio_inputs and "input_features" not in audio_inputs:
            raise ValueError(
                "get_audio_features needs `input_values` or `input_features` from the feature extractor."
            )
        with frozen_context(self.config.freeze_audio):
            backbone_output = self.audio_model(**audio_inputs, return_dict=True)
        embeds = pool_hidden_states(
            backbone_output.last_hidden_state,
            audio_attention_mask,
            self.config.audio_pooling,
            getattr(backbone_output, "pooler_output", None),
        )
        if project:
            embeds = self._normalized(self.audio_projection(embeds))
        return (embeds, backbone_output) if return_backbone_output else embeds

    def get_audio_frame_features(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embed audio frame by frame, as ``PeAudioFrameLevelModel`` does: the audio projection of every frame of
        the tower's ``last_hidden_state`` (L2-normalised, not with ``scoring="dot"``), ``config.audio_frame_rate``
        frames per second from the start of the input.

        Returns:
            ``frame_embeds: (batch, frames, projection_dim)`` and ``frame_mask: (batch, frames)`` bool, ``False``
            for frames of padding (the tower's ``output_mask``; all ``True`` without one).

        Raises:
            ValueError: the model has no frame-level embeddings (``config.audio_frame_rate`` is ``None``).
        """
        if self.config.audio_frame_rate is None:
            raise ValueError(
                "This model has no frame-level audio embeddings (config.audio_frame_rate is None); convert a "
                "PeAudioFrameLevelModel checkpoint with AtrDualEncoderModel.from_pe_audio."
            )
        _, backbone_output = self.get_audio_features(
            input_values, input_features, audio_attention_mask, return_backbone_output=True, project=False
        )
        hidden = backbone_output.last_hidden_state
        frame_mask = getattr(backbone_output, "output_mask", None)
        frame_mask = (
            torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
            if frame_mask is None
            else frame_mask[:, : hidden.shape[1]].bool()
        )
        return self._normalized(self.audio_projection(hidden)), frame_mask

    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_backbone_output: bool = False,
        project: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Embed token ids ``(batch, seq)``: ``(batch, projection_dim)``, L2-normalised (not with ``scoring="dot"``).

        Args:
            project: ``False`` returns the tower's pooled embedding ``(batch, hidden_size)`` before the
                projection (L2-normalised only when ``config.text_pooling_normalize``, as a
                sentence-transformers model with a ``Normalize`` module).
        """
        text_inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            text_inputs["token_type_ids"] = token_type_ids
        with frozen_context(self.config.freeze_text):
            backbone_output = self.text_model(**text_inputs, return_dict=True)
        embeds = pool_hidden_states(
            backbone_output.last_hidden_state,
            attention_mask,
            self.config.text_pooling,
            getattr(backbone_output, "pooler_output", None),
        )
        if self.config.text_pooling_normalize:
            embeds = nn.functional.normalize(embeds, dim=-1)
        if project:
            embeds = self._normalized(self.text_projection(embeds))
        return (embeds, backbone_output) if return_backbone_output else embeds

    def _normalized(self, projected: torch.Tensor) -> torch.Tensor:
        """Projected embeddings as the scoring head scores them: L2-normalised, but for ``"dot"`` scoring."""
        if not self.scoring_head.normalizes_embeddings:
            return projected
        return nn.functional.normalize(projected, dim=-1)

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
            logits_per_audio = self.scoring_head.audio_logits(audio_embeds, text_embeds)
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
        """``PreTrainedModel.save_pretrained`` plus the files written beside the weights (:mod:`hf_atr.model_files`:
        the generated model card, ``README.md``); the weight files get the permissions of any new file
        (safetensors writes them ``0o600``, :mod:`hf_atr.file_permissions`)."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            for weights in Path(save_directory).glob("model*.safetensors"):  # model.safetensors or its shards
                apply_umask(weights)
            write_model_files(self, save_directory)

    def push_to_hub(self, repo_id: str, **upload: Unpack[HubUpload]) -> Any:
        """Upload weights, config, the generated card (and optionally the processor) in one commit.

        ``upload`` takes the options of :class:`~hf_atr.hub.HubUpload`, documented by
        :func:`hf_atr.hub.push_model_files`. A retrieval index goes with the pipeline that built it:
        ``pipe.push_to_hub(repo_id)``.
        """
        return hub.push_model_files(self, repo_id, **hub.push_options(upload))


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "AtrNormedProjection": "hf_atr.model_layers",
    "AtrProjectionMLP": "hf_atr.model_layers",
    "AtrScoringHead": "hf_atr.scoring_head",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "AtrDualEncoderModel",
    "AtrOutput",
    "AtrPreTrainedModel",
]


def register_auto_classes() -> None:
    """Make ``AutoConfig`` / ``AutoModel`` resolve ``model_type="audio-text-retrieval"`` without remote code."""
    register_auto_config()
    AutoModel.register(AtrConfig, AtrDualEncoderModel, exist_ok=True)
