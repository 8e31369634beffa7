"""Values of ``hf-atr train`` options that argparse does not type itself: a JSON object (``--loader_options``,
``--objective_args``; a mapping already when read from a YAML/JSON config file) and ``--torch_compile``'s
``auto`` / ``true`` / ``false``."""

from __future__ import annotations

import json
from typing import Any

TORCH_COMPILE_CHOICES = {"auto": None, "true": True, "false": False}
"""``--torch_compile``'s values; ``auto`` (the default, ``None`` until resolved) compiles on CUDA devices only."""


def json_object(value: dict | str | None, option: str) -> dict[str, Any]:
    """``value`` as a dict: a dict (from a YAML/JSON config), a JSON object string (from the command line) or
    ``None`` (empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{option} must be a JSON object, e.g. '{{\"temperature\": 0.05}}': {error}."
            ) from None
    if not isinstance(value, dict):
        raise ValueError(f"{option} must be a JSON object (a mapping of names to values), got {value!r}.")
    return value


def torch_compile_choice(value: str | bool) -> bool | None:
    """``--torch_compile``'s value: ``auto`` → ``None`` (resolved by
    :func:`~hf_atr.commands.train.training_arguments.resolve_torch_compile`), ``true`` /
    ``false`` (any case) → a bool."""
    if isinstance(value, bool):
        return value
    choice = str(value).strip().lower()
    if choice not in TORCH_COMPILE_CHOICES:
        raise ValueError(f"--torch_compile must be one of {list(TORCH_COMPILE_CHOICES)}, got {value!r}.")
    return TORCH_COMPILE_CHOICES[choice]


__all__ = ["TORCH_COMPILE_CHOICES", "json_object", "torch_compile_choice"]
