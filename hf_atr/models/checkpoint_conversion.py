"""What every checkpoint conversion into an hf-atr dual encoder shares (CLAP, PE-Audio): refusing a checkpoint that
``from_pretrained`` loaded incompletely, renaming its tensors with every key accounted for, and the parts a
converted checkpoint hands the dual encoder (:class:`ConvertedCheckpoint`).

transformers 5 only warns about missing, unexpected or mismatched weights (and fills missing ones with random
values); a conversion must instead name them and stop. This module knows no hf-atr model: the converters pass
their own key mapping, error class and names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

DERIVED_BUFFER_SUFFIXES = ("position_ids", "token_type_ids", "relative_position_index", "num_batches_tracked")
"""Buffers computed from the config alone (index tables, a batch-norm step counter): a checkpoint may lack
them without losing anything, and ``_init_weights`` sets them."""


@dataclass(frozen=True)
class ConvertedCheckpoint:
    """A checkpoint read into the parts of an hf-atr dual encoder (a family module's ``load_model_parts``,
    :mod:`hf_atr.models.checkpoint_families`).

    Attributes:
        config: the ``AtrConfig`` fields the checkpoint determines (its towers' configs, projections, scoring).
        audio_model, text_model: the checkpoint's towers, weights loaded.
        state_dict: the checkpoint's own tensors, under its keys.
        convert: ``convert(state_dict, atr_shapes, source=...)``: the tensors under their hf-atr keys
            (:func:`convert_state_dict` with the family's mapping), raising on any without a place.
        defaults: ``AtrConfig`` fields the checkpoint suggests and a caller may override (PE-Audio: its sigmoid
            objective).
    """

    config: dict[str, Any]
    audio_model: torch.nn.Module
    text_model: torch.nn.Module
    state_dict: Mapping[str, torch.Tensor]
    convert: Callable[..., dict[str, torch.Tensor]]
    defaults: dict[str, Any] = field(default_factory=dict)


def is_derived_buffer(key: str) -> bool:
    """Whether ``key`` names a buffer of :data:`DERIVED_BUFFER_SUFFIXES`."""
    return key.rsplit(".", 1)[-1] in DERIVED_BUFFER_SUFFIXES


def describe_mismatch(item: Any) -> str:
    """``"key (checkpoint (a, b) vs model (c, d))"`` from transformers' ``(key, checkpoint shape, model shape)``."""
    if isinstance(item, tuple) and len(item) == 3:
        key, checkpoint_shape, model_shape = item
        return f"{key} (checkpoint {tuple(checkpoint_shape)} vs model {tuple(model_shape)})"
    return str(item)


def check_loading_info(
    loading_info: Mapping[str, Iterable[Any]],
    source: str,
    model_name: str,
    error_class: type[ValueError],
) -> None:
    """Raise ``error_class`` unless ``from_pretrained`` found every weight of a ``model_name`` checkpoint.

    Args:
        loading_info: the second value of ``from_pretrained(..., output_loading_info=True)``.
        source: the checkpoint's name, for the message.
        model_name: the transformers class, for the message (``"ClapModel"``).

    Buffers of :data:`DERIVED_BUFFER_SUFFIXES` missing from the file are logged, not refused.
    """
    missing = sorted(loading_info.get("missing_keys", ()))
    derived = [key for key in missing if is_derived_buffer(key)]
    if derived:
        logger.warning(f"{source} lacks the derived buffers {derived}; they are computed from the config.")
    problems = [
        f"{label}: {', '.join(str(item) for item in items)}"
        for label, items in (
            ("missing keys", [key for key in missing if not is_derived_buffer(key)]),
            ("unexpected keys", sorted(loading_info.get("unexpected_keys", ()))),
            (
                "mismatched keys",
                sorted(describe_mismatch(item) for item in loading_info.get("mismatched_keys", ())),
            ),
            ("errors", list(loading_info.get("error_msgs", ()))),
        )
        if items
    ]
    if problems:
        raise error_class(
            f"{source} is not a complete {model_name} checkpoint for its config: " + "; ".join(problems) + "."
        )


def renamed_key(key: str, exact: Mapping[str, str], prefixes: Mapping[str, str]) -> str | None:
    """The hf-atr key of a checkpoint's ``key``: ``exact[key]``, else ``key`` with the first of ``prefixes`` it starts
    with replaced by that prefix's value; ``None`` when it has no place."""
    if key in exact:
        return exact[key]
    for source_prefix, atr_prefix in prefixes.items():
        if key.startswith(source_prefix):
            return atr_prefix + key[len(source_prefix) :]
    return None


def convert_state_dict(
    source_state: Mapping[str, torch.Tensor],
    atr_shapes: Mapping[str, torch.Size | tuple[int, ...]],
    to_atr_key: Callable[[str], str | None],
    *,
    family: str,
    fresh_keys: Iterable[str],
    source: str,
    error_class: type[ValueError],
) -> dict[str, torch.Tensor]:
    """The tensors of ``source_state`` under their hf-atr keys, every key accounted for.

    Args:
        source_state: the converted checkpoint's ``state_dict()``.
        atr_shapes: ``{key: shape}`` of the hf-atr model's state dict.
        to_atr_key: the hf-atr key of a checkpoint key, or ``None`` when it has no place.
        family: the checkpoint family in messages (``"CLAP"``).
        fresh_keys: hf-atr keys no checkpoint tensor fills, which keep their initial values.

    Raises:
        error_class: naming checkpoint keys without a place, hf-atr keys nothing fills (other than
            ``fresh_keys``), and shape mismatches.
    """
    converted, without_place, mismatched = {}, [], []
    for source_key, tensor in source_state.items():
        atr_key = to_atr_key(source_key)
        if atr_key is None or atr_key not in atr_shapes:
            without_place.append(source_key if atr_key is None else f"{source_key} (→ {atr_key})")
        elif tuple(tensor.shape) != tuple(atr_shapes[atr_key]):
            mismatched.append(
                f"{source_key} ({tuple(tensor.shape)} vs {atr_key} {tuple(atr_shapes[atr_key])})"
            )
        else:
            converted[atr_key] = tensor
    unfilled = sorted(
        set(atr_shapes) - set(converted) - set(fresh_keys) - {to_atr_key(key) for key in source_state}
    )
    problems = [
        f"{label}: {', '.join(items)}"
        for label, items in (
            (f"{family} tensors without a place in the hf-atr model", sorted(without_place)),
            ("shape mismatches", mismatched),
            (f"hf-atr tensors no {family} tensor fills", unfilled),
        )
        if items
    ]
    if problems:
        raise error_class(f"Cannot convert {source}: " + "; ".join(problems) + ".")
    return converted


__all__ = [
    "DERIVED_BUFFER_SUFFIXES",
    "ConvertedCheckpoint",
    "check_loading_info",
    "convert_state_dict",
    "describe_mismatch",
    "is_derived_buffer",
    "renamed_key",
]
