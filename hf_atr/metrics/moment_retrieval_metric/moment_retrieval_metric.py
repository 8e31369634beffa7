"""`evaluate` metric for moment retrieval: a thin wrapper around `hf_atr.metrics.moments`.

Load it offline with ``hf_atr.metrics.moments.load_moment_retrieval_metric()`` or
``evaluate.load("<path to this directory>")``.
"""

from __future__ import annotations

from typing import Any

import datasets
import evaluate

from hf_atr.metrics.moments import moment_retrieval_metrics

_DESCRIPTION = """
Moment retrieval metrics of Moment-DETR's standalone evaluation (used by Lighthouse and DCASE 2026 audio moment
retrieval), as fractions in [0, 1]: R1@0.5 and R1@0.7 (the first listed prediction's IoU with the annotated window it
overlaps most reaches the threshold), mAP@0.5, mAP@0.75 and mAP over IoU 0.50:0.05:0.95 (greedy score-ordered
ActivityNet detection AP with VOC interpolation per query, averaged over queries), over the first 10 predictions
of each query as listed. Records are matched by qid, not by position. A query with an empty prediction list scores
0; predictions of equal score keep their listed order; a prediction matches the first listed of equally
overlapped annotated windows.
"""

_CITATION = """
@inproceedings{lei2021detecting,
  title = {Detecting Moments and Highlights in Videos via Natural Language Queries},
  author = {Lei, Jie and Berg, Tamara L. and Bansal, Mohit},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2021}
}
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one record per query, {"qid": ..., "pred_relevant_windows": [[start, end, score], ...]};
        an empty list for a query without predictions.
    references: one record per query, {"qid": ..., "relevant_windows": [[start, end], ...]} (seconds).
        qids are all strings or all integers, the same in both lists.
Returns:
    dict of floats: R1@0.5, R1@0.7, mAP@0.5, mAP@0.75, mAP.
Examples:
    >>> from hf_atr.metrics.moments import load_moment_retrieval_metric
    >>> metric = load_moment_retrieval_metric()
    >>> metric.compute(
    ...     predictions=[{"qid": 1, "pred_relevant_windows": [[0.0, 10.0, 0.9]]}],
    ...     references=[{"qid": 1, "relevant_windows": [[0.0, 10.0]]}],
    ... )["R1@0.7"]
    1.0
"""

_WINDOWS = datasets.Sequence(datasets.Sequence(datasets.Value("float64")))
_FIELDS = {"predictions": ("qid", "pred_relevant_windows"), "references": ("qid", "relevant_windows")}


def _stored(name: str, record: Any) -> Any:
    """A record with only the fields the metric stores: evaluate's format check fails (KeyError) on any other key,
    and a JSONL record also holds `query`, `vid`, `duration`. Anything but a dict is left to that check."""
    return (
        {key: record[key] for key in _FIELDS[name] if key in record} if isinstance(record, dict) else record
    )


def _stored_batches(predictions: list | None, references: list | None) -> dict[str, list | None]:
    """``predictions=`` and ``references=`` of evaluate's batch calls, each record with only its stored fields."""
    return {
        name: None if records is None else [_stored(name, record) for record in records]
        for name, records in (("predictions", predictions), ("references", references))
    }


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MomentRetrievalMetric(evaluate.Metric):
    """Moment retrieval metrics over prediction and reference records matched by qid."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # Arrow needs one type per column: string qids (CASTELLA, Clotho-Moment) or integer ones (QVHighlights).
            features=[
                datasets.Features(
                    {
                        "predictions": {"qid": qid, "pred_relevant_windows": _WINDOWS},
                        "references": {"qid": qid, "relevant_windows": _WINDOWS},
                    }
                )
                for qid in (datasets.Value("string"), datasets.Value("int64"))
            ],
            reference_urls=["https://arxiv.org/abs/2107.09609", "https://github.com/line/lighthouse"],
        )

    def add(self, *, prediction: dict | None = None, reference: dict | None = None, **kwargs: Any) -> None:
        """Add one prediction and reference record (fields other than qid and the windows are dropped)."""
        super().add(
            prediction=_stored("predictions", prediction),
            reference=_stored("references", reference),
            **kwargs,
        )

    def add_batch(
        self, *, predictions: list | None = None, references: list | None = None, **kwargs: Any
    ) -> None:
        """Add prediction and reference records (fields other than qid and the windows are dropped)."""
        super().add_batch(**_stored_batches(predictions, references), **kwargs)

    def compute(
        self, *, predictions: list | None = None, references: list | None = None, **kwargs: Any
    ) -> Any:
        """The metrics of these records and those added before (fields other than qid and the windows are dropped)."""
        return super().compute(**_stored_batches(predictions, references), **kwargs)

    def _compute(self, predictions: list[dict], references: list[dict]) -> dict[str, float]:
        return moment_retrieval_metrics(predictions, references)
