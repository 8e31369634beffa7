"""Moment retrieval evaluation: a dual encoder's moments for every query of a moment dataset, scored with the
Moment-DETR metrics, and the report with each sampled query's timeline.

Each recording is decoded once per evaluator (the waveforms are kept across calls, so that evaluating during
training does not decode the recordings again) and encoded once per call, window by window
(:func:`~hf_atr.windowing.moment_windowing`: the extractor's window every ``hop_seconds``, as ``pipe.moments``
scores a recording); every query of that recording is then scored against its windows by the model's head, and its
similarity curve becomes moments by the proposer of a :class:`~hf_atr.moments.proposal.MomentProposalConfig` (the
refined default or the AMR paper's sliding-window baseline). :func:`~hf_atr.metrics.moments.moment_retrieval_metrics`
reads the predictions (``qid``, ``pred_relevant_windows``) against the annotations. Recordings that cannot be
decoded are left out with their queries and named in the protocol (``strict=True`` stops at the first).

What one evaluation costs: the first call decodes (and resamples) every recording, and the evaluator then holds
the waveforms, 4 bytes per sample at the processor's rate (230 MB per hour of audio at 16 kHz). Every call,
the first included, extracts the features of and runs the audio tower on every window (about ``duration /
hop_seconds`` windows per recording, ``batch_size`` per forward pass), the text tower on every query, and the
proposer on every query's curve (a few milliseconds).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_atr.data.audio_arrays import AudioDecodeError

from ..audio_encoding import SkippedAudio, encode_audio_windows
from ..data.audio import decode_audio
from ..data.moments import is_moment_dataset, moment_recordings, query_text_for_model, windows_inside
from ..encoding import encode_text
from ..lazy import get_logger
from ..metrics.moments import MOMENT_RETRIEVAL_TASK, moment_retrieval_metrics
from ..moments.curve import SimilarityCurve
from ..moments.proposal import MomentProposalConfig, prediction_record, propose_moments
from ..windowing import Windowing, moment_windowing
from .report import REPORT_FILE, ReportFigure, write_html_report

logger = get_logger(__name__)

DEFAULT_TIMELINES = 6
"""Queries drawn in the report's timeline figure."""
TIMELINE_FILE = "moment_timelines.png"
PREDICTIONS_FILE = "predictions.jsonl"
"""The predictions file ``hf-atr evaluate --moments`` writes beside its report."""
METRIC_CONVENTION = (
    "Moment-DETR's standalone evaluation (line/lighthouse): R1 from the first prediction, mAP over at most 10 "
    "predictions per query; fractions, a query without predictions scores 0, ties ordered stably"
)


@dataclass
class MomentEvaluation:
    """What :meth:`MomentEvaluator.evaluate` found.

    Attributes:
        metrics: ``{"R1@0.5", "R1@0.7", "mAP@0.5", "mAP@0.75", "mAP"}`` as fractions.
        protocol: how they were obtained (model, proposer, window and hop, queries, recordings, skipped ones).
        predictions: one record per evaluated query, in the dataset's order: ``{"qid", "query", "vid",
            "pred_relevant_windows": [[start, end, score], ...]}`` best first, the query as the dataset holds it.
        curves: each evaluated query's similarity curve, by ``qid``.
    """

    metrics: dict[str, float]
    protocol: dict[str, Any]
    predictions: list[dict[str, Any]]
    curves: dict[str, SimilarityCurve] = field(repr=False)

    def write_predictions(self, path: str | os.PathLike) -> Path:
        """Write :attr:`predictions` as JSON Lines (the Moment-DETR predictions format) to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(record) + "\n" for record in self.predictions), encoding="utf-8")
        return path


@dataclass
class _DecodedRecordings:
    """The recordings of a moment dataset, decoded once (what :class:`MomentEvaluator` keeps across calls).

    Attributes:
        key: what they were decoded from: the dataset's fingerprint and the sampling rate.
        rows: ``{"audio": (samples,) float32 at the processor's rate, "audio_id": recording_id}`` of each
            decodable recording.
        recordings: the ``rows``' positions among the dataset's recordings (:func:`~hf_atr.data.moments
            .moment_recordings`), and ``total`` the number of those.
        recording_of: per query, the position of its recording.
        skipped: the recordings that could not be decoded.
        columns: the ``recording_id``, ``qid``, ``query`` and ``windows`` columns, and ``texts`` the queries as the
            model reads them.
    """

    key: tuple[Any, int]
    rows: list[dict[str, Any]]
    recordings: list[int]
    total: int
    recording_of: list[int]
    skipped: list[SkippedAudio]
    columns: dict[str, list[Any]]
    texts: list[str]


class MomentEvaluator:
    """Evaluate a model's moments on a moment dataset (module docstring, with what one evaluation costs).

    Calling it with a model returns the metrics (:meth:`evaluate` for the predictions and curves too), as
    :class:`~hf_atr.AtrTrainer` (``evaluator=``) does during training; the recordings are decoded on the first
    call and kept for the next ones, as long as ``moments`` is the same dataset (its fingerprint).

    Args:
        moments: a moment dataset (:func:`~hf_atr.data.moments.load_moments`: ``audio``, ``recording_id``,
            ``duration``, ``qid``, ``query``, ``windows``).
        processor: the model's :class:`~hf_atr.AtrProcessor`.
        proposal: the proposer and its parameters (default: the refined proposer's defaults).
        hop_seconds: the hop of the scored windows (default
            :data:`~hf_atr.windowing.DEFAULT_MOMENT_HOP_SECONDS`).
        window_seconds: the window length (default the feature extractor's).
        batch_size: windows per forward pass.
        strict: stop at the first recording that cannot be decoded instead of leaving it out.
        show_progress: progress bars while encoding.
        split: names the split in the protocol.

    Raises:
        ValueError: a dataset without the moment columns, or a window/hop the extractor cannot read.
    """

    name = "moments"
    """What its metrics are called among several evaluators (``eval_moments_mAP``)."""
    primary_metric = "mAP"
    """The metric a best model is chosen by: mAP averaged over the IoU thresholds 0.5:0.05:0.95."""
    greater_is_better = True

    def __init__(
        self,
        moments: Any,
        processor: Any,
        *,
        proposal: MomentProposalConfig | None = None,
        hop_seconds: float | None = None,
        window_seconds: float | None = None,
        batch_size: int = 32,
        strict: bool = False,
        show_progress: bool = False,
        split: str | None = None,
    ) -> None:
        if not is_moment_dataset(moments):
            raise ValueError(
                "A moment evaluation needs a moment dataset (hf_atr.load_moments: audio, recording_id, duration, "
                f"qid, query, windows); got the columns {getattr(moments, 'column_names', None)}."
            )
        self.moments = moments
        self.processor = processor
        self.proposal = proposal or MomentProposalConfig()
        self.windowing = moment_windowing(
            Windowing(window_seconds=window_seconds), processor.feature_extractor, hop_seconds
        )
        self.batch_size = batch_size
        self.strict = strict
        self.show_progress = show_progress
        self.split = split
        self.protocol: dict[str, Any] = {}
        self._decoded: _DecodedRecordings | None = None

    @property
    def dataset(self) -> Any:
        """The moment dataset evaluated (``moments``)."""
        return self.moments

    def _decoded_recordings(self) -> _DecodedRecordings:
        """Every recording decoded at the processor's rate, once: kept while ``moments`` keeps its fingerprint.

        Raises:
            AudioDecodeError: with ``strict``, the first recording that cannot be decoded.
        """
        rate = self.processor.sampling_rate
        key = (getattr(self.moments, "_fingerprint", None) or id(self.moments), rate)
        if self._decoded is not None and self._decoded.key == key:
            return self._decoded
        self._decoded = None  # a changed dataset: the old waveforms go before the new ones are decoded
        recordings, recording_of = moment_recordings(self.moments)
        rows, kept, skipped = [], [], []
        for index in range(len(recordings)):  # one recording's bytes at a time
            row = recordings[index]
            recording_id, audio = row["recording_id"], row["audio"]
            try:
                rows.append(
                    {"audio": decode_audio(audio, rate, source=recording_id), "audio_id": recording_id}
                )
            except AudioDecodeError as error:
                if self.strict:
                    raise
                skipped.append(SkippedAudio(index, recording_id, error.reason))
                continue
            kept.append(index)
        columns = self.moments.select_columns(["recording_id", "qid", "query", "windows"]).to_dict()
        texts = [query_text_for_model(query) for query in columns["query"]]
        self._decoded = _DecodedRecordings(
            key, rows, kept, len(recordings), recording_of, skipped, columns, texts
        )
        return self._decoded

    def evaluate(self, model: Any) -> MomentEvaluation:
        """Encode each recording once, score its queries, propose their moments and compute the metrics."""
        decoded = self._decoded_recordings()
        columns, recording_of = decoded.columns, decoded.recording_of
        encoded = encode_audio_windows(
            model,
            self.processor,
            decoded.rows,
            windowing=self.windowing,
            batch_size=self.batch_size,
            show_progress=self.show_progress,
            description="Encoding recordings",
        )
        text_embeds = encode_text(model, self.processor, decoded.texts, show_progress=self.show_progress)
        head = model.scoring_head
        device = head.logit_scale.device
        indices = encoded.clip_indices.numpy()
        queries_of: dict[int, list[int]] = {}
        for query, recording in enumerate(recording_of):
            queries_of.setdefault(recording, []).append(query)
        records: dict[int, dict[str, Any]] = {}
        curves: dict[str, SimilarityCurve] = {}
        for position in encoded.kept_clips:
            rows = np.flatnonzero(indices == position)
            recording = decoded.recordings[position]
            queries = queries_of[recording]
            with torch.no_grad():
                scores = (
                    head.similarity(text_embeds[queries].to(device), encoded.embeddings[rows].to(device))
                    .double()
                    .cpu()
                    .numpy()
                )
            starts, ends = encoded.starts[rows].numpy(), encoded.ends[rows].numpy()
            for query, query_scores in zip(queries, scores):
                curve = SimilarityCurve(starts, ends, query_scores)
                qid = columns["qid"][query]
                curves[qid] = curve
                records[query] = prediction_record(
                    qid,
                    propose_moments(curve, self.proposal),
                    query=columns["query"][query],
                    vid=columns["recording_id"][query],
                )
        evaluated = sorted(records)
        predictions = [records[query] for query in evaluated]
        references = [
            {"qid": columns["qid"][query], "relevant_windows": columns["windows"][query]}
            for query in evaluated
        ]
        if not references:
            raise ValueError(
                f"No recording of the {decoded.total} could be decoded, so no query could be evaluated: "
                f"{[(skipped.name, skipped.reason) for skipped in decoded.skipped[:5]]}."
            )
        metrics = moment_retrieval_metrics(predictions, references)
        window, hop = self.windowing.samples(self.processor.feature_extractor)
        rate = self.processor.sampling_rate
        self.protocol = {
            "task": MOMENT_RETRIEVAL_TASK,
            "model": getattr(model, "name_or_path", None) or type(model).__name__,
            "split": self.split,
            "queries": len(evaluated),
            "recordings": len(encoded.kept_clips),
            "audio_seconds": round(sum(encoded.durations.values()), 3),
            "window_seconds": window / rate,
            "hop_seconds": hop / rate,
            "scoring": getattr(model.config, "scoring", None),
            "proposal": asdict(self.proposal),
            "metrics": METRIC_CONVENTION,
            "skipped_recordings": [
                {"recording": skipped.name, "reason": skipped.reason} for skipped in decoded.skipped
            ],
            "skipped_queries": len(self.moments) - len(evaluated),
        }
        return MomentEvaluation(metrics, dict(self.protocol), predictions, curves)

    def __call__(self, model: Any) -> dict[str, float]:
        """The metrics of :meth:`evaluate` (its protocol in :attr:`protocol`): what
        :func:`~hf_atr.training.final_model.evaluate_and_save` and :class:`~hf_atr.AtrTrainer` call."""
        return self.evaluate(model).metrics

    def write_report(
        self,
        evaluation: MomentEvaluation,
        directory: str | os.PathLike,
        *,
        timelines: int = DEFAULT_TIMELINES,
        seed: int = 0,
    ) -> Path:
        """Write ``report.html`` (metrics, the timeline figure of ``timelines`` queries drawn with ``seed``, the
        protocol) and the figure's PNG to ``directory``; returns the page's path.

        Raises:
            ImportError: matplotlib is not installed (``pip install 'hf-atr[plots]'``).
        """
        from hf_atr.plots.canvas import save_figure
        from hf_atr.plots.moments import MomentTimeline, moment_timeline_figure

        directory = Path(directory)
        by_qid = {record["qid"]: record for record in evaluation.predictions}
        rows = [row for row, qid in enumerate(self.moments["qid"]) if qid in by_qid]
        chosen = sorted(
            np.random.default_rng(seed).choice(rows, size=min(timelines, len(rows)), replace=False)
        )
        shown = []
        outside = 0  # annotated windows with no length inside their recording: not drawn
        for row in chosen:
            moment = self.moments[int(row)]
            curve = evaluation.curves[moment["qid"]]
            annotated = windows_inside(moment["windows"], moment["duration"])
            outside += len(moment["windows"]) - len(annotated)
            shown.append(
                MomentTimeline(
                    query=moment["query"],
                    times=(curve.starts + curve.ends) / 2,
                    scores=curve.scores,
                    predicted=by_qid[moment["qid"]]["pred_relevant_windows"],
                    annotated=annotated,
                    recording=moment["recording_id"],
                    duration=moment["duration"],
                )
            )
        figure_path = save_figure(moment_timeline_figure(shown), directory / TIMELINE_FILE)
        caption = (
            f"{len(shown)} of {len(rows)} queries drawn at random (seed {seed}): the similarity of the query and each "
            "window (drawn at its centre), the annotated moments shaded (clipped to the recording), the best three "
            "predicted moments as bars"
        )
        if outside:
            caption += f"; {outside} annotated window(s) lying wholly outside their recording are not drawn"
            logger.warning(
                f"Moment timelines: {outside} annotated window(s) of the queries drawn lie wholly outside their "
                "recording and are not drawn."
            )
        table = [
            (
                "Moment retrieval (in %)",
                list(evaluation.metrics),
                [[f"{100 * v:.2f}" for v in evaluation.metrics.values()]],
            )
        ]
        note = (
            f"{evaluation.protocol['queries']} queries over {evaluation.protocol['recordings']} recordings; "
            f"proposer {self.proposal.proposer}; {METRIC_CONVENTION}."
        )
        return write_html_report(
            directory / REPORT_FILE,
            "Moment retrieval",
            note,
            table,
            [ReportFigure(figure_path, caption)],
            evaluation.protocol,
        )


__all__ = ["DEFAULT_TIMELINES", "PREDICTIONS_FILE", "MomentEvaluation", "MomentEvaluator", "TIMELINE_FILE"]
