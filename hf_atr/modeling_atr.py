"""The audio-text dual encoder: two transformers backbones, projections and a scoring head."""

from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import ModelOutput
from transformers.utils import logging

from . import hub
from .configuration_atr import ATR_CONFIG_FIELDS, AtrConfig, register_auto_config
from .file_permissions import apply_umask
from .model_files import write_model_files
from .models.clap.convert_clap_checkpoint import (
    CLAP_FIXED_CONFIG_FIELDS,
    atr_config_kwargs_from_clap,
    convert_clap_state_dict,
    load_clap_checkpoint,
)
from .models.pe_audio.convert_pe_audio_checkpoint import (
    PE_AUDIO_DEFAULT_OBJECTIVE,
    PE_AUDIO_FIXED_CONFIG_FIELDS,
    atr_config_kwargs_from_pe_audio,
    convert_pe_audio_state_dict,
    is_frame_level,
    load_pe_audio_checkpoint,
    pe_audio_frame_rate,
)
from .models.sentence_transformer.sentence_transformer_layout import read_sentence_transformer
from .scoring_head import AtrScoringHead, stored_logit_scale
from .towers import pooler_modules, tower_from_config, tower_from_pretrained

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
        if isinstance(module, AtrScoringHead):
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


def _encoder_only(model: PreTrainedModel) -> PreTrainedModel:
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


def _projection(config: AtrConfig, in_dim: int) -> nn.Module:
    """A tower's projection to ``config.projection_dim``: bias-free linear, or CLAP's two-layer head; behind a
    LayerNorm with ``projection_layer_norm`` (PE-Audio)."""
    if config.projection == "mlp":
        projection = AtrProjectionMLP(in_dim, config.projection_dim, config.projection_hidden_act)
    else:
        projection = nn.Linear(in_dim, config.projection_dim, bias=False)
    return AtrNormedProjection(in_dim, projection) if config.projection_layer_norm else projection


def _pool(
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


def _checkpoint_config_kwargs(
    kwargs: dict[str, Any], fixed_fields: tuple[str, ...], method: str, family: str
) -> dict[str, Any]:
    """Pop the :class:`AtrConfig` fields out of ``kwargs`` (the rest go to ``from_pretrained``), refusing those the
    checkpoint fixes."""
    config_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in ATR_CONFIG_FIELDS}
    fixed = sorted(set(config_kwargs) & set(fixed_fields))
    if fixed:
        raise ValueError(f"{method}: {fixed} are set by the {family} checkpoint and cannot be changed.")
    return config_kwargs


def _audio_mask_argument(audio_model: nn.Module) -> str:
    """The name under which ``audio_model.forward`` takes the audio mask: ``attention_mask``, or ``padding_mask``
    for towers that take only that (PE-Audio's encoder raises a ``TypeError`` on ``attention_mask``)."""
    parameters = inspect.signature(audio_model.forward).parameters
    return (
        "padding_mask"
        if "padding_mask" in parameters and "attention_mask" not in parameters
        else "attention_mask"
    )


def _frozen_context(frozen: bool) -> contextlib.AbstractContextManager:
    """No autograd through a frozen tower (nothing to store for a backward pass that never reaches it)."""
    return torch.no_grad() if frozen else contextlib.nullcontext()


class AtrDualEncoderModel(AtrPreTrainedModel):
    """Audio backbone + text backbone + projections + :class:`AtrScoringHead`.

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
            audio_model = _encoder_only(tower_from_config(config.audio_config))
        if text_model is None:
            text_model = tower_from_config(config.text_config)
        self.audio_model = audio_model
        self.text_model = text_model
        # The backbones must read the composite config so that edits to it reach them.
        self.config.audio_config = self.audio_model.config
        self.config.text_config = self.text_model.config

        self.audio_projection = _projection(config, config.audio_config.hidden_size)
        self.text_projection = _projection(config, config.text_config.hidden_size)
        self.scoring_head = AtrScoringHead(
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
                wav2vec2 take ``input_values``; Whisper, CLAP and PANNs ``input_features``).
            audio_attention_mask: the feature extractor's ``attention_mask`` (``padding_mask`` for PE-Audio), for
                backbones that take one: passed under the name the tower's ``forward`` takes.
            is_longer: CLAP's fusion flag ``(batch, 1)`` (used by fused CLAP checkpoints).
            project: ``False`` returns the tower's pooled embedding ``(batch, hidden_size)`` before the
                projection (not normalised).
        """
        audio_inputs = {
            name: value
            for name, value in (
                ("input_values", input_values),
                ("input_features", input_features),
                (_audio_mask_argument(self.audio_model), audio_attention_mask),
                ("is_longer", is_longer),
            )
            if value is not None
        }
        if "input_values" not in audio_inputs and "input_features" not in audio_inputs:
            raise ValueError(
                "get_audio_features needs `input_values` or `input_features` from the feature extractor."
            )
        with _frozen_context(self.config.freeze_audio):
            backbone_output = self.audio_model(**audio_inputs, return_dict=True)
        embeds = _pool(
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
        with _frozen_context(self.config.freeze_text):
            backbone_output = self.text_model(**text_inputs, return_dict=True)
        embeds = _pool(
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

        ``upload`` takes the options of :func:`hf_atr.hub.push_to_hub` (:class:`~hf_atr.hub.HubUpload`). A
        retrieval index goes with the pipeline that built it: ``pipe.push_to_hub(repo_id)``.
        """
        return hub.push_to_hub(self, repo_id, **upload)

    @classmethod
    def from_audio_text_pretrained(
        cls,
        audio_model_name_or_path: str | os.PathLike,
        text_model_name_or_path: str | os.PathLike,
        **kwargs: Any,
    ) -> AtrDualEncoderModel:
        """Combine two pretrained backbones; projections and scoring head start random.

        ``text_model_name_or_path`` may be a sentence-transformers directory (with ``modules.json``): its
        transformer becomes the text tower and its ``Pooling`` (mean / cls / max) and ``Normalize`` modules
        set ``text_pooling`` / ``text_pooling_normalize``, so ``get_text_features(..., project=False)`` is the
        sentence-transformers embedding. Other module types are refused
        (:class:`~hf_atr.models.sentence_transformer.SentenceTransformerFormatError`).

        Keyword arguments that are :class:`AtrConfig` fields (``projection_dim``, ``scoring``, ``objective``,
        ``audio_pooling``, ``freeze_text``, ...) go to the config; others prefixed ``audio_`` / ``text_`` to the
        backbones' ``from_pretrained`` (e.g. ``audio_revision="main"``); the rest to the config.
        """
        config_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in ATR_CONFIG_FIELDS}
        audio_kwargs = {
            key[len("audio_") :]: kwargs.pop(key) for key in list(kwargs) if key.startswith("audio_")
        }
        text_kwargs = {
            key[len("text_") :]: kwargs.pop(key) for key in list(kwargs) if key.startswith("text_")
        }
        config_kwargs.update(kwargs)  # PreTrainedConfig's own options (AtrConfig names anything unknown)
        layout = read_sentence_transformer(text_model_name_or_path)
        if layout is not None:
            for field, value in (
                ("text_pooling", layout.pooling),
                ("text_pooling_normalize", layout.normalize),
            ):
                if config_kwargs.get(field, value) != value:
                    raise ValueError(
                        f"{text_model_name_or_path} is a sentence-transformers model with {field}={value!r}; "
                        f"got {field}={config_kwargs[field]!r}."
                    )
                config_kwargs[field] = value
            if layout.transformer_subfolder:
                text_kwargs.setdefault("subfolder", layout.transformer_subfolder)
        audio_model = _encoder_only(tower_from_pretrained(audio_model_name_or_path, **audio_kwargs))
        text_model = tower_from_pretrained(text_model_name_or_path, **text_kwargs)
        config = AtrConfig(audio_config=audio_model.config, text_config=text_model.config, **config_kwargs)
        return cls(config=config, audio_model=audio_model, text_model=text_model)

    @classmethod
    def from_clap(cls, clap_name_or_path: str | os.PathLike, **kwargs: Any) -> AtrDualEncoderModel:
        """Convert a transformers ``ClapModel`` checkpoint (``laion/clap-htsat-unfused``, ``-fused``,
        ``laion/larger_clap_*``) into an hf-atr model with identical features.

        The HTS-AT audio tower and RoBERTa text tower keep their pooling (``pooler_output``), the two-layer
        projection heads become ``projection="mlp"``, ``logit_scale_t`` / ``logit_scale_a`` the scoring head's
        two scales (``separate_logit_scales``). ``get_audio_features`` / ``get_text_features`` then equal
        ``ClapModel``'s, and ``logits_per_audio`` its zero-shot scores.

        Keyword arguments that are :class:`AtrConfig` fields go to the config (``objective``, ``scoring``,
        ``freeze_audio``, ...; the fields the checkpoint fixes, e.g. ``projection_dim``, are refused); the
        others to ``ClapModel.from_pretrained`` (``revision``, ``cache_dir``, ...).

        Raises:
            ClapCheckpointError: the checkpoint lacks weights, has unexpected or mismatched ones, or a tensor
                has no place in the hf-atr model (the keys are named).
        """
        config_kwargs = _checkpoint_config_kwargs(kwargs, CLAP_FIXED_CONFIG_FIELDS, "from_clap", "CLAP")
        clap = load_clap_checkpoint(clap_name_or_path, **kwargs)
        config = AtrConfig(**atr_config_kwargs_from_clap(clap.config), **config_kwargs)
        model = cls(config=config, audio_model=clap.audio_model, text_model=clap.text_model)
        return model._load_converted(clap.state_dict(), convert_clap_state_dict, str(clap_name_or_path))

    @classmethod
    def from_pe_audio(cls, pe_name_or_path: str | os.PathLike, **kwargs: Any) -> AtrDualEncoderModel:
        """Convert a transformers ``PeAudioModel`` checkpoint (Perception Encoder audio-text: ``facebook/pe-av-small``,
        ``-base``, ``-large``) into an hf-atr model with identical embeddings and logits.

        The ``PeAudioEncoder`` audio tower (its class token: ``audio_pooling="pooler"``) and ModernBERT text tower
        (first token: ``text_pooling="cls"``) keep their weights, PE's contrastive heads (LayerNorm → bias-free
        linear) become ``projection_layer_norm=True`` linear projections, and its raw ``text_audio_logit_scale`` and
        ``text_audio_logit_bias`` the scoring head's (``scoring="dot"``: embeddings not normalised,
        ``logit_scale_form="raw"``, ``logit_bias=True``). ``logits_per_audio`` then equal ``PeAudioModel``'s
        ``logits_audio_text``. The objective defaults to ``sigmoid`` (PE-Audio's), starting from the checkpoint's
        scale and bias. Pair with :meth:`hf_atr.AtrProcessor.from_pe_audio`: the audio tower reads raw 48-kHz
        waveforms with their ``padding_mask``. A checkpoint saved as a ``PeAudioFrameLevelModel`` (same weights)
        also embeds audio frame by frame (:meth:`get_audio_frame_features`, ``config.audio_frame_rate`` 25 frames/s
        read from its extractor).

        Keyword arguments that are :class:`AtrConfig` fields go to the config (``objective``, ``freeze_audio``,
        ...; the fields the checkpoint fixes are refused); the others to ``PeAudioModel.from_pretrained``.

        Raises:
            PeAudioCheckpointError: the checkpoint lacks weights, has unexpected or mismatched ones, or a tensor has
                no place in the hf-atr model (the keys are named).
        """
        config_kwargs = _checkpoint_config_kwargs(
            kwargs, PE_AUDIO_FIXED_CONFIG_FIELDS, "from_pe_audio", "PE-Audio"
        )
        config_kwargs.setdefault("objective", dict(PE_AUDIO_DEFAULT_OBJECTIVE))
        pe_model = load_pe_audio_checkpoint(pe_name_or_path, **kwargs)
        if is_frame_level(pe_model.config):
            config_kwargs.setdefault(
                "audio_frame_rate", pe_audio_frame_rate(pe_name_or_path, pe_model.config)
            )
        config = AtrConfig(**atr_config_kwargs_from_pe_audio(pe_model.config), **config_kwargs)
        model = cls(config=config, audio_model=pe_model.audio_encoder, text_model=pe_model.text_model)
        return model._load_converted(pe_model.state_dict(), convert_pe_audio_state_dict, str(pe_name_or_path))

    def _load_converted(
        self, source_state: dict[str, torch.Tensor], convert: Any, source: str
    ) -> AtrDualEncoderModel:
        """Load a converted checkpoint's tensors (``convert(state, shapes, source)`` names any that do not fit)."""
        atr_shapes = {key: tensor.shape for key, tensor in self.state_dict().items()}
        self.load_state_dict(convert(source_state, atr_shapes, source=source), strict=False)
        return self.eval()


__all__ = [
    "AtrDualEncoderModel",
    "AtrNormedProjection",
    "AtrOutput",
    "AtrPreTrainedModel",
    "AtrProjectionMLP",
    "AtrScoringHead",
]


def register_auto_classes() -> None:
    """Make ``AutoConfig`` / ``AutoModel`` resolve ``model_type="audio-text-retrieval"`` without remote code."""
    register_auto_config()
    AutoModel.register(AtrConfig, AtrDualEncoderModel, exist_ok=True)
