"""Zero-shot classification figures: the confusion matrix and per-class accuracy as drawn."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.plots.classification import confusion_matrix_figure, per_class_accuracy_figure

CLASSES = ["dog", "rain", "siren"]
CONFUSION = np.array([[3, 1, 0], [0, 2, 2], [0, 0, 0]])


def test_confusion_matrix_shows_row_shares_and_counts():
    figure = confusion_matrix_figure(CONFUSION, CLASSES)
    ax = figure.axes[0]
    expected = 100 * np.array([[0.75, 0.25, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(ax.images[0].get_array(), expected)
    assert [label.get_text() for label in ax.get_xticklabels()] == CLASSES
    assert [label.get_text() for label in ax.get_yticklabels()] == CLASSES
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    assert sorted((text.get_position(), text.get_text()) for text in ax.texts) == [
        ((0, 0), "3"),
        ((1, 0), "1"),
        ((1, 1), "2"),
        ((2, 1), "2"),
    ]
    assert ax.get_title() == "5 of 8 clips on the diagonal (numbers: clip counts)"
    assert figure.axes[1].get_ylabel() == "% of the true class's clips"
    with pytest.raises(ValueError, match=r"confusion must be \(3, 3\) for 3 class names, got \(2, 2\)"):
        confusion_matrix_figure(CONFUSION[:2, :2], CLASSES)


def test_per_class_accuracy_sorts_classes_and_marks_overall_and_chance():
    accuracy = np.array([0.75, 0.5, np.nan])
    figure = per_class_accuracy_figure(accuracy, np.array([4, 4, 0]), CLASSES)
    ax = figure.axes[0]
    assert [bar.get_width() for bar in ax.patches] == [75.0, 50.0, 0.0]
    assert [label.get_text() for label in ax.get_yticklabels()] == [
        "dog (4 clips)",
        "rain (4 clips)",
        "siren (0 clips)",
    ]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["all clips: 62.5 %", "chance: 33.3 %"]
    assert [line.get_xdata()[0] for line in ax.get_lines()] == [62.5, 100 / 3]
    assert [text.get_text() for text in ax.texts] == ["3/4", "2/4", "0/0"]
    assert "accuracy (%" in ax.get_xlabel()
    with pytest.raises(ValueError, match=r"one value per class \(3\), got shapes \(2,\) and \(3,\)"):
        per_class_accuracy_figure(accuracy[:2], np.array([4, 4, 0]), CLASSES)
