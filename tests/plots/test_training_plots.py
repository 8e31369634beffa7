"""Training curves from a Trainer's log_history: which series land in which panel, and what is drawn."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.plots.training import CALLBACK_TERMS, training_curves, training_curves_figure

HISTORY = [
    {"step": 0, "epoch": 0.0, "kb_drift": 0.5, "kb_build_seconds": 1.0},
    {"loss": 2.0, "ask/loss_t2a": 1.1, "ask/modulation_t2a": 0.3, "ask/modulation_a2t": 0.4, "ask/knowledge_base": 1.0, "learning_rate": 1e-3, "step": 10},
    {"eval_t2a_R@1": 0.1, "eval_a2t_R@1": 0.2, "eval_t2a_R@1/fra": 0.05, "eval_t2a_median_rank": 9.0, "step": 10},
    {"loss": 1.5, "ask/loss_t2a": 0.8, "ask/modulation_t2a": 0.5, "ask/modulation_a2t": 0.6, "ask/knowledge_base": 1.0, "step": 20},
    {"step": 20, "epoch": 1.0, "kb_drift": 0.25, "kb_build_seconds": 1.2},
    {"eval_t2a_R@1": 0.3, "eval_a2t_R@1": 0.35, "step": 20},
    {"other/loss_t2a": 9.0, "step": 20},
    {"train_runtime": 12.0, "train_loss": 1.7, "step": 20},
]  # fmt: skip


def test_series_are_grouped_into_panels():
    curves = training_curves(HISTORY, "ask")
    assert list(curves.losses) == ["loss", "loss_t2a"]
    np.testing.assert_array_equal(curves.losses["loss"].steps, [10, 20])
    np.testing.assert_array_equal(curves.losses["loss_t2a"].values, [1.1, 0.8])
    assert set(curves.terms) == {"modulation", CALLBACK_TERMS["kb_drift"]}
    np.testing.assert_array_equal(curves.terms["modulation"]["a2t"].values, [0.4, 0.6])
    np.testing.assert_array_equal(curves.terms[CALLBACK_TERMS["kb_drift"]]["kb_drift"].steps, [0, 20])
    assert curves.constants == {"knowledge_base": 1.0}
    assert set(curves.evaluation) == {"t2a", "a2t"} and list(curves.evaluation["t2a"]) == ["R@1"]
    np.testing.assert_array_equal(curves.evaluation["a2t"]["R@1"].values, [0.2, 0.35])
    assert not curves.is_empty
    assert training_curves([{"eval_t2a_R@1": 0.1, "step": 3}], "ask").is_empty


def test_figure_draws_loss_terms_and_evaluation_over_steps():
    figure = training_curves_figure(training_curves(HISTORY, "ask"), title="Training")
    visible = [ax for ax in figure.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in visible]
    assert titles == [
        "training loss",
        "modulation",
        CALLBACK_TERMS["kb_drift"],
        "evaluation: text → audio",
        "evaluation: audio → text",
    ]
    loss_ax, modulation_ax, drift_ax, t2a_ax, _ = visible
    assert {line.get_label(): list(line.get_ydata()) for line in loss_ax.get_lines()} == {
        "loss": [2.0, 1.5],
        "loss_t2a": [1.1, 0.8],
    }
    assert [line.get_label() for line in modulation_ax.get_lines()] == ["t2a", "a2t"]
    np.testing.assert_allclose(drift_ax.get_lines()[0].get_xdata(), [0, 20])
    np.testing.assert_allclose(t2a_ax.get_lines()[0].get_ydata(), [10.0, 30.0])  # percent
    assert t2a_ax.get_ylim() == (0, 100) and t2a_ax.get_legend() is not None
    assert all(ax.get_xlabel() == "optimizer step" for ax in visible)
    assert len(figure.axes) == 6 and not figure.axes[5].get_visible()  # 5 panels on a 3 x 2 grid


def test_figure_of_a_history_without_loss_is_refused():
    with pytest.raises(ValueError, match="holds no logged loss"):
        training_curves_figure(training_curves([], "contrastive"))
