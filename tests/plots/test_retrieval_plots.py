"""Retrieval figures: the data drawn on each Axes, labels with units, legends."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.plots.retrieval import (
    rank_bin_edges,
    rank_histogram_figure,
    recall_at_k_figure,
    transport_plan_figure,
)


def test_recall_curves_draw_every_language_and_chance_in_percent():
    ks = np.arange(1, 51)
    recall = {
        "t2a": {"eng": np.linspace(0.2, 0.9, 50), "fra": np.linspace(0.1, 0.8, 50)},
        "a2t": {"eng": np.linspace(0.3, 1.0, 50), "fra": np.linspace(0.2, 0.7, 50)},
    }
    chance = {"t2a": ks / 100, "a2t": ks / 500}
    counts = {"t2a": {"eng": 500, "fra": 480}, "a2t": {"eng": 100, "fra": 96}}
    figure = recall_at_k_figure(ks, recall, chance, query_counts=counts)
    axes = figure.axes
    assert [ax.get_title() for ax in axes] == ["text → audio", "audio → text"]
    for ax, direction in zip(axes, ("t2a", "a2t")):
        lines = {line.get_label(): line for line in ax.get_lines()}
        query = "captions" if direction == "t2a" else "clips"
        assert set(lines) == {
            f"eng ({counts[direction]['eng']} {query})",
            f"fra ({counts[direction]['fra']} {query})",
            "random scores",
        }
        np.testing.assert_array_equal(lines[f"eng ({counts[direction]['eng']} {query})"].get_xdata(), ks)
        np.testing.assert_allclose(
            lines[f"fra ({counts[direction]['fra']} {query})"].get_ydata(), 100 * recall[direction]["fra"]
        )
        np.testing.assert_allclose(lines["random scores"].get_ydata(), 100 * chance[direction])
        assert ax.get_ylim() == (0, 100) and "%" in ax.get_ylabel() and "retrieved" in ax.get_xlabel()
        assert ax.get_legend() is not None


def step_heights(ax) -> list[np.ndarray]:
    """Bar heights of each step histogram on `ax` (the vertices of its outline)."""
    return [patch.get_xy()[1:-1:2, 1] for patch in ax.patches]


def test_rank_histogram_counts_every_rank_in_percent_with_medians():
    t2a = {"eng": np.array([1, 1, 2, 5, 5, 5]), "fra": np.array([1, 3, 3, 50])}
    a2t = {"eng": np.array([1, 2, 2, 400])}
    figure = rank_histogram_figure({"t2a": t2a, "a2t": a2t}, {"t2a": 50, "a2t": 1000})
    t2a_ax, a2t_ax = figure.axes
    heights = step_heights(t2a_ax)
    expected_eng = np.bincount(t2a["eng"], minlength=51)[1:] * 100 / 6
    np.testing.assert_allclose(heights[0], expected_eng)
    np.testing.assert_allclose(heights[1], np.bincount(t2a["fra"], minlength=51)[1:] * 100 / 4)
    assert t2a_ax.get_xscale() == "linear" and a2t_ax.get_xscale() == "log"
    assert [label.get_text() for label in a2t_ax.get_xticklabels()] == [
        "1",
        "2",
        "5",
        "10",
        "20",
        "50",
        "100",
        "200",
        "500",
        "1000",
    ]
    medians = [line.get_xdata()[0] for line in t2a_ax.get_lines()]
    assert medians == [3.5, 3.0]
    labels = [text.get_text() for text in t2a_ax.get_legend().get_texts()]
    assert labels == ["eng (median 3.5)", "fra (median 3)"]
    assert np.sum(step_heights(a2t_ax)[0]) == pytest.approx(100)  # every query in some bin
    assert "% of captions" in t2a_ax.get_ylabel() and "rank of the best relevant clip" in t2a_ax.get_xlabel()


def test_rank_bins_put_each_rank_in_one_bin():
    np.testing.assert_array_equal(rank_bin_edges(3), [0.5, 1.5, 2.5, 3.5])
    edges = rank_bin_edges(5000)
    assert edges[0] == 0.5 and edges[-1] == 5000.5 and np.all(np.diff(edges) >= 1)
    ranks = np.arange(1, 5001)
    assert np.histogram(ranks, edges)[0].sum() == 5000
    with pytest.raises(ValueError, match="gallery_size must be at least 1, got 0"):
        rank_bin_edges(0)


def test_transport_plan_is_drawn_beside_the_scores():
    rng = np.random.default_rng(0)
    scores, plan = rng.random((6, 6)), np.eye(6) * 0.9 + 0.02
    figure = transport_plan_figure(scores, plan, score_label="cosine similarity", plan_label="6 · Π")
    score_ax, plan_ax = figure.axes[:2]
    np.testing.assert_allclose(score_ax.images[0].get_array(), scores)
    np.testing.assert_allclose(plan_ax.images[0].get_array(), plan)
    colorbar_labels = {ax.get_ylabel() for ax in figure.axes[2:]}
    assert colorbar_labels == {"cosine similarity", "6 · Π"}
    assert "caption" in score_ax.get_ylabel() and "clip" in plan_ax.get_xlabel()
    with pytest.raises(ValueError, match=r"one shape, got \(6, 6\) and \(6, 5\)"):
        transport_plan_figure(scores, plan[:, :5], score_label="s", plan_label="p")
