"""Training objectives, one family per module, chosen by name through the registry."""

from ..ot import partial_sinkhorn_log_plan, sinkhorn_log_plan, unbalanced_sinkhorn_plan
from . import ask, atri, contrastive, dart, mltm, triplet  # noqa: F401  (registers the built-in objectives)
from .ask import AskObjective
from .atri import CaclObjective, KclObjective, RandomLanguageObjective
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
    "AskObjective",
    "CaclObjective",
    "ContrastiveObjective",
    "KclObjective",
    "RandomLanguageObjective",
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
    "partial_sinkhorn_log_plan",
    "register_objective",
    "sinkhorn_log_plan",
    "unbalanced_sinkhorn_plan",
]
