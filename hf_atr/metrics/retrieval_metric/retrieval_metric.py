"""`evaluate` metric for audio-text retrieval: a thin wrapper around `hf_atr.metrics.retrieval`.

Load it offline with ``hf_atr.metrics.retrieval.load_retrieval_metric()`` or
``evaluate.load("<path to this directory>")``.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from hf_atr.metrics.ranks import DEFAULT_KS, DEFAULT_MAP_CUTOFFS
from hf_atr.metrics.retrieval import retrieval_metrics

_DESCRIPTION = """
Text-to-audio (T2A) and audio-to-text (A2T) retrieval metrics: R@k, mAP@c at any cutoffs and median/mean
rank, with per-language values and the mean rank variance (MRV, ATRI Eq. 16) for multilingual
evaluation. A caption may have several relevant clips (DCASE 2025); a clip's relevant captions are those
that list it. Ties count against the relevant item: its 0-based position is the number of irrelevant
items scoring higher than or equal to it (plus i - 1 for the i-th best of several relevant items), so a
collapsed model that scores everything equally ranks last. R@k counts a query as found if any relevant
item is in the top k; recall_fraction@k averages the fraction of its relevant items there (A2T always,
T2A when a caption has several relevant clips). Each language's captions form their own A2T gallery.
Computed chunk-wise without sorting the score matrix.
"""

_CITATION = """
@inproceedings{mei2022metric,
  title = {On Metric Learning for Audio-Text Cross-Modal Retrieval},
  author = {Mei, Xinhao and Liu, Xubo and Sun, Jianyuan and Plumbley, Mark D. and Wang, Wenwu},
  booktitle = {Interspeech},
  year = {2022}
}
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one score row per caption, `(n_audio,)` floats each (higher is more similar).
    references: each caption's relevant clip: an int in [0, n_audio), or a list of such ints when a
        caption has several relevant clips (use one form for every caption: wrap single clips as [c]).
    languages (optional): the language of each caption (e.g. "eng", "fra"); adds per-language keys
        "<metric>/<lang>" and makes the un-suffixed keys their mean.
    caption_groups (optional, needs languages): equal for the translations of one caption; adds "MRV".
    ks (optional): R@k cutoffs, default (1, 5, 10).
    map_cutoffs (optional): mAP cutoffs, default (10,); e.g. (10, 16) for DCASE 2025's mAP@16.
    map_cutoff (optional, deprecated): alias of map_cutoffs=(map_cutoff,).
Returns:
    dict of floats: t2a_R@k, a2t_R@k, a2t_recall_fraction@k, [t2a_recall_fraction@k], t2a_mAP@c,
    a2t_mAP@c, t2a_median_rank, t2a_mean_rank, a2t_median_rank, a2t_mean_rank (ranks 1-based), [MRV].
Examples:
    >>> from hf_atr.metrics.retrieval import load_retrieval_metric
    >>> metric = load_retrieval_metric()
    >>> metric.compute(predictions=[[0.9, 0.1], [0.2, 0.7]], references=[0, 1], ks=(1,))["t2a_R@1"]
    1.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RetrievalMetric(evaluate.Metric):
    """Audio-text retrieval metrics over one score row per caption."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # Array2D fixes every dimension but the first, so the matrix travels as one row per caption;
            # references are one clip index per caption or (DCASE 2025) a list of relevant clips each.
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Sequence(datasets.Value("float32")),
                        "references": references,
                    }
                )
                for references in (datasets.Value("int64"), datasets.Sequence(datasets.Value("int64")))
            ],
            reference_urls=["https://arxiv.org/abs/2203.15537"],
        )

    def _compute(
        self,
        predictions: list[list[float]],
        references: list[int] | list[list[int]],
        languages: list | None = None,
        caption_groups: list | None = None,
        ks: tuple[int, ...] = DEFAULT_KS,
        map_cutoffs: tuple[int, ...] = DEFAULT_MAP_CUTOFFS,
        map_cutoff: int | None = None,
    ) -> dict[str, float]:
        row_lengths = {len(row) for row in predictions}
        if len(row_lengths) > 1:
            raise ValueError(
                f"predictions must be score rows of one length (the number of clips), got lengths {sorted(row_lengths)}."
            )
        scores = np.asarray(predictions, dtype=np.float32).reshape(len(predictions), -1)
        return retrieval_metrics(
            scores,
            references,
            languages=languages,
            caption_groups=caption_groups,
            ks=ks,
            map_cutoffs=map_cutoffs,
            map_cutoff=map_cutoff,
        )
