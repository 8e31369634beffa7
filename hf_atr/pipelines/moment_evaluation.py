"""The old home of the moment evaluator: its names now live in :mod:`hf_atr.evaluation.moment_evaluator`, with the
other evaluators; importing them from here still works and warns with
:class:`~hf_atr.deprecation.HfAtrDeprecationWarning`."""

from __future__ import annotations

from hf_atr.deprecation import moved_names

MOVED_NAMES = {
    "DEFAULT_TIMELINES": "hf_atr.evaluation.moment_evaluator",
    "PREDICTIONS_FILE": "hf_atr.evaluation.moment_evaluator",
    "MomentEvaluation": "hf_atr.evaluation.moment_evaluator",
    "MomentEvaluator": "hf_atr.evaluation.moment_evaluator",
    "TIMELINE_FILE": "hf_atr.evaluation.moment_evaluator",
}
"""Names that moved out of this module -> their home; the old path warns."""
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__: list[str] = []
