"""The checkpoint families hf-atr converts into dual encoders, one row each: what
:meth:`AtrDualEncoderModel.from_checkpoint <hf_atr.model_starting_points.AtrStartingPoints.from_checkpoint>`,
:meth:`AtrProcessor.from_checkpoint <hf_atr.processing_atr.AtrProcessor.from_checkpoint>` and ``hf-atr train``
read.

A family is a folder, ``hf_atr/models/<family>/``, whose family module (the row's ``module``) defines

- ``FIXED_CONFIG_FIELDS``: the :class:`~hf_atr.configuration_atr.AtrConfig` fields a checkpoint determines (the
  constructors refuse other values for them before loading anything);
- ``load_model_parts(name_or_path, **kwargs)``: the checkpoint read into a
  :class:`~hf_atr.models.checkpoint_conversion.ConvertedCheckpoint` (towers, config fields, tensors and their
  renaming);
- ``load_processor_parts(name_or_path, **kwargs)``: its ``(feature_extractor, tokenizer)``.

The module is imported at first use, so this table stays light (``hf-atr train --help`` reads it) and names no
floor above its own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checkpoint_conversion import ConvertedCheckpoint

FAMILY_MODULE_NAMES = ("FIXED_CONFIG_FIELDS", "load_model_parts", "load_processor_parts")
"""What a family module defines (see the module docstring)."""


@dataclass(frozen=True)
class CheckpointFamily:
    """One row of :data:`CHECKPOINT_FAMILIES`.

    Attributes:
        name: the family in messages and in the starting point's description (``"CLAP"``).
        argument: ``hf-atr train``'s starting-point argument for such a checkpoint (``"clap_model"``:
            ``--clap_model``).
        module: the family module's import path (see the module docstring).
        description: what the argument takes, for its ``--help``.
    """

    name: str
    argument: str
    module: str
    description: str

    def family_module(self) -> ModuleType:
        """The family module, imported.

        Raises:
            TypeError: the module lacks a name of :data:`FAMILY_MODULE_NAMES`.
        """
        module = importlib.import_module(self.module)
        missing = [name for name in FAMILY_MODULE_NAMES if not hasattr(module, name)]
        if missing:
            raise TypeError(f"{self.module}, the family module of {self.name} checkpoints, lacks {missing}.")
        return module

    @property
    def fixed_config_fields(self) -> tuple[str, ...]:
        return tuple(self.family_module().FIXED_CONFIG_FIELDS)

    def load_model_parts(self, name_or_path: Any, **kwargs: Any) -> ConvertedCheckpoint:
        return self.family_module().load_model_parts(name_or_path, **kwargs)

    def load_processor_parts(self, name_or_path: Any, **kwargs: Any) -> tuple[Any, Any]:
        return self.family_module().load_processor_parts(name_or_path, **kwargs)


CHECKPOINT_FAMILIES: dict[str, CheckpointFamily] = {
    "clap": CheckpointFamily(
        "CLAP",
        "clap_model",
        "hf_atr.models.clap.clap_family",
        "a transformers ClapModel checkpoint with its ClapProcessor (e.g. a local copy of laion/clap-htsat-unfused)",
    ),
    "pe_audio": CheckpointFamily(
        "PE-Audio",
        "pe_audio_model",
        "hf_atr.models.pe_audio.pe_audio_family",
        "a transformers PeAudioModel checkpoint with its PeAudioProcessor (e.g. a local copy of facebook/pe-av-small), "
        "trained with its objective, sigmoid, unless --objective is given",
    ),
}
"""The families by key (``AtrDualEncoderModel.from_checkpoint("clap", ...)``); a new family adds its row."""


def checkpoint_family(key: str) -> CheckpointFamily:
    """The row of ``key`` in :data:`CHECKPOINT_FAMILIES`.

    Raises:
        ValueError: no such family (the known ones are named).
    """
    if key not in CHECKPOINT_FAMILIES:
        raise ValueError(f"Unknown checkpoint family {key!r}; known: {sorted(CHECKPOINT_FAMILIES)}.")
    return CHECKPOINT_FAMILIES[key]


__all__ = ["CHECKPOINT_FAMILIES", "FAMILY_MODULE_NAMES", "CheckpointFamily", "checkpoint_family"]
