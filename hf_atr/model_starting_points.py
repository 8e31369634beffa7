"""Where an :class:`~hf_atr.modeling_atr.AtrDualEncoderModel` starts from other checkpoints: two pretrained
backbones, a whole ``ClapModel``, a whole ``PeAudioModel``.

:class:`AtrStartingPoints` holds the class methods (``from_audio_text_pretrained``, ``from_clap``,
``from_pe_audio``); the model inherits them, so they are called on the model class as before. The checkpoint
conversions themselves (weights and config values renamed) live with their families in :mod:`hf_atr.models`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from .configuration_atr import ATR_CONFIG_FIELDS, AtrConfig
from .model_layers import encoder_only
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
from .towers import tower_from_pretrained

if TYPE_CHECKING:
    from typing_extensions import Self


def checkpoint_config_kwargs(
    kwargs: dict[str, Any], fixed_fields: tuple[str, ...], method: str, family: str
) -> dict[str, Any]:
    """Pop the :class:`AtrConfig` fields out of ``kwargs`` (the rest go to ``from_pretrained``), refusing those the
    checkpoint fixes."""
    config_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in ATR_CONFIG_FIELDS}
    fixed = sorted(set(config_kwargs) & set(fixed_fields))
    if fixed:
        raise ValueError(f"{method}: {fixed} are set by the {family} checkpoint and cannot be changed.")
    return config_kwargs


class AtrStartingPoints:
    """The dual encoder's constructors from other checkpoints, inherited by
    :class:`~hf_atr.modeling_atr.AtrDualEncoderModel` (``cls(config=..., audio_model=..., text_model=...)``)."""

    @classmethod
    def from_audio_text_pretrained(
        cls,
        audio_model_name_or_path: str | os.PathLike,
        text_model_name_or_path: str | os.PathLike,
        **kwargs: Any,
    ) -> Self:
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
        audio_model = encoder_only(tower_from_pretrained(audio_model_name_or_path, **audio_kwargs))
        text_model = tower_from_pretrained(text_model_name_or_path, **text_kwargs)
        config = AtrConfig(audio_config=audio_model.config, text_config=text_model.config, **config_kwargs)
        return cls(config=config, audio_model=audio_model, text_model=text_model)

    @classmethod
    def from_clap(cls, clap_name_or_path: str | os.PathLike, **kwargs: Any) -> Self:
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
        config_kwargs = checkpoint_config_kwargs(kwargs, CLAP_FIXED_CONFIG_FIELDS, "from_clap", "CLAP")
        clap = load_clap_checkpoint(clap_name_or_path, **kwargs)
        config = AtrConfig(**atr_config_kwargs_from_clap(clap.config), **config_kwargs)
        model = cls(config=config, audio_model=clap.audio_model, text_model=clap.text_model)
        return model._load_converted(clap.state_dict(), convert_clap_state_dict, str(clap_name_or_path))

    @classmethod
    def from_pe_audio(cls, pe_name_or_path: str | os.PathLike, **kwargs: Any) -> Self:
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
        config_kwargs = checkpoint_config_kwargs(
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

    def _load_converted(self, source_state: dict[str, torch.Tensor], convert: Any, source: str) -> Self:
        """Load a converted checkpoint's tensors (``convert(state, shapes, source)`` names any that do not fit)."""
        atr_shapes = {key: tensor.shape for key, tensor in self.state_dict().items()}
        self.load_state_dict(convert(source_state, atr_shapes, source=source), strict=False)
        return self.eval()


__all__ = ["AtrStartingPoints", "checkpoint_config_kwargs"]
