"""Training objectives, one family per module, chosen by name through the registry."""

from . import contrastive, dart, mltm, triplet  # noqa: F401  (registers the built-in objectives)
from .contrastive import ContrastiveObjective
from .dart import DartObjective, UnbalancedFeatureTransport
from .mltm import InverseOTObjective, PartialInverseOTObjective
from .registry import (
    Objective,
    ObjectiveOutput,
    available_objectives,
    build_objective,
    get_objective_class,
    register_objective,
)
from .triplet import TripletObjective

__all__ = [
    "ContrastiveObjective",
    "DartObjective",
    "InverseOTObjective",
    "Objective",
    "ObjectiveOutput",
    "PartialInverseOTObjective",
    "TripletObjective",
    "UnbalancedFeatureTransport",
    "available_objectives",
    "build_objective",
    "get_objective_class",
    "register_objective",
]
