"""Files written beside a model's weights by modules the model does not import, registered by file name.

``AtrDualEncoderModel.save_pretrained`` writes its config and weights, then calls :func:`write_model_files`;
:func:`hf_atr.hub.stage_model_files` calls it again with what it knows of the repository. The model card
(:mod:`hf_atr.model_card`, a floor above the model) registers its writer for :data:`MODEL_CARD_FILE` here, and
the deferred registrations (:mod:`hf_atr.auto_registration`) import the card as soon as the model is imported,
so every saved model gets its card while the model imports none of the card's code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

MODEL_CARD_FILE = "README.md"
"""The model card's file name, as the Hub reads it."""

ModelFileWriter = Callable[..., object]
"""``writer(model, directory, **details)`` writes one file into ``directory``; ``details`` are keyword arguments
the caller passes for that file (the card's repository id, licence, evaluation)."""

_WRITERS: dict[str, ModelFileWriter] = {}


def register_model_file(name: str, writer: ModelFileWriter) -> None:
    """Have ``writer(model, directory, **details)`` write the file ``name`` beside every model saved from now on.

    Registering a name again replaces its writer.

    Raises:
        ValueError: ``name`` is not a plain file name.
        TypeError: ``writer`` is not callable.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"A model file is named by a plain file name such as 'README.md', got {name!r}.")
    if not callable(writer):
        raise TypeError(
            f"The writer of {name!r} must be callable as writer(model, directory), got {writer!r}."
        )
    _WRITERS[name] = writer


def registered_model_files() -> list[str]:
    """Names of the files written beside the weights, in registration order."""
    return list(_WRITERS)


def write_model_files(
    model: Any,
    directory: str | os.PathLike,
    details: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Path]:
    """Write every registered file of ``model`` into ``directory``; returns their paths.

    Args:
        details: keyword arguments for a file's writer, by file name (``{MODEL_CARD_FILE: {"model_id": repo}}``).

    Raises:
        ValueError: ``details`` for a file that no writer is registered for.
    """
    details = details or {}
    unknown = sorted(set(details) - set(_WRITERS))
    if unknown:
        raise ValueError(
            f"No writer is registered for {unknown} (registered: {registered_model_files()}); the module that "
            "writes a file registers it with hf_atr.model_files.register_model_file when it is imported."
        )
    directory = Path(directory)
    for name, writer in _WRITERS.items():
        writer(model, directory, **details.get(name, {}))
    return [directory / name for name in _WRITERS]


__all__ = [
    "MODEL_CARD_FILE",
    "ModelFileWriter",
    "register_model_file",
    "registered_model_files",
    "write_model_files",
]
