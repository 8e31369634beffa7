"""Training objectives, one family per module, chosen by name through the registry.

The registry (names, the :class:`Objective` base class, :func:`build_objective`) is imported with this
package; each objective class and the re-exported OT solvers are imported when first used.
"""

from ..lazy import lazy_attributes
from .registry import (
    Objective,
    ObjectiveOutput,
    available_objectives,
    build_objective,
    default_scoring,
    get_objective_class,
    register_objective,
)

_LAZY_NAMES = {
    "AskObjective": ".ask",
    "CaclObjective": ".atri",
    "KclObjective": ".atri",
    "RandomLanguageObjective": ".atri",
    "ContrastiveObjective": ".contrastive",
    "DartObjective": ".dart",
    "UnbalancedFeatureTransport": ".dart",
    "InverseOTObjective": ".mltm",
    "PartialInverseOTObjective": ".mltm",
    "SigmoidObjective": ".sigmoid",
    "TripletObjective": ".triplet",
    "partial_sinkhorn_log_plan": "..ot.partial",
    "sinkhorn_log_plan": "..ot.balanced",
    "unbalanced_sinkhorn_plan": "..ot.unbalanced",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY_NAMES)

__all__ = [
    "Objective",
    "ObjectiveOutput",
    "available_objectives",
    "build_objective",
    "default_scoring",
    "get_objective_class",
    "register_objective",
    *_LAZY_NAMES,
]
