"""What the solver families share: the stabilised kernel and its absorption path, argument checks."""

from __future__ import annotations

import pytest
import torch
from ot_problems import random_problem

from hf_atr.objectives import build_objective
from hf_atr.ot import (
    balanced,
    partial,
    partial_sinkhorn_log_plan,
    sinkhorn_log_plan,
    unbalanced,
    unbalanced_sinkhorn_plan,
)
from hf_atr.ot.utils import check_positive, check_solver_options, stabilised_kernel


def test_absorption_path_reaches_the_same_plans(monkeypatch):
    """Absorbing the scalings into the potentials (rare at the real threshold) changes no solution."""
    cost, a, b = random_problem(seed=13)
    reference = {
        "balanced": sinkhorn_log_plan(cost, 0.02, a, b, tol=1e-11, max_iter=20000, grad_mode="none"),
        "partial": partial_sinkhorn_log_plan(
            cost, 0.05, 0.7, a, b, tol=1e-11, max_iter=20000, grad_mode="none"
        ),
        "unbalanced": unbalanced_sinkhorn_plan(cost, 0.02, 0.1, a, b, tol=1e-12, max_iter=20000).log(),
    }
    rebuilds = 0

    def counting_kernel(*args):
        nonlocal rebuilds
        rebuilds += 1
        return stabilised_kernel(*args)

    for family in (balanced, partial, unbalanced):
        monkeypatch.setattr(family, "ABSORB_LOG_SCALING", 1e-3)
        monkeypatch.setattr(family, "stabilised_kernel", counting_kernel)
    absorbed = {
        "balanced": sinkhorn_log_plan(cost, 0.02, a, b, tol=1e-11, max_iter=20000, grad_mode="none"),
        "partial": partial_sinkhorn_log_plan(
            cost, 0.05, 0.7, a, b, tol=1e-11, max_iter=20000, grad_mode="none"
        ),
        "unbalanced": unbalanced_sinkhorn_plan(cost, 0.02, 0.1, a, b, tol=1e-12, max_iter=20000).log(),
    }
    assert rebuilds > 6
    for name, log_plan in absorbed.items():
        torch.testing.assert_close(log_plan.exp(), reference[name].exp(), rtol=0, atol=1e-9, msg=name)


@pytest.mark.parametrize(
    ("max_iter", "tol", "message"),
    [
        (0, 1e-6, "`max_iter` must be an integer >= 1; got 0"),
        (True, 1e-6, "`max_iter` must be an integer >= 1; got True"),
        (10, -1.0, "`tol` must be a finite number >= 0; got -1.0"),
        (10, float("inf"), "`tol` must be a finite number >= 0; got inf"),
        (10, "1e-6", "`tol` must be a finite number >= 0; got '1e-6'"),
    ],
)
def test_one_rule_for_solver_options(max_iter, tol, message):
    with pytest.raises(ValueError, match=f"^owner: {message}"):
        check_solver_options("owner", max_iter, tol)


def test_tol_zero_is_allowed_by_solvers_and_objectives():
    """A zero tolerance runs every iteration; solvers and OT objectives accept it alike."""
    check_solver_options("owner", 1, 0.0)
    cost, a, b = random_problem(seed=1)
    sinkhorn_log_plan(cost, 0.5, a, b, tol=0.0, max_iter=3)
    for config in (
        {"name": "iot", "tol": 0.0},
        {"name": "iot_partial", "tol": 0},
        {"name": "dart", "tol": 0.0},
    ):
        assert build_objective(config)


@pytest.mark.parametrize("value", [0, -0.1, float("nan"), float("inf"), True, "0.1", None])
def test_check_positive_rejects_what_is_not_a_finite_positive_number(value):
    with pytest.raises(ValueError, match="^owner: `reg` must be a finite number > 0; got"):
        check_positive("owner", "reg", value)
    assert check_positive("owner", "reg", 2) == 2.0
