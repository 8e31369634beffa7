"""The moment timeline: the curve, the annotated spans and the best predictions drawn where they are, per query."""

from __future__ import annotations

import numpy as np
import pytest

from hf_atr.plots.canvas import save_figure
from hf_atr.plots.moments import MomentTimeline, moment_timeline_figure


def timeline(
    query: str = "a dog barks",
    predicted=((20.0, 22.5, 0.61), (40.0, 41.0, 0.4), (5.0, 6.0, 0.3), (8.0, 9.0, 0.2)),
):
    times = np.arange(0.5, 60.0, 1.0)
    scores = 0.2 + 0.4 * np.exp(-0.5 * ((times - 21.0) / 1.5) ** 2)
    return MomentTimeline(
        query,
        times,
        scores,
        predicted=predicted,
        annotated=[(20.2, 22.0), (44.0, 45.5)],
        recording="take 1.wav",
    )


def test_each_query_gets_its_curve_annotated_spans_and_best_predictions(tmp_path):
    first, second = timeline(), timeline("a car door closes", predicted=[(1.0, 3.0, 0.9)])
    figure = moment_timeline_figure([first, second], predictions_shown=3)
    top, bottom = figure.axes
    assert top.get_title(loc="left") == "“a dog barks” in take 1.wav"
    (curve,) = [line for line in top.get_lines() if line.get_gid() == "curve"]
    np.testing.assert_array_equal(curve.get_xdata(), first.times)
    np.testing.assert_array_equal(curve.get_ydata(), first.scores)
    spans = [patch for patch in top.patches if patch.get_gid() == "annotated"]
    spans_x = sorted(
        (round(patch.get_x(), 6), round(patch.get_x() + patch.get_width(), 6)) for patch in spans
    )
    assert spans_x == [(20.2, 22.0), (44.0, 45.5)]
    bars = {collection.get_gid(): collection for collection in top.collections}
    assert sorted(bars) == ["predicted 1", "predicted 2", "predicted 3"]  # the fourth is not drawn
    for rank, (start, end, _) in enumerate(first.predicted[:3], start=1):
        (path,) = bars[f"predicted {rank}"].get_paths()
        assert (path.vertices[:, 0].min(), path.vertices[:, 0].max()) == pytest.approx((start, end))
    assert [text.get_text() for text in top.texts] == ["#1 0.610", "#2 0.400", "#3 0.300"]
    assert top.get_xlim() == (0.0, 59.5) and bottom.get_xlabel() == "time in the recording (s)"
    assert {text.get_text() for text in top.get_legend().get_texts()} == {
        "similarity",
        "annotated",
        "predicted (best first)",
    }
    assert len(bottom.collections) == 1
    assert save_figure(figure, tmp_path / "timeline.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: moment_timeline_figure([]), "needs at least one query's timeline, got none."),
        (
            lambda: moment_timeline_figure([MomentTimeline("rain", [0.5, 1.5], [0.1])]),
            "The timeline of 'rain' needs one score per time, got (2,) times and (1,) scores.",
        ),
        (
            lambda: moment_timeline_figure([timeline()], predictions_shown=-1),
            "predictions_shown must be a non-negative integer, got -1.",
        ),
    ],
)
def test_bad_timelines_say_what_is_wrong(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


def test_the_time_axis_ends_at_the_recording_when_its_duration_is_given():
    times = np.arange(0.5, 69.0, 1.0)
    clipped = MomentTimeline("a bell", times, np.zeros_like(times), annotated=[(60.0, 69.0)], duration=69.0)
    (axes,) = moment_timeline_figure([clipped]).axes
    assert axes.get_xlim() == (0.0, 69.0)
    # Without it, the axis reaches the last window drawn (a window past the end stretches it).
    stretched = MomentTimeline("a bell", times, np.zeros_like(times), annotated=[(60.0, 4800.0)])
    (axes,) = moment_timeline_figure([stretched]).axes
    assert axes.get_xlim() == (0.0, 4800.0)
