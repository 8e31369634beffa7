"""Read a sentence-transformers model directory: where its transformer is, how it pools and normalises.

A sentence-transformers directory lists its modules in ``modules.json``; the usual text encoder is
``Transformer`` → ``Pooling`` → optional ``Normalize`` (all-MiniLM-L6-v2, all-mpnet-base-v2, ...). The
transformer's weights are a plain transformers model (in the directory itself or a sub-folder such as
``0_Transformer``), so hf-atr loads them with transformers and reproduces the pooling and normalisation in
:class:`~hf_atr.AtrDualEncoderModel` (``text_pooling``, ``text_pooling_normalize``). Nothing here imports
sentence-transformers: the files are JSON.

Module types are recognised by class name under both naming schemes (``sentence_transformers.models.Pooling``
before v5.4, ``sentence_transformers.sentence_transformer.modules.pooling.Pooling`` after). Any other module
(``Dense``, ``LayerNorm``, ``Router``, ``StaticEmbedding``, a custom module, ...) and pooling modes other than
mean / cls / max (or several combined) raise :class:`SentenceTransformerFormatError`: hf-atr would otherwise
compute a different embedding than the model's authors.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from transformers.utils import cached_file

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
POOLING_CONFIG_FILE = "config.json"
SUPPORTED_POOLING_MODES = ("mean", "cls", "max")
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
"""``1_Pooling/config.json`` boolean keys of sentence-transformers < 5.4 → the mode each turns on."""


class SentenceTransformerFormatError(ValueError):
    """A sentence-transformers directory whose modules hf-atr cannot reproduce exactly."""


@dataclass(frozen=True)
class SentenceTransformerLayout:
    """What hf-atr needs from a sentence-transformers directory.

    Args:
        name_or_path: the directory (or Hub id) read.
        transformer_subfolder: where the transformers model is inside it (``""`` for the directory itself).
        pooling: ``"mean"``, ``"cls"`` or ``"max"`` (:data:`~hf_atr.configuration_atr.POOLING_KINDS`).
        normalize: whether a ``Normalize`` module follows the pooling.
        max_seq_length: the ``Transformer`` module's token limit (``None`` when it does not set one).
    """

    name_or_path: str
    transformer_subfolder: str
    pooling: str
    normalize: bool
    max_seq_length: int | None


def _module_kind(module_type: str) -> str:
    """``"Transformer"``, ``"Pooling"``, ... from either naming scheme's ``type`` string."""
    return module_type.rsplit(".", 1)[-1]


def _read_json(name_or_path: str, filename: str, subfolder: str = "") -> Any:
    """A JSON file of the directory, or ``None`` when it has none."""
    path = cached_file(
        name_or_path,
        filename,
        subfolder=subfolder,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise SentenceTransformerFormatError(f"{path} is not valid JSON: {error}.") from error


def pooling_mode(pooling_config: dict[str, Any], source: str) -> str:
    """The single pooling mode of a ``Pooling`` module's config (new ``pooling_mode`` or legacy boolean keys).

    Raises:
        SentenceTransformerFormatError: no mode, several modes, or a mode other than mean / cls / max.
    """
    if "pooling_mode" in pooling_config:
        modes = pooling_config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [mode for key, mode in LEGACY_POOLING_KEYS.items() if pooling_config.get(key)]
    if len(modes) != 1:
        raise SentenceTransformerFormatError(
            f"{source}: pooling modes {modes} — hf-atr reproduces exactly one of {SUPPORTED_POOLING_MODES}."
        )
    if modes[0] not in SUPPORTED_POOLING_MODES:
        raise SentenceTransformerFormatError(
            f"{source}: pooling mode {modes[0]!r} is not supported; hf-atr reproduces {SUPPORTED_POOLING_MODES}."
        )
    return modes[0]


def read_sentence_transformer(name_or_path: str | os.PathLike) -> SentenceTransformerLayout | None:
    """The layout of a sentence-transformers model, or ``None`` when ``name_or_path`` has no ``modules.json``.

    Raises:
        SentenceTransformerFormatError: naming the file and the module type or setting hf-atr cannot reproduce.
    """
    name_or_path = str(name_or_path)
    modules = _read_json(name_or_path, MODULES_FILE)
    if modules is None:
        return None
    source = os.path.join(name_or_path, MODULES_FILE)
    if not isinstance(modules, list) or not all(
        isinstance(module, dict) and "type" in module for module in modules
    ):
        raise SentenceTransformerFormatError(f"{source} must be a list of modules with a 'type' each.")
    kinds = [_module_kind(module["type"]) for module in modules]
    supported = (
        kinds[:1] == ["Transformer"] and kinds[1:2] == ["Pooling"] and kinds[2:] in ([], ["Normalize"])
    )
    if not supported or not all(module["type"].startswith("sentence_transformers.") for module in modules):
        raise SentenceTransformerFormatError(
            f"{source} lists modules {[module['type'] for module in modules]}; hf-atr supports "
            "Transformer → Pooling → optional Normalize (no Dense, LayerNorm, Router or custom modules)."
        )
    transformer_subfolder = modules[0].get("path", "")
    transformer_config = _read_json(name_or_path, TRANSFORMER_CONFIG_FILE, transformer_subfolder) or {}
    if transformer_config.get("do_lower_case"):
        raise SentenceTransformerFormatError(
            f"{os.path.join(name_or_path, transformer_subfolder, TRANSFORMER_CONFIG_FILE)} sets do_lower_case: "
            "sentence-transformers lower-cases text before its tokenizer, which hf-atr's processor does not."
        )
    pooling_subfolder = modules[1].get("path", "")
    pooling_config = _read_json(name_or_path, POOLING_CONFIG_FILE, pooling_subfolder)
    pooling_source = os.path.join(name_or_path, pooling_subfolder, POOLING_CONFIG_FILE)
    if not isinstance(pooling_config, dict):
        raise SentenceTransformerFormatError(f"{pooling_source} is missing or not a JSON object.")
    return SentenceTransformerLayout(
        name_or_path=name_or_path,
        transformer_subfolder=transformer_subfolder,
        pooling=pooling_mode(pooling_config, pooling_source),
        normalize=kinds[2:] == ["Normalize"],
        max_seq_length=transformer_config.get("max_seq_length"),
    )


__all__ = [
    "SentenceTransformerFormatError",
    "SentenceTransformerLayout",
    "pooling_mode",
    "read_sentence_transformer",
]
