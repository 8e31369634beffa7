"""A saved hf-atr model as a sentence-transformers 6 folder: ``SentenceTransformer(folder).encode`` of text and audio.

The folder holds the model and its processor as hf-atr saves them, read by sentence-transformers' own ``Transformer``
module (which calls ``get_text_features`` / ``get_audio_features``), and:

- ``config_sentence_transformers.json`` with the similarity of the model's scoring (:data:`SIMILARITY_FUNCTIONS`:
  ``cosine``, ``dot`` for PE-Audio, ``euclidean``, sentence-transformers' ``−‖a − b‖`` as hf-atr's);
- for Mahalanobis scoring a ``Dense`` module that maps both modalities by ``M^{1/2}``
  (:meth:`~hf_atr.scoring_head.AtrScoringHead.transform`), after which the Euclidean distance is the Mahalanobis one;
- ``hf_atr_classes.py`` and an ``auto_map`` in ``config.json`` / ``processor_config.json``, so that
  ``SentenceTransformer(folder, trust_remote_code=True)`` loads it without ``import hf_atr`` (with hf-atr
  installed).

The logit scale and bias are not carried: they do not change any ranking.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ..modeling_atr import AtrDualEncoderModel
from ..processing_atr import AtrProcessor

SIMILARITY_FUNCTIONS = {
    "cosine": "cosine",
    "dot": "dot",
    "euclidean": "euclidean",
    "mahalanobis": "euclidean",
}
"""sentence-transformers' ``similarity_fn_name`` for each hf-atr scoring (Mahalanobis after the ``M^{1/2}`` map)."""

REMOTE_CODE_FILE = "hf_atr_classes.py"
"""The file that ``auto_map`` names: it imports hf-atr's classes (hf-atr must be installed)."""

REMOTE_CODE = '''"""hf-atr's classes, named by this folder's ``auto_map`` for ``trust_remote_code=True`` (needs ``pip install hf-atr``)."""

from hf_atr.configuration_atr import AtrConfig
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.processing_atr import AtrProcessor

__all__ = ["AtrConfig", "AtrDualEncoderModel", "AtrProcessor"]
'''

MODEL_AUTO_MAP = {
    "AutoConfig": "hf_atr_classes.AtrConfig",
    "AutoModel": "hf_atr_classes.AtrDualEncoderModel",
    "AutoProcessor": "hf_atr_classes.AtrProcessor",
}
PROCESSOR_AUTO_MAP = {"AutoProcessor": "hf_atr_classes.AtrProcessor"}


def similarity_function_name(model: AtrDualEncoderModel) -> str:
    """sentence-transformers' ``similarity_fn_name`` that ranks as the model's scoring head does."""
    return SIMILARITY_FUNCTIONS[model.config.scoring]


def metric_square_root(model: AtrDualEncoderModel) -> torch.Tensor | None:
    """``(dim, dim)`` symmetric ``M^{1/2}`` of a Mahalanobis head (embeddings map as ``x @ M^{1/2}``); ``None``
    for the other scorings."""
    if model.config.scoring != "mahalanobis":
        return None
    dim = model.config.projection_dim
    return model.scoring_head.transform(torch.eye(dim, dtype=torch.float32)).detach().clone()


def export_sentence_transformers(
    model: AtrDualEncoderModel, processor: AtrProcessor, out: str | os.PathLike
) -> Path:
    """Write ``model`` and ``processor`` to ``out`` as a sentence-transformers folder (see the module docstring).

    Needs sentence-transformers ≥ 6.2 (``pip install 'hf-atr[sentence-transformers]'``). Load it with
    ``import hf_atr; SentenceTransformer(out)``, or ``SentenceTransformer(out, trust_remote_code=True)``.

    Returns:
        ``out`` as a ``Path``.
    """
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Dense
        from sentence_transformers.base.modules.transformer import Transformer
    except ImportError as error:
        raise ImportError(
            "Exporting to sentence-transformers needs sentence-transformers>=6.2: "
            "pip install 'hf-atr[sentence-transformers]'."
        ) from error
    out = Path(out)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    modules: list[Any] = [Transformer(str(out))]
    square_root = metric_square_root(model)
    if square_root is not None:
        dense = Dense(square_root.shape[0], square_root.shape[0], bias=False, activation_function=None)
        with torch.no_grad():  # nn.Linear computes x Wᵀ; M^{1/2} is symmetric
            dense.linear.weight.copy_(square_root)
        modules.append(dense)
    exported = SentenceTransformer(
        modules=modules, similarity_fn_name=similarity_function_name(model), device="cpu"
    )
    exported.save(str(out))
    _write_remote_code(out)
    return out


def _write_remote_code(out: Path) -> None:
    """``hf_atr_classes.py`` and the ``auto_map`` entries that name it, for ``trust_remote_code=True``."""
    (out / REMOTE_CODE_FILE).write_text(REMOTE_CODE)
    for name, auto_map in (("config.json", MODEL_AUTO_MAP), ("processor_config.json", PROCESSOR_AUTO_MAP)):
        path = out / name
        content = json.loads(path.read_text())
        content["auto_map"] = auto_map
        path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


__all__ = [
    "SIMILARITY_FUNCTIONS",
    "export_sentence_transformers",
    "metric_square_root",
    "similarity_function_name",
]
