"""The old home of the moment evaluator: its names now live in :mod:`hf_atr.evaluation.moment_evaluator`, with the
other evaluators; importing them from here still works and warns with
:class:`~hf_atr.deprecation.HfAtrDeprecationWarning`."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from hf_atr.deprecation import HfAtrDeprecationWarning

NEW_HOME = "hf_atr.evaluation.moment_evaluator"
MOVED_NAMES = (
    "DEFAULT_TIMELINES",
    "PREDICTIONS_FILE",
    "MomentEvaluation",
    "MomentEvaluator",
    "TIMELINE_FILE",
)
"""Names that moved to :data:`NEW_HOME`."""


def __getattr__(name: str) -> Any:
    """A name of :data:`MOVED_NAMES` from :data:`NEW_HOME`, after a :class:`HfAtrDeprecationWarning`."""
    if name not in MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"`{__name__}.{name}` moved to `{NEW_HOME}.{name}`; import it from there (the old path is deprecated and "
        "will be removed in a future version).",
        HfAtrDeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(NEW_HOME), name)
