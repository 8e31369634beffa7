"""The objective's state in a checkpoint: written beside the model's weights, restored on resume.

A stateful objective (DART's EMA reliabilities, a queue of past embeddings) keeps buffers or parameters that the
model's weights do not hold. :class:`~hf_atr.AtrTrainer` writes them as :data:`OBJECTIVE_STATE_NAME` in every
checkpoint (:func:`save_objective_state`) and ``train(resume_from_checkpoint=...)`` restores them
(:func:`load_objective_state`).
"""

from __future__ import annotations

import os
from typing import Any

from safetensors.torch import load_file, save_file

from ..file_permissions import apply_umask

OBJECTIVE_STATE_NAME = "objective.safetensors"
"""File holding the objective's buffers/parameters (e.g. DART's EMA reliabilities) inside a checkpoint."""


def save_objective_state(objective: Any, checkpoint_dir: str | os.PathLike) -> None:
    """Write ``objective``'s state dict (on the CPU) as :data:`OBJECTIVE_STATE_NAME` in ``checkpoint_dir``, with
    the process umask's permissions; nothing for a stateless objective."""
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in objective.state_dict().items()}
    if state:
        state_file = os.path.join(checkpoint_dir, OBJECTIVE_STATE_NAME)
        save_file(state, state_file)
        apply_umask(state_file)  # safetensors writes 0o600 (hf_atr.file_permissions)


def load_objective_state(objective: Any, checkpoint_dir: str | os.PathLike, device: Any) -> None:
    """Restore ``objective``'s state from :data:`OBJECTIVE_STATE_NAME` in ``checkpoint_dir`` onto ``device``.

    Raises:
        FileNotFoundError: the checkpoint has no such file and the objective has state to restore.
    """
    state_file = os.path.join(checkpoint_dir, OBJECTIVE_STATE_NAME)
    if os.path.isfile(state_file):
        objective.load_state_dict(load_file(state_file, device=str(device)))
    elif objective.state_dict():
        raise FileNotFoundError(
            f"Checkpoint {checkpoint_dir} has no {OBJECTIVE_STATE_NAME}, but objective "
            f"{objective.name!r} has state {sorted(objective.state_dict())} to restore."
        )


__all__ = ["OBJECTIVE_STATE_NAME", "load_objective_state", "save_objective_state"]
