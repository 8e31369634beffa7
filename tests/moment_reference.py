"""Moment retrieval metrics written out from their definitions, query by query, and random moment problems.

The independent reference of `hf_atr.metrics.moments` (tests/metrics/test_moments.py) and the per-query baseline
of benchmarks/metrics.py: plain Python loops over queries, IoU thresholds, ranked predictions and annotated windows,
an explicit precision/recall curve per query and threshold, and VOC interpolation as its definition reads (the
precision at recall r is the best precision at any recall >= r).
"""

from __future__ import annotations

import random

THRESHOLDS = [k / 100 for k in range(50, 100, 5)]
MAX_PREDICTIONS = 10


def temporal_iou(window: tuple[float, float], other: tuple[float, float]) -> float:
    """|A ∩ B| / |A ∪ B| of two windows (start, end)."""
    intersection = max(0.0, min(window[1], other[1]) - max(window[0], other[0]))
    return intersection / ((window[1] - window[0]) + (other[1] - other[0]) - intersection)


def average_precision(ranked: list, annotated: list, threshold: float) -> float:
    """VOC-interpolated AP of predictions in score order, each greedily matched to an unmatched window."""
    taken: set[int] = set()
    curve = []  # (recall, precision) after each prediction
    true_positives = 0
    for n_predicted, prediction in enumerate(ranked, start=1):
        candidates = [
            (temporal_iou(prediction[:2], window), -index)
            for index, window in enumerate(annotated)
            if index not in taken and temporal_iou(prediction[:2], window) >= threshold
        ]
        if candidates:
            taken.add(-max(candidates)[1])  # the highest IoU; among equal ones, the first listed
            true_positives += 1
        curve.append((true_positives / len(annotated), true_positives / n_predicted))
    total, previous_recall = 0.0, 0.0
    for recall, _ in curve:
        if recall > previous_recall:
            total += (recall - previous_recall) * max(p for r, p in curve if r >= recall)
            previous_recall = recall
    return total


def brute_force_moment_metrics(predictions: list[dict], references: list[dict]) -> dict[str, float]:
    """R1@0.5, R1@0.7, mAP@0.5, mAP@0.75, mAP over the references' queries; a query without predictions scores 0."""
    predicted = {record["qid"]: record["pred_relevant_windows"][:MAX_PREDICTIONS] for record in predictions}
    r1_iou, ap = [], {threshold: [] for threshold in THRESHOLDS}
    for record in references:
        annotated = [tuple(window) for window in record["relevant_windows"]]
        listed = [tuple(window) for window in predicted.get(record["qid"], [])]
        r1_iou.append(max(temporal_iou(listed[0][:2], window) for window in annotated) if listed else 0.0)
        ranked = sorted(listed, key=lambda window: -window[2])  # Python's sort keeps ties in listed order
        for threshold in THRESHOLDS:
            ap[threshold].append(average_precision(ranked, annotated, threshold))
    map_at = {threshold: sum(values) / len(values) for threshold, values in ap.items()}
    return {
        "R1@0.5": sum(iou >= 0.5 for iou in r1_iou) / len(r1_iou),
        "R1@0.7": sum(iou >= 0.7 for iou in r1_iou) / len(r1_iou),
        "mAP@0.5": map_at[0.5],
        "mAP@0.75": map_at[0.75],
        "mAP": sum(map_at.values()) / len(map_at),
    }


def random_moment_problem(
    seed: int, n_queries: int, grid: float | None = 0.5, duration: float = 60.0
) -> tuple[list[dict], list[dict]]:
    """Predictions and references of `n_queries` random queries, in the records' formats.

    1-5 annotated windows per query; 0-14 predictions (a query in ten has no record, one in ten an empty list),
    drawn from jittered copies of the annotated windows, spans covering two of them and random windows, with
    scores from five values (ties). With `grid`, times are multiples of it (IoUs land exactly on thresholds);
    with None they are continuous. Predictions come in a shuffled order of queries.
    """
    rng = random.Random(seed)

    def time(value: float) -> float:
        return round(value / grid) * grid if grid else value

    def window(start: float, length: float) -> list[float]:
        start = time(start)
        return [start, start + max(time(length), grid or 1e-3)]

    references, predictions = [], []
    for query in range(n_queries):
        qid = f"q{query}"
        annotated = [
            window(rng.uniform(0, duration - 10), rng.uniform(1, 10)) for _ in range(rng.randint(1, 5))
        ]
        references.append({"qid": qid, "query": f"caption {query}", "relevant_windows": annotated})
        kind = rng.random()
        if kind < 0.1:
            continue
        listed = []
        for _ in range(0 if kind < 0.2 else rng.randint(1, 14)):
            source = rng.choice(annotated)
            draw = rng.random()
            if draw < 0.5:
                jitter = rng.uniform(0, 2)
                start, end = window(source[0] + rng.uniform(-jitter, jitter), source[1] - source[0])
            elif draw < 0.65:
                other = rng.choice(annotated)
                start, end = min(source[0], other[0]), max(source[1], other[1])
            else:
                start, end = window(rng.uniform(0, duration - 10), rng.uniform(1, 10))
            listed.append([start, end, rng.choice([0.1, 0.3, 0.5, 0.7, 0.9])])
        predictions.append({"qid": qid, "pred_relevant_windows": listed})
    rng.shuffle(predictions)
    return predictions, references
