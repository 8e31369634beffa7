"""Moment retrieval metrics: R1@IoU and detection mAP of predicted moments against annotated ones.

The evaluation of Moment-DETR (Lei et al., 2021, ``standalone_eval/eval.py``), which Lighthouse and the DCASE 2026
audio moment retrieval task use, on the records of its two JSONL formats:

* references: ``{"qid": ..., "relevant_windows": [[start, end], ...]}`` (seconds; Clotho-Moment, CASTELLA);
* predictions: ``{"qid": ..., "pred_relevant_windows": [[start, end, score], ...]}``.

Per query, the first :data:`MAX_PREDICTIONS_PER_QUERY` predictions **as listed** are evaluated (any further ones are
ignored), and the temporal IoU of two windows is ``|A ∩ B| / |A ∪ B|``.

* ``R1@θ``: the first listed prediction's IoU with the annotated window it overlaps most reaches ``θ``
  (θ = 0.5, 0.7), averaged over the queries.
* ``mAP@θ``: the ActivityNet detection AP of one query at IoU ``θ``, averaged over the queries. Its predictions are
  taken by decreasing score; each one in turn matches the unmatched annotated window it overlaps most if that IoU
  reaches ``θ`` (a true positive), and is a false positive otherwise, so a prediction covering two moments matches
  one of them at most, and a second prediction of the same moment is a false positive. With ``G`` annotated
  windows and precision ``p_k`` / recall ``r_k = TP_k / G`` after the k-th prediction, the AP is VOC-interpolated
  (VOC 2011):

      AP = Σ_k (r_k − r_{k−1}) · max_{j ≥ k} p_j,   r_0 = 0,

  so ``m`` annotated moments that no prediction matches cap the recall, and the AP, at ``(G − m) / G``. ``mAP`` averages
  ``mAP@θ`` over θ = 0.50, 0.55, …, 0.95 (:data:`MOMENT_IOU_THRESHOLDS`).

Departures from Moment-DETR's script (only the order among equally overlapped annotated windows can change a value
it computes on input it accepts):

* values are fractions in [0, 1], where the script prints percentages rounded to two decimals;
* a query of the references without predictions (absent, or with an empty list) scores 0 in every metric and is
  counted in every average, where the script raises ``KeyError`` (``IndexError`` for an empty list);
* ties are ordered stably: predictions of equal score keep their listed order (as the script's stable
  ``list.sort`` does, where ActivityNet's ``argsort()[::-1]`` reverses them), and of the annotated windows a
  prediction overlaps equally, it matches the first listed (the script takes them in the order of NumPy's
  ``argsort`` reversed, which depends on the sorting kernel NumPy dispatches to);
* bad input is refused with a ``ValueError`` naming the qid and the value, where the script fails later or not at
  all: a prediction for a qid that is not in the references (a wrong split or qid type: ``7803`` is not
  ``"7803"``), a qid given twice, a query without annotated windows, a window that is not
  ``[start, end(, score)]`` of finite numbers with ``start < end``.

Computed on arrays over all queries at once: the Python loops run over the (at most 10) prediction ranks and the
annotated-window slots (the most moments one query has), never over queries or thresholds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..lazy import get_logger

if TYPE_CHECKING:
    import evaluate

logger = get_logger(__name__)

MOMENT_RETRIEVAL_METRIC_DIR = Path(__file__).resolve().parent / "moment_retrieval_metric"
MAX_PREDICTIONS_PER_QUERY = 10
# The script rounds np.linspace(0.5, 0.95, 10) to two decimals; k / 100 is that float exactly.
MOMENT_IOU_THRESHOLDS: tuple[float, ...] = tuple(k / 100 for k in range(50, 100, 5))
R1_IOU_THRESHOLDS: tuple[float, ...] = (0.5, 0.7)
MAP_IOU_THRESHOLDS: tuple[float, ...] = (0.5, 0.75)
MOMENT_METRIC_NAMES: tuple[str, ...] = (
    *(f"R1@{threshold}" for threshold in R1_IOU_THRESHOLDS),
    *(f"mAP@{threshold}" for threshold in MAP_IOU_THRESHOLDS),
    "mAP",
)
"""The keys of :func:`moment_retrieval_metrics`, in the order it returns them."""
MOMENT_RETRIEVAL_TASK = "moment retrieval"
"""The ``task`` of a moment evaluation's protocol (how the card and the commands tell it from clip retrieval's)."""
_SHOWN_QIDS = 5


def load_moment_retrieval_metric(**load_kwargs: Any) -> evaluate.EvaluationModule:
    """``evaluate.load`` of the bundled `moment_retrieval_metric` module (offline; wraps
    :func:`moment_retrieval_metrics`).

    Args:
        **load_kwargs: forwarded to `evaluate.load` (e.g. ``cache_dir``, ``experiment_id``).
    """
    import evaluate  # ~5 s: pulls in transformers pipelines, so only when asked for

    return evaluate.load(str(MOMENT_RETRIEVAL_METRIC_DIR), **load_kwargs)


def moment_retrieval_metrics(
    predictions: Iterable[Mapping[str, Any]], references: Iterable[Mapping[str, Any]]
) -> dict[str, float]:
    """R1@0.5, R1@0.7, mAP@0.5, mAP@0.75 and mAP (IoU 0.50:0.05:0.95) of predicted moments, as fractions.

    The convention and its departures from Moment-DETR's evaluation are in the module docstring.

    Args:
        predictions: one record per query, ``{"qid": ..., "pred_relevant_windows": [[start, end, score], ...]}``;
            the first 10 windows as listed are evaluated, R1 takes the first. Queries of the references without a
            record score 0.
        references: one record per query, ``{"qid": ..., "relevant_windows": [[start, end], ...]}`` with at least
            one window. Other keys of either record (``query``, ``vid``, ``duration``) are ignored.

    Returns:
        ``{"R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"}``, floats in [0, 1], averaged over the references' queries.

    Raises:
        ValueError: naming the record or qid and the value: a record without its fields, a qid given twice in one
            list, a predicted qid missing from the references, no references, a query without annotated
            windows, a malformed window.
    """
    reference_qids, annotated, annotated_counts = _padded_windows(
        references, "references", "relevant_windows", 2
    )
    if not reference_qids:
        raise ValueError(
            "references: no query to evaluate; give one record per query with its relevant_windows."
        )
    if (annotated_counts == 0).any():
        qid = reference_qids[int(np.flatnonzero(annotated_counts == 0)[0])]
        raise ValueError(
            f"references: qid {qid!r} has no relevant_windows; R1 and AP need at least one annotated moment "
            "per query (leave such queries out of the references)."
        )
    windows, counts = _predictions_by_query(predictions, reference_qids)
    best_iou = _first_prediction_best_iou(windows, counts, annotated, annotated_counts)
    average_precision = _average_precision(
        windows, counts, annotated, annotated_counts
    )  # (queries, thresholds)
    map_per_threshold = dict(zip(MOMENT_IOU_THRESHOLDS, average_precision.mean(axis=0).tolist()))
    metrics = {f"R1@{threshold}": float(np.mean(best_iou >= threshold)) for threshold in R1_IOU_THRESHOLDS}
    metrics.update({f"mAP@{threshold}": map_per_threshold[threshold] for threshold in MAP_IOU_THRESHOLDS})
    metrics["mAP"] = float(np.mean(list(map_per_threshold.values())))
    return metrics


def _padded_windows(
    records: Iterable[Mapping[str, Any]], name: str, field: str, width: int
) -> tuple[list, np.ndarray, np.ndarray]:
    """Each record's qid and windows, checked: qids `(n,)`, windows `(n, max_windows, width)` zero-padded, counts `(n,)`."""
    qids: list = []
    first_record: dict = {}
    window_lists = []
    for position, record in enumerate(records):
        try:
            qid, windows = record["qid"], record[field]
        except (KeyError, TypeError, IndexError):
            keys = sorted(record) if isinstance(record, Mapping) else type(record).__name__
            raise ValueError(
                f"{name}[{position}] is not a record with 'qid' and '{field}': got {keys}."
            ) from None
        try:
            earlier = first_record.setdefault(qid, position)
        except TypeError:
            raise ValueError(f"{name}[{position}]: qid {qid!r} is not a string or an integer.") from None
        if earlier != position:
            raise ValueError(f"{name}: qid {qid!r} is given twice, in records {earlier} and {position}.")
        qids.append(qid)
        window_lists.append(windows)
    flat, counts = _flat_windows(window_lists, qids, name, field, width)
    malformed = ~(np.isfinite(flat).all(axis=1) & (flat[:, 0] < flat[:, 1]))
    if malformed.any():
        row = int(np.flatnonzero(malformed)[0])
        qid = qids[int(np.searchsorted(np.cumsum(counts), row, side="right"))]
        raise ValueError(
            f"{name}: qid {qid!r}: the window {flat[row].tolist()} in {field} is malformed; a window is "
            f"{_window_form(width)} of finite numbers with start < end (seconds)."
        )
    padded = np.zeros((len(qids), int(counts.max(initial=0)), width))
    padded[np.arange(padded.shape[1]) < counts[:, None]] = flat
    return qids, padded, counts


def _flat_windows(
    window_lists: list, qids: list, name: str, field: str, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """All records' windows in one `(total, width)` float64 array, and each record's count `(n,)`.

    One conversion of every window at once; only where that fails is each record converted on its own, which names
    the first one at fault.
    """
    try:
        counts = np.array([len(windows) for windows in window_lists], dtype=np.int64)
        flat = np.array([window for windows in window_lists for window in windows])
    except (TypeError, ValueError):  # an unsized value, or windows of different lengths
        flat = None
    if flat is None or not _holds_windows(flat, width):
        arrays = [_window_array(windows, name, field, qid, width) for qid, windows in zip(qids, window_lists)]
        counts = np.array([len(array) for array in arrays], dtype=np.int64)
        flat = np.concatenate(arrays) if arrays else np.zeros((0, width))
    return flat.reshape(-1, width).astype(np.float64), counts


def _window_array(windows: Any, name: str, field: str, qid: Any, width: int) -> np.ndarray:
    """`(n_windows, width)` windows of one record, or a ValueError naming the qid and the value."""
    try:
        array = np.asarray(windows)
    except ValueError:  # ragged: windows of different lengths
        array = None
    if array is None or not _holds_windows(array, width):
        shown = repr(windows) if len(repr(windows)) <= 120 else repr(windows)[:117] + "..."
        raise ValueError(
            f"{name}: qid {qid!r}: {field} must be a list of {_window_form(width)} numbers, got {shown}."
        )
    return array.reshape(-1, width)


def _holds_windows(array: np.ndarray, width: int) -> bool:
    """Whether `array` is `(n, width)` numbers, or the empty list's `(0,)`."""
    if array.shape == (0,):
        return True
    return array.ndim == 2 and array.shape[1] == width and array.dtype.kind in "iuf"


def _window_form(width: int) -> str:
    return "[start, end, score]" if width == 3 else "[start, end]"


def _predictions_by_query(
    predictions: Iterable[Mapping[str, Any]], reference_qids: list
) -> tuple[np.ndarray, np.ndarray]:
    """The first :data:`MAX_PREDICTIONS_PER_QUERY` predicted windows of each reference query as listed,
    `(queries, 10, 3)` zero-padded, and how many windows each lists `(queries,)` (0 for a query without a record)."""
    predicted_qids, predicted, predicted_counts = _padded_windows(
        predictions, "predictions", "pred_relevant_windows", 3
    )
    row_of_qid = {qid: row for row, qid in enumerate(reference_qids)}
    unknown = [qid for qid in predicted_qids if qid not in row_of_qid]
    if unknown:
        shown = ", ".join(repr(qid) for qid in unknown[:_SHOWN_QIDS]) + (
            ", ..." if len(unknown) > _SHOWN_QIDS else ""
        )
        raise ValueError(
            f"predictions: {len(unknown)} qid(s) are not in the references: {shown}. Evaluate predictions against "
            "the references of the same split, with qids of the same type (7803 is not '7803')."
        )
    rows = np.array([row_of_qid[qid] for qid in predicted_qids], dtype=np.int64)
    kept = min(predicted.shape[1], MAX_PREDICTIONS_PER_QUERY)
    windows = np.zeros((len(reference_qids), MAX_PREDICTIONS_PER_QUERY, 3))
    windows[rows, :kept] = predicted[:, :kept]
    counts = np.zeros(len(reference_qids), dtype=np.int64)
    counts[rows] = predicted_counts
    if (counts == 0).any():
        logger.warning(
            f"moment_retrieval_metrics: {int((counts == 0).sum())} of {len(counts)} queries have no predictions and "
            f"score 0 (e.g. qid {reference_qids[int(np.flatnonzero(counts == 0)[0])]!r})."
        )
    return windows, counts


def _first_prediction_best_iou(
    windows: np.ndarray, counts: np.ndarray, annotated: np.ndarray, annotated_counts: np.ndarray
) -> np.ndarray:
    """`(queries,)` IoU of each query's first listed prediction with the annotated window it overlaps most (0 if none).

    As the script does, the window is chosen by the IoU over ``len(A) + len(B) − |A ∩ B|`` and its IoU then taken
    over the hull ``max(ends) − min(starts)``: equal whenever the windows overlap, but not always to the last bit.
    """
    first = windows[:, :1, :2]  # (queries, 1, 2)
    rows = np.arange(len(windows))
    chosen = np.argmax(_iou(first, annotated, annotated_counts)[:, 0], axis=1)
    start, end = first[:, 0, 0], first[:, 0, 1]
    annotated_start, annotated_end = annotated[rows, chosen, 0], annotated[rows, chosen, 1]
    intersection = np.maximum(0.0, np.minimum(end, annotated_end) - np.maximum(start, annotated_start))
    hull = np.maximum(end, annotated_end) - np.minimum(start, annotated_start)
    return np.where(counts > 0, intersection / hull, 0.0)


def _iou(windows: np.ndarray, annotated: np.ndarray, annotated_counts: np.ndarray) -> np.ndarray:
    """`(queries, n, max_annotated)` IoU of `windows` `(queries, n, ≥2)` with `annotated` `(queries, max_annotated, 2)`;
    -inf against padding, so that no threshold is reached and no argmax lands there."""
    start, end = windows[:, :, None, 0], windows[:, :, None, 1]
    annotated_start, annotated_end = annotated[:, None, :, 0], annotated[:, None, :, 1]
    intersection = np.clip(np.minimum(end, annotated_end) - np.maximum(start, annotated_start), 0.0, None)
    union = (end - start) + (annotated_end - annotated_start) - intersection
    is_annotated = np.arange(annotated.shape[1]) < annotated_counts[:, None, None]
    return np.where(is_annotated, intersection / np.where(is_annotated, union, 1.0), -np.inf)


def _average_precision(
    windows: np.ndarray, counts: np.ndarray, annotated: np.ndarray, annotated_counts: np.ndarray
) -> np.ndarray:
    """`(queries, thresholds)` VOC-interpolated detection AP of each query at each of :data:`MOMENT_IOU_THRESHOLDS`.

    Laid out with the queries last, so that each step of the greedy matching is one operation over every query and
    threshold: the loops run over the (at most 10) prediction ranks and the annotated-window slots (the most windows
    a query has), which is 4x faster than reducing over a short last axis of windows (measured at 10k queries).
    """
    n_queries, n_ranks = windows.shape[:2]
    n_thresholds, n_slots = len(MOMENT_IOU_THRESHOLDS), annotated.shape[1]
    is_prediction = np.arange(n_ranks) < counts[:, None]  # (queries, ranks)
    # By decreasing score, ties in listed order; padding (score -inf) last.
    order = np.argsort(-np.where(is_prediction, windows[:, :, 2], -np.inf), axis=1, kind="stable")
    ranked = np.take_along_axis(windows, order[:, :, None], axis=1)
    iou = np.where(is_prediction[:, :, None], _iou(ranked, annotated, annotated_counts), -np.inf)
    iou = np.ascontiguousarray(iou.transpose(1, 2, 0))  # (ranks, slots, queries)
    thresholds = np.array(MOMENT_IOU_THRESHOLDS)[:, None]
    matched = np.zeros((n_slots, n_thresholds, n_queries), dtype=bool)
    true_positive = np.zeros((n_ranks, n_thresholds, n_queries), dtype=bool)
    for rank in range(n_ranks):  # greedy: each prediction takes its best unmatched window, in score order
        best_iou = np.full((n_thresholds, n_queries), -np.inf)
        best_slot = np.zeros((n_thresholds, n_queries), dtype=np.int64)
        for slot in range(n_slots):  # strictly better only, so the first listed of equal IoUs wins
            slot_iou = iou[rank, slot]
            better = (slot_iou >= thresholds) & ~matched[slot] & (slot_iou > best_iou)
            best_iou = np.where(better, slot_iou, best_iou)
            best_slot[better] = slot
        hit = best_iou > -np.inf
        true_positive[rank] = hit
        for slot in range(n_slots):
            matched[slot] |= hit & (best_slot == slot)
    # A real prediction is a hit or a miss, so after the k-th the precision is TP_k / k; past a query's last
    # prediction TP stays and k grows, which lowers the precision and leaves every max_{j >= k} p_j unchanged.
    # Recall grows by 1 / G at each hit, so VOC's sum is Σ_k hit_k · max_{j >= k} p_j / G.
    precision = np.cumsum(true_positive, axis=0, dtype=np.int8) / np.arange(1, n_ranks + 1)[:, None, None]
    interpolated = np.maximum.accumulate(precision[::-1], axis=0)[::-1]  # max_{j >= k} p_j
    return (np.where(true_positive, interpolated, 0.0).sum(axis=0) / annotated_counts).T
