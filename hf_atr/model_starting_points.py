"""Where an :class:`~hf_atr.modeling_atr.AtrDualEncoderModel` starts from other checkpoints: two pretrained
backbones, or a whole checkpoint of a family hf-atr converts (``ClapModel``, ``PeAudioModel``, ...).

:class:`AtrStartingPoints` holds the class methods (``from_audio_text_pretrained``, ``from_checkpoint`` and its
named forms ``from_clap``, ``from_pe_audio``); the model inherits them, so they are called on the model class as
before. The checkpoint conversions themselves (weights and config values renamed) live with their families in
:mod:`hf_atr.models`, one row each in :data:`~hf_atr.models.checkpoint_families.CHECKPOINT_FAMILIES`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .configuration_atr import ATR_CONFIG_FIELDS, AtrConfig
from .model_layers import encoder_only
from .models.checkpoint_families import checkpoint_family
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
        return cls._from_family("clap", clap_name_or_path, "from_clap", kwargs)

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
        return cls._from_family("pe_audio", pe_name_or_path, "from_pe_audio", kwargs)

    @classmethod
    def from_checkpoint(cls, family: str, name_or_path: str | os.PathLike, **kwargs: Any) -> Self:
        """Convert a checkpoint of ``family``, a key of :data:`~hf_atr.models.checkpoint_families.CHECKPOINT_FAMILIES`
        (``"clap"``: :meth:`from_clap`, ``"pe_audio"``: :meth:`from_pe_audio`), into an hf-atr model; its towers
        and tensors come from the family module's ``load_model_parts``.

        Keyword arguments that are :class:`AtrConfig` fields go to the config (the fields the checkpoint fixes are
        refused; the family's defaults, e.g. PE-Audio's objective, yield to them); the others to the family's
        ``from_pretrained``. Pair with :meth:`hf_atr.AtrProcessor.from_checkpoint`.

        Raises:
            ValueError: an unknown family, or a field the checkpoint fixes; the family's checkpoint error (a
                ``ValueError``) when a tensor has no place in the hf-atr model.
        """
        return cls._from_family(family, name_or_path, f"from_checkpoint({family!r})", kwargs)

    @classmethod
    def _from_family(
        cls, family: str, name_or_path: str | os.PathLike, method: str, kwargs: dict[str, Any]
    ) -> Self:
        row = checkpoint_family(family)
        config_kwargs = checkpoint_config_kwargs(kwargs, row.fixed_config_fields, method, row.name)
        parts = row.load_model_parts(name_or_path, **kwargs)
        config = AtrConfig(**parts.config, **{**parts.defaults, **config_kwargs})
        model = cls(config=config, audio_model=parts.audio_model, text_model=parts.text_model)
        atr_shapes = {key: tensor.shape for key, tensor in model.state_dict().items()}
        converted = parts.convert(parts.state_dict, atr_shapes, source=str(name_or_path))
        model.load_state_dict(converted, strict=False)
        return model.eval()


__all__ = ["AtrStartingPoints", "checkpoint_config_kwargs"]
