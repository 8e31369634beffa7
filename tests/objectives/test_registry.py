from __future__ import annotations

import importlib.metadata

import pytest
import torch

from hf_atr.objectives import registry
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.objectives.registry import (
    Objective,
    ObjectiveOutput,
    available_objectives,
    build_objective,
    objective_parameters,
    register_objective,
)


def test_builtin_objectives_are_registered():
    assert {"contrastive", "triplet"} <= set(available_objectives())


def test_build_from_dict_and_from_config_like_object():
    objective = build_objective({"name": "contrastive", "temperature": 0.05})
    assert isinstance(objective, ContrastiveObjective) and objective.temperature == 0.05

    class ConfigLike:
        objective = {"name": "triplet", "margin": 0.3}

    assert build_objective(ConfigLike()).margin == 0.3


def test_unknown_name_lists_the_registered_objectives():
    with pytest.raises(
        ValueError, match=r"Unknown objective 'ntxent'\. Registered objectives: .*contrastive.*triplet"
    ):
        build_objective({"name": "ntxent"})


def test_unknown_hyperparameter_lists_the_accepted_ones():
    with pytest.raises(
        ValueError, match=r"unknown hyperparameter\(s\) \['temp'\]; it accepts \['temperature'\]"
    ):
        build_objective({"name": "contrastive", "temp": 0.1})


def test_objective_parameters_report_defaults():
    assert objective_parameters("triplet") == {"margin": 0.2, "max_violation": True}


def test_registering_a_second_class_under_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):

        @register_objective("contrastive")
        class Impostor(Objective):
            pass


def test_register_requires_an_objective_subclass():
    with pytest.raises(TypeError, match="must decorate an Objective subclass"):
        register_objective("not-a-module")(dict)


class _ConstantObjective(Objective):
    """A third-party plugin: loss = mean squared distance of the pairs."""

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        return ObjectiveOutput(loss=((audio_embeds - text_embeds) ** 2).sum(-1).mean())


def test_entry_point_plugins_are_discovered(monkeypatch):
    plugin = importlib.metadata.EntryPoint(
        name="pairwise_mse", value=f"{__name__}:_ConstantObjective", group=registry.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(registry, "_entry_points", None)
    monkeypatch.setattr(
        registry, "entry_points", lambda group: [plugin] if group == registry.ENTRY_POINT_GROUP else []
    )
    try:
        assert "pairwise_mse" in available_objectives()
        objective = build_objective({"name": "pairwise_mse"})
        x = torch.zeros(2, 3)
        assert objective(x, x + 1).loss.item() == pytest.approx(3.0)
    finally:
        registry._REGISTRY.pop("pairwise_mse", None)
