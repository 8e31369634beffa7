"""The moment proposers on synthetic similarity curves with known bumps: frame-level and window-level curves, the
AMR paper's sliding-window baseline, temporal NMS against a brute-force check, the config's and the curve's
messages."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hf_atr.moments import (
    Moment,
    MomentProposalConfig,
    SimilarityCurve,
    prediction_record,
    propose_moments,
    refined_moments,
    sliding_window_moments,
    temporal_nms,
)
from hf_atr.moments.proposal import (
    MAX_PREDICTIONS,
    moment_score,
    peak_stretches,
    robust_level,
    run_bounds,
    smoothed_peaks,
    temporal_iou,
)


def window_curve(events, duration=60.0, window=4.0, hop=0.5, noise=0.01, seed=0):
    """Windows of ``window`` s every ``hop`` s, scored as a clip-level model scores them: the background level plus
    the share of each event ``(start, end, height)`` the window holds, plus noise."""
    starts = np.arange(0.0, duration - window + 1e-9, hop)
    ends = starts + window
    scores = 0.1 + noise * np.random.default_rng(seed).standard_normal(len(starts))
    for start, end, height in events:
        overlap = np.clip(np.minimum(ends, end) - np.maximum(starts, start), 0.0, None)
        scores += height * overlap / min(end - start, window)
    return SimilarityCurve(starts, ends, scores)


def frame_curve(events, seconds=30.0, frame_rate=25.0, noise=0.01, seed=0):
    """A frame-level curve: background plus ``height`` on the frames inside each event, plus noise."""
    times = np.arange(int(seconds * frame_rate)) / frame_rate
    scores = 0.2 + noise * np.random.default_rng(seed).standard_normal(len(times))
    for start, end, height in events:
        scores[(times >= start) & (times < end)] += height
    return SimilarityCurve.from_frames(scores, frame_rate)


def test_frame_level_bumps_are_each_found_the_strongest_first():
    events = [(4.0, 6.0, 0.3), (12.4, 20.0, 0.5), (25.0, 25.6, 0.4)]
    curve = frame_curve(events)
    moments = propose_moments(curve)
    assert len(moments) == MAX_PREDICTIONS
    assert [m.score for m in moments] == sorted((m.score for m in moments), reverse=True)
    # the highest and longest bump first, its boundaries within one frame; each bump has a moment among the ten (the
    # others are parts of the long bump, whose IoU with it is small, and peaks of the noise)
    assert abs(moments[0].start - 12.4) <= curve.step and abs(moments[0].end - 20.0) <= curve.step
    for start, end, _ in events:
        assert max(temporal_iou(moment, Moment(start, end, 0)) for moment in moments) >= 0.95


@pytest.mark.parametrize(
    "event",
    [(20.0, 22.0), (30.25, 31.0), (10.0, 17.5)],
    ids=["2 s", "0.75 s", "7.5 s (longer than the window)"],
)
def test_the_best_moment_of_a_window_curve_overlaps_the_event_more_than_the_baselines(event):
    """Windows of 4 s: the baseline's best moment is a whole window, IoU at most L/4 or 4/L with the event."""
    curve = window_curve([(*event, 0.5)])
    truth = Moment(*event, 0.0)
    best, baseline = propose_moments(curve)[0], sliding_window_moments(curve)[0]
    assert baseline.end - baseline.start == 4.0
    assert temporal_iou(best, truth) > temporal_iou(baseline, truth)
    if event[1] - event[0] > 4.0:
        assert temporal_iou(best, truth) >= 0.7 > 4.0 / 7.5


@pytest.mark.parametrize("event", [(20.0, 22.0), (30.25, 31.0), (10.0, 17.5), (4.0, 8.0)])
def test_half_height_stretches_are_the_closed_form_of_a_noise_free_window_curve(event):
    """A window of length W scores the share of the event it holds: the half-prominence crossings, at the windows'
    centres, are the event itself when L >= W and a window centred on it when L < W (module docstring)."""
    curve = window_curve([(*event, 0.5)], noise=0.0)
    ((peak, start, end),) = peak_stretches(curve, curve.scores, (0.5,))
    middle, half = (event[0] + event[1]) / 2, max(event[1] - event[0], 4.0) / 2
    assert (start, end) == pytest.approx((middle - half, middle + half), abs=1e-9)
    assert curve.scores[peak] == curve.scores.max()
    # cut nearer the top (a quarter of the prominence below it), the stretch is narrower; nearer the foot, wider
    (narrow,) = [(s, e) for _, s, e in peak_stretches(curve, curve.scores, (0.25,))]
    (wide,) = [(s, e) for _, s, e in peak_stretches(curve, curve.scores, (0.75,))]
    assert wide[0] < start < narrow[0] and narrow[1] < end < wide[1]


def test_peaks_include_the_recordings_ends_and_a_flat_curves_first_step():
    assert smoothed_peaks(np.array([3.0, 1.0, 2.0, 1.0, 4.0])).tolist() == [0, 2, 4]
    assert smoothed_peaks(np.full(5, 0.2)).tolist() == [0]
    curve = SimilarityCurve.from_frames([3.0, 1.0, 1.0, 1.0], frame_rate=1.0)
    # the first step's peak falls to half its prominence (2) a quarter of the way to the next centre
    assert peak_stretches(curve, curve.scores, (0.5,)) == [(0, 0.0, 1.0)]


def test_moment_score_by_hand():
    curve = SimilarityCurve(
        np.arange(8.0), np.arange(8.0) + 2.0, [0, 0, 1, 3, 3, 1, 0, 0]
    )  # W = 2, centres k + 1
    smoothed = curve.scores
    # centres 3, 4, 5, 6 inside [3, 6]: mean 2; median 0.5; factor (3 / 2)^0.25
    assert moment_score(curve, smoothed, 3.0, 6.0, 0.5, 0.25) == pytest.approx(0.5 + 1.5 * 1.5**0.25)
    assert moment_score(curve, smoothed, 3.0, 6.0, 0.5, 0.0) == pytest.approx(2.0)  # γ = 0: the mean
    # no centre inside [4.2, 4.6]: the curve interpolated at 4.4 (3.0), a fifth of a window long
    assert moment_score(curve, smoothed, 4.2, 4.6, 0.0, 0.5) == pytest.approx(3.0 * 0.2**0.5)


def test_a_curve_without_a_bump_still_gives_its_best_stretches():
    flat = frame_curve([], noise=0.0)
    assert refined_moments(flat) == [Moment(0.0, 0.04, pytest.approx(0.2))]  # no peak: its first step
    scores = flat.scores.copy()
    scores[[100, 300]] += [1e-3, 2e-3]  # two steps above the flat background: its only peaks
    moments = refined_moments(
        SimilarityCurve(flat.starts, flat.ends, scores), MomentProposalConfig(smoothing_seconds=0)
    )
    holds = [
        [m.start <= at < at + 0.04 <= m.end and m.end - m.start < 0.1 for m in moments] for at in (12.0, 4.0)
    ]
    assert holds[0][0] and any(
        holds[1]
    )  # the higher step first; the lower one among the moments, scored lower
    assert moments[0].score > moments[holds[1].index(True)].score > 0.2


def test_the_baseline_reproduces_the_windows_ranked_by_score():
    rng = np.random.default_rng(3)
    starts = np.arange(0.0, 20.0, 2.0)  # windows that tile: NMS at any IoU < 1 removes none of them
    curve = SimilarityCurve(starts, starts + 2.0, rng.random(len(starts)))
    moments = sliding_window_moments(curve, MomentProposalConfig(proposer="sliding_window", max_moments=10))
    order = np.argsort(-curve.scores, kind="stable")
    assert [(m.start, m.end, m.score) for m in moments] == [
        (curve.starts[i], curve.ends[i], curve.scores[i]) for i in order
    ]
    assert (
        propose_moments(curve, MomentProposalConfig(proposer="sliding_window", max_moments=3)) == moments[:3]
    )


def test_the_baseline_suppresses_overlapping_windows_above_its_iou():
    starts = np.arange(0.0, 10.0, 1.0)
    scores = np.array([0.1, 0.2, 0.9, 0.8, 0.3, 0.1, 0.1, 0.7, 0.2, 0.1])
    curve = SimilarityCurve(starts, starts + 2.0, scores)  # neighbours overlap with IoU 1/3
    kept = sliding_window_moments(curve, MomentProposalConfig(proposer="sliding_window", nms_iou=0.3))
    assert [(m.start, m.score) for m in kept[:3]] == [(2.0, 0.9), (7.0, 0.7), (4.0, 0.3)]
    assert all(temporal_iou(a, b) <= 0.3 for a, b in itertools.combinations(kept, 2))
    everything = sliding_window_moments(curve, MomentProposalConfig(proposer="sliding_window", nms_iou=1 / 3))
    assert len(everything) == 10  # IoU 1/3 is not above 1/3: nothing suppressed


def test_temporal_iou_by_hand():
    assert temporal_iou(Moment(0, 4, 1), Moment(2, 6, 1)) == pytest.approx(2 / 6)
    assert temporal_iou(Moment(0, 4, 1), Moment(1, 2, 1)) == pytest.approx(1 / 4)
    assert temporal_iou(Moment(0, 1, 1), Moment(1, 2, 1)) == 0.0


def test_temporal_nms_agrees_with_its_definition_on_random_moments():
    rng = np.random.default_rng(0)
    for trial in range(50):
        starts = rng.uniform(0, 30, 12)
        moments = [Moment(s, s + rng.uniform(0.5, 8), rng.random()) for s in starts]
        threshold = rng.choice([0.0, 0.3, 0.5, 0.7])
        kept = temporal_nms(moments, threshold)
        # brute force: walk the moments best first; a moment is kept iff no better kept one overlaps it above
        # the threshold
        expected = []
        for moment in sorted(moments, key=lambda m: -m.score):
            if not any(temporal_iou(moment, chosen) > threshold for chosen in expected):
                expected.append(moment)
        assert kept == expected, trial
        assert temporal_nms(moments, threshold, limit=2) == expected[:2]


def test_robust_level_is_median_plus_k_normal_sigmas():
    noise = np.random.default_rng(1).standard_normal(200_000)
    assert robust_level(noise, 2.0) == pytest.approx(2.0, abs=0.02)  # σ of standard normal noise is 1
    assert robust_level(np.array([1.0, 2.0, 3.0, 4.0, 100.0]), 1.0) == pytest.approx(3.0 + 1.4826 * 1.0)


def test_run_bounds_are_the_neighbours_edges_or_the_common_audio_of_a_short_run():
    starts = np.arange(0.0, 10.0, 1.0)
    curve = SimilarityCurve(starts, starts + 4.0, np.zeros(10))  # 4-s windows every 1 s
    assert run_bounds(curve, 3, 8) == (6.0, 9.0)  # ends[2], starts[9]
    assert run_bounds(curve, 0, 9) == (0.0, 13.0)  # the recording's own ends
    assert run_bounds(curve, 4, 5) == (
        5.0,
        8.0,
    )  # ends[3] = 7 >= starts[6] = 6: what windows 4 and 5 both read


def test_prediction_records_are_what_the_moment_metrics_read():
    record = prediction_record("q7", [Moment(1.0, 2.5, 0.9), Moment(4.0, 6.0, 0.4)])
    assert record == {"qid": "q7", "pred_relevant_windows": [[1.0, 2.5, 0.9], [4.0, 6.0, 0.4]]}
    # Moment-DETR's predictions also carry the query (unchanged, white space included) and the recording.
    named = prediction_record("q7", [Moment(1.0, 2.5, 0.9)], query=" a door slams ", vid="rec")
    assert list(named) == ["qid", "query", "vid", "pred_relevant_windows"]
    assert named["query"] == " a door slams " and named["vid"] == "rec"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"proposer": "detr"}, "proposer must be one of ('refined', 'sliding_window'), got 'detr'."),
        ({"max_moments": 0}, "max_moments must be a positive integer, got 0."),
        ({"nms_iou": 1.5}, "nms_iou must be an IoU in [0, 1], got 1.5."),
        ({"smoothing_seconds": -1}, "smoothing_seconds must be a finite number >= 0, got -1."),
        ({"length_exponent": float("inf")}, "length_exponent must be a finite number >= 0, got inf."),
        (
            {"coarse_smoothing_seconds": 0.1},
            "coarse_smoothing_seconds (0.1) must be at least smoothing_seconds (0.25)",
        ),
        ({"peak_levels": ()}, "peak_levels must be a non-empty sequence of fractions in (0, 1], got ()."),
        (
            {"peak_levels": (0.5, 1.5)},
            "peak_levels must be a non-empty sequence of fractions in (0, 1], got (0.5, 1.5).",
        ),
        ({"threshold_mads": float("nan")}, "threshold_mads must be a finite number of MADs, got nan."),
        ({"boundary_mads": 4.0}, "boundary_mads (4.0) must not exceed threshold_mads (3.0)"),
    ],
)
def test_a_bad_config_says_which_value(options, message):
    with pytest.raises(ValueError) as error:
        MomentProposalConfig(**options)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ([0.0, 1.0], [1.0], [0.1, 0.2]),
            "one start, end and score per step, got 2 starts, 1 ends and 2 scores",
        ),
        (([], [], []), "at least one step, got none"),
        (([0.0], [1.0], [np.nan]), "must be finite (found NaN or inf)"),
        (
            ([0.0, 1.0], [1.0, 1.0], [0.1, 0.2]),
            "Step 1 of the similarity curve ends (1.000 s) at or before it starts",
        ),
        (
            ([1.0, 0.0], [2.0, 1.0], [0.1, 0.2]),
            "must be in time order: step 1 starts at 0.000 s, before step 0",
        ),
    ],
)
def test_a_bad_curve_says_what_is_wrong(arguments, message):
    with pytest.raises(ValueError) as error:
        SimilarityCurve(*arguments)
    assert message in str(error.value)


def test_a_frame_level_curve_tiles_the_recording_at_its_frame_rate():
    curve = SimilarityCurve.from_frames([0.1, 0.5, 0.2])
    np.testing.assert_allclose(curve.starts, [0.0, 0.04, 0.08])
    np.testing.assert_allclose(curve.ends, [0.04, 0.08, 0.12])
    assert curve.step == pytest.approx(0.04) and curve.duration == pytest.approx(0.12) and len(curve) == 3
    np.testing.assert_allclose(curve.times, [0.02, 0.06, 0.10])
    with pytest.raises(ValueError, match="frame_rate must be a positive number of frames per second, got 0"):
        SimilarityCurve.from_frames([0.1], 0)
