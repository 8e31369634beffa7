"""Which model class builds an audio or text tower from its configuration.

``AutoModel`` knows most backbones, but not every tower a dual encoder uses: in transformers 5,
``AutoModel.from_config(ClapAudioConfig())`` raises, because only the composite ``ClapModel`` is in
``AutoModel``'s mapping. This module keeps hf-atr's own mapping ``model_type → model class``, consulted
before ``AutoModel``:

- built in: CLAP's towers (``clap_audio_model`` → ``ClapAudioModel``, ``clap_text_model`` →
  ``ClapTextModel``), resolved from transformers by name on first use;
- added by :func:`register_tower` (a plain function, so that a deferred registration hook can call it).

Everything else goes to ``AutoModel``.
"""

from __future__ import annotations

import os
from typing import Any

import transformers
from torch import nn
from transformers import AutoModel, PretrainedConfig, PreTrainedModel

BUILTIN_TOWER_CLASS_NAMES = {
    "clap_audio_model": "ClapAudioModel",
    "clap_text_model": "ClapTextModel",
}
"""Towers that ``AutoModel`` cannot build, by ``model_type``: names of transformers classes."""

_CONFIG_LOADING_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder")

_registered_tower_classes: dict[str, type[PreTrainedModel]] = {}


def register_tower(model_type: str, model_class: type[PreTrainedModel]) -> None:
    """Build towers whose config has ``model_type`` with ``model_class`` (``from_config`` / ``from_pretrained``).

    A later registration of the same ``model_type`` replaces the earlier one.
    """
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"model_type must be a non-empty string, got {model_type!r}.")
    if not (isinstance(model_class, type) and issubclass(model_class, PreTrainedModel)):
        raise TypeError(f"model_class must be a PreTrainedModel subclass, got {model_class!r}.")
    _registered_tower_classes[model_type] = model_class


def tower_class(model_type: str) -> type[PreTrainedModel] | None:
    """The class registered (or built in) for ``model_type``, or ``None`` when ``AutoModel`` decides."""
    if model_type in _registered_tower_classes:
        return _registered_tower_classes[model_type]
    if model_type in BUILTIN_TOWER_CLASS_NAMES:
        return getattr(transformers, BUILTIN_TOWER_CLASS_NAMES[model_type])
    return None


def tower_from_config(config: PretrainedConfig) -> PreTrainedModel:
    """A randomly initialised tower for ``config``: the mapped class, else ``AutoModel.from_config``."""
    model_class = tower_class(config.model_type)
    if model_class is not None:
        return model_class(config)
    return AutoModel.from_config(config)


def tower_from_pretrained(name_or_path: str | os.PathLike, **kwargs: Any) -> PreTrainedModel:
    """A pretrained tower: the mapped class's ``from_pretrained`` for its ``model_type``, else ``AutoModel``'s.

    Keyword arguments go to ``from_pretrained`` (``revision``, ``output_loading_info``, ...).
    """
    if "config" not in kwargs:
        config_kwargs = {key: kwargs[key] for key in _CONFIG_LOADING_KWARGS if key in kwargs}
        kwargs["config"] = transformers.AutoConfig.from_pretrained(name_or_path, **config_kwargs)
    model_class = tower_class(kwargs["config"].model_type)
    if model_class is not None:
        return model_class.from_pretrained(name_or_path, **kwargs)
    return AutoModel.from_pretrained(name_or_path, **kwargs)


POOLER_MODULE_NAMES = ("pooler",)
"""Submodules that compute a tower's ``pooler_output`` only, by attribute name (BERT, RoBERTa, XLM-R and CLAP's
text tower call it ``pooler``). A tower class adds its own in a ``pooler_module_names`` class attribute (PANNs:
``fc1``)."""


def pooler_modules(tower: nn.Module) -> list[nn.Module]:
    """The submodules of ``tower`` that feed its ``pooler_output`` and nothing else (see :data:`POOLER_MODULE_NAMES`).

    A dual encoder that pools ``last_hidden_state`` itself never reads them: their parameters get no gradient.
    """
    names = (*POOLER_MODULE_NAMES, *getattr(tower, "pooler_module_names", ()))
    return [module for name in names if isinstance(module := getattr(tower, name, None), nn.Module)]


__all__ = [
    "BUILTIN_TOWER_CLASS_NAMES",
    "POOLER_MODULE_NAMES",
    "pooler_modules",
    "register_tower",
    "tower_class",
    "tower_from_config",
    "tower_from_pretrained",
]
