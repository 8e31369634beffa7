"""Training objectives, one family per module, chosen by name through the registry."""

from . import contrastive, triplet  # noqa: F401  (registers the built-in objectives)
from .registry import (
    Objective,
    ObjectiveOutput,
    available_objectives,
    build_objective,
    get_objective_class,
    register_objective,
)

__all__ = [
    "Objective",
    "ObjectiveOutput",
    "available_objectives",
    "build_objective",
    "get_objective_class",
    "register_objective",
]
