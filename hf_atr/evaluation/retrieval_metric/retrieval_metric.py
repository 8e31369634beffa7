"""Deprecated home of the `evaluate` retrieval metric: ``evaluate.load("hf_atr/evaluation/retrieval_metric")``.

The metric moved to ``hf_atr/metrics/retrieval_metric`` (load it with
``hf_atr.metrics.retrieval.load_retrieval_metric()``). Loading it from here still works and gives the same
metric, with an :class:`~hf_atr.deprecation.HfAtrDeprecationWarning` naming the new path.
"""

from __future__ import annotations

import warnings
from typing import Any

from hf_atr.deprecation import HfAtrDeprecationWarning

# The module, not its class: evaluate.load takes the first metric class it finds in this module's namespace.
from hf_atr.metrics.retrieval_metric import retrieval_metric as current

OLD_PATH = "hf_atr/evaluation/retrieval_metric"
NEW_PATH = "hf_atr/metrics/retrieval_metric"


class RetrievalMetric(current.RetrievalMetric):
    """The retrieval metric of ``hf_atr/metrics/retrieval_metric``, loaded from its old path (deprecated)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            f'evaluate.load("{OLD_PATH}") is deprecated and will be removed in a future version; load '
            f'"{NEW_PATH}" (or call hf_atr.metrics.retrieval.load_retrieval_metric()), the same metric.',
            HfAtrDeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)
