"""Retrieval metrics of a model on an evaluation set: its clips encoded once (:mod:`~hf_atr.evaluation.clip_evaluator`),
its captions once, scored by the model's head or an OT plan (:mod:`~hf_atr.evaluation.ot_scoring`) and ranked
(:mod:`hf_atr.metrics.retrieval`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging

from ..audio_encoding import EvaluatedClips
from ..data.relevance import load_relevance_judgements
from ..data.schema import ENGLISH, corpus_provenance, official_clip_count
from ..encoding import CaptionTable, caption_table, encode_text
from ..metrics.ranks import DEFAULT_KS, DEFAULT_MAP_CUTOFFS, TIE_RULE, RetrievalRanks
from ..metrics.retrieval import retrieval_ranks, retrieval_ranks_from_embeddings
from ..plots.canvas import require_matplotlib
from ..processing_atr import AtrProcessor
from ..windowing import Windowing
from .clip_evaluator import ClipEvaluator, EvaluationReport, describe_split, head_similarity
from .ot_scoring import TRANSPORT_BATCH_SIZE, batch_transport, ot_plan_scores
from .report import write_retrieval_report

logger = logging.get_logger(__name__)

SCORING_MODES = ("head", "ot_plan")
COLLAPSE_RELATIVE_VARIANCE = 1e-6
"""Embeddings whose variance across clips (or captions) is below this fraction of their mean squared norm
count as collapsed: every item then scores (nearly) the same against every query."""


def embedding_spread(embeds: torch.Tensor) -> float:
    """Total variance of the rows over their mean squared norm: 0 when every row is the same.

    About 1 for unit vectors spread around the sphere (``1 - ||mean||^2`` for unit rows).

    Args:
        embeds: ``(n, dim)``, ``n >= 1``.
    """
    embeds = embeds.double()
    mean_square_norm = embeds.pow(2).sum(dim=1).mean()
    if mean_square_norm == 0:
        return 0.0
    return float(embeds.var(dim=0, unbiased=False).sum() / mean_square_norm)


@dataclass
class _Queries:
    """The captions evaluated (rows of a :class:`CaptionTable`) with their relevant clips."""

    captions: list[str]
    text_to_audio: torch.Tensor | list[list[int]]
    languages: list[str]
    caption_groups: torch.Tensor
    without_judgement: int = 0


def _judged_queries(table: CaptionTable, relevance: Mapping[str, Sequence[int]]) -> _Queries:
    """The captions of `table` that relevance judgements cover, each with its judged clips.

    A judged English caption is evaluated once (its first row, should the text recur); a translation
    takes the judged clips of its English caption (same caption group) and is left out with it.
    """
    judged_groups: dict[int, list[int]] = {}
    seen = set()
    for caption, language, group in zip(table.captions, table.languages, table.caption_groups.tolist()):
        if language == ENGLISH and caption in relevance and caption not in seen:
            seen.add(caption)
            judged_groups[group] = [int(clip) for clip in relevance[caption]]
    if not judged_groups:
        raise ValueError(
            f"None of the {table.languages.count(ENGLISH)} English captions of the evaluation set has "
            "relevance judgements; check that the judgements belong to this split."
        )
    rows = [row for row, group in enumerate(table.caption_groups.tolist()) if group in judged_groups]
    return _Queries(
        captions=[table.captions[row] for row in rows],
        text_to_audio=[judged_groups[int(table.caption_groups[row])] for row in rows],
        languages=[table.languages[row] for row in rows],
        caption_groups=table.caption_groups[rows],
        without_judgement=len(table.captions) - len(rows),
    )


def _queries_on_clips(queries: _Queries, kept_clips: Sequence[int]) -> _Queries:
    """``queries`` restricted to the clips ``kept_clips`` (sorted dataset rows) and re-indexed to them: a
    query keeps its relevant clips that were kept and is dropped when none was."""
    new_index = {clip: position for position, clip in enumerate(kept_clips)}
    rows, relevant = [], []
    for row, clips in enumerate(queries.text_to_audio):
        clips = [int(clip) for clip in clips] if isinstance(clips, (list, tuple)) else [int(clips)]
        kept = [new_index[clip] for clip in clips if clip in new_index]
        if kept:
            rows.append(row)
            relevant.append(kept)
    one_each = isinstance(queries.text_to_audio, torch.Tensor)
    return _Queries(
        captions=[queries.captions[row] for row in rows],
        text_to_audio=torch.tensor([clips[0] for clips in relevant], dtype=torch.long)
        if one_each
        else relevant,
        languages=[queries.languages[row] for row in rows],
        caption_groups=queries.caption_groups[rows],
        without_judgement=queries.without_judgement,
    )


@dataclass
class _EncodedSplit:
    """What :meth:`RetrievalEvaluator._encode` returns: the clips, the queries on them and their embeddings
    (``text_embeds: (len(queries.captions), dim)``)."""

    clips: EvaluatedClips
    text_embeds: torch.Tensor
    queries: _Queries


def retrieval_primary_metric(
    ks: Sequence[int] = DEFAULT_KS, map_cutoffs: Sequence[int] = DEFAULT_MAP_CUTOFFS
) -> str:
    """The metric a retrieval evaluation ranks models by: text-to-audio ``mAP@c`` at the first of ``map_cutoffs``
    (DCASE's ranking metric, ``t2a_mAP@10`` by default), else ``R@k`` at the first of ``ks``; with several
    languages, the key of their mean."""
    return f"t2a_mAP@{map_cutoffs[0]}" if map_cutoffs else f"t2a_R@{ks[0]}"


class RetrievalEvaluator(ClipEvaluator):
    """Retrieval metrics of a model on one evaluation set: encode every clip and caption once, then score.

    Args:
        dataset: shared-schema dataset with precomputed audio features (or raw ``audio``).
        processor: the model's :class:`~hf_atr.AtrProcessor` (tokenises captions, featurises raw audio).
        languages: caption languages to evaluate (``None``: English). With several, per-language keys
            carry a ``/<lang>`` suffix, un-suffixed keys are the mean over languages, and ``MRV`` is added.
        split: name of the evaluation set (e.g. ``"test"``), used in warnings and recorded in `protocol`.
        relevance: relevance judgements (several relevant clips per caption, DCASE 2025): a CSV file read
            by :func:`~hf_atr.data.relevance.load_relevance_judgements`, or a mapping ``{English caption:
            [clip row index, ...]}``. Only judged captions are evaluated (translations take their English
            caption's clips); ``None``: each caption's own clip is its only relevant item.
        relevance_threshold, relevance_missing: `threshold` and `missing` of the loader, for a CSV file.
        ks, map_cutoffs: cutoffs of R@k and mAP@c.
        windowing: ``None`` (default): each clip is one forward pass of what the processor prepares, the
            model's own protocol (an AST, Whisper or PANNs extractor reads the start of a longer clip, and
            the cut clips are named in one warning; CLAP fusion reads the whole clip). A
            :class:`~hf_atr.windowing.Windowing`: clips longer than the window are embedded window by window
            and pooled (extractors that handle long audio themselves keep their own embedding unless a
            window length is given).
        strict: ``False`` (default): a clip that cannot be decoded is left out with its captions (and
            dropped from judged relevant clips), reported in a warning and in ``protocol["skipped_clips"]``;
            ``True``: it raises :class:`~hf_atr.data.audio_arrays.AudioDecodeError`.

    Calling it with a model returns the flat dict of
    :func:`~hf_atr.metrics.retrieval.retrieval_metrics_from_embeddings` (ties count against the relevant
    item); scores come from the model's scoring head (cosine, or negative Euclidean/Mahalanobis
    distance), or with ``scoring="ot_plan"`` from the entropic OT plan between all captions of a language
    and all clips (m-LTM Eq. 5, regularisation ``ot_reg``), see :func:`~hf_atr.evaluation.ot_scoring.ot_plan_scores`. A warning naming
    the split is logged when the audio or caption embeddings have collapsed (:func:`embedding_spread`
    below :data:`COLLAPSE_RELATIVE_VARIANCE`).

    ``protocol`` is the JSON-ready record of how the figures are obtained: ``tie_rule``, ``split``,
    ``clips``, ``official_clips`` (the split's size in its official release, from the dataset's provenance;
    ``None`` when unknown), ``corpus`` (that provenance: corpus, release, layout, clips found and skipped,
    filters; :func:`~hf_atr.data.schema.corpus_provenance`), ``captions`` (queries evaluated),
    ``languages``, ``relevance`` (``"own clip"`` or ``"judgements"``) with ``relevance_file``,
    ``relevance_threshold``, ``captions_without_judgement`` and ``relevant_clips_per_caption``, ``ks``,
    ``map_cutoffs``, ``scoring`` (and ``ot_reg``), ``similarity`` (the model's scoring head, filled in by
    each call), ``window_pooling`` (``None``: each clip is encoded in one forward pass of the inputs the
    processor prepares; else ``{"pooling", "window_seconds", "hop_seconds"}``), and, filled in by each call,
    ``clips_cut_to_window`` (clips the extractor cut, the model's own protocol) and ``skipped_clips``
    (``[{"audio_id", "reason"}]``, left out as undecodable; ``clips`` and ``captions`` then count what was
    evaluated, against ``official_clips``).
    """

    name = "retrieval"

    def __init__(
        self,
        dataset: Any,
        processor: AtrProcessor,
        *,
        languages: Sequence[str] | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        scoring: str = "head",
        ot_reg: float = 0.05,
        split: str | None = None,
        relevance: str | os.PathLike | Mapping[str, Sequence[int]] | None = None,
        relevance_threshold: float | None = None,
        relevance_missing: str = "error",
        ks: Sequence[int] = DEFAULT_KS,
        map_cutoffs: Sequence[int] = DEFAULT_MAP_CUTOFFS,
        windowing: Windowing | None = None,
        strict: bool = False,
    ) -> None:
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}.")
        self.scoring = scoring
        self.ot_reg = ot_reg
        self.languages = list(languages) if languages else None
        self.ks = tuple(ks)
        self.map_cutoffs = tuple(map_cutoffs)
        super().__init__(
            dataset,
            processor,
            batch_size=batch_size,
            show_progress=show_progress,
            split=split,
            windowing=windowing,
            strict=strict,
        )
        if len(dataset) == 0:
            raise ValueError(f"{describe_split(split)} has no clips: nothing to evaluate.")
        self.table = caption_table(dataset, self.languages)
        if not self.table.captions:
            raise ValueError(
                f"{describe_split(split)} has no captions in {self.languages or [ENGLISH]}: nothing to evaluate."
            )
        relevance_file = None
        if isinstance(relevance, (str, os.PathLike)):
            relevance_file = str(Path(relevance).expanduser())
            relevance = load_relevance_judgements(
                relevance, dataset, threshold=relevance_threshold, missing=relevance_missing
            )
        elif relevance_threshold is not None:
            raise ValueError("relevance_threshold applies to a relevance file; pass relevance=<path>.")
        if relevance is None:
            self.queries = _Queries(
                self.table.captions, self.table.text_to_audio, self.table.languages, self.table.caption_groups
            )
        else:
            self.queries = _judged_queries(self.table, relevance)
        self.protocol = self._protocol(relevance_file, relevance_threshold, judged=relevance is not None)

    @property
    def primary_metric(self) -> str:
        """:func:`retrieval_primary_metric` of its cutoffs (``t2a_mAP@10`` by default)."""
        return retrieval_primary_metric(self.ks, self.map_cutoffs)

    def __call__(self, model: Any) -> dict[str, float]:
        return self._ranks(model, self._encode(model)).metrics(self.ks, self.map_cutoffs)

    def report(
        self,
        model: Any,
        output_dir: str | os.PathLike,
        *,
        title: str | None = None,
        transport_batch_size: int = TRANSPORT_BATCH_SIZE,
    ) -> EvaluationReport:
        """Evaluate ``model`` and write the figures and ``report.html`` into ``output_dir``.

        The metrics are those of ``self(model)`` (one encoding, one ranking pass); the page shows them with the
        R@k curves (k = 1..50, both directions, every language), the histogram of the true item's rank, the
        protocol, and, when the model's objective transports a batch (``iot``, ``iot_partial``, ``dart`` over
        an IOT base) or the evaluator scores by OT plan, :func:`~hf_atr.evaluation.ot_scoring.batch_transport` of the first
        ``transport_batch_size`` clips (:mod:`hf_atr.evaluation.report`).

        Needs matplotlib (``pip install 'hf-atr[plots]'``).

        Returns:
            The metrics and the page's path.
        """
        require_matplotlib()  # before encoding: nothing is computed in vain
        encoded = self._encode(model)
        ranks = self._ranks(model, encoded)
        metrics = ranks.metrics(self.ks, self.map_cutoffs)
        transport = batch_transport(
            model,
            self.processor,
            encoded.clips.dataset_rows(self.dataset),
            encoded.clips.embeddings,
            size=transport_batch_size,
            ot_reg=self.ot_reg if self.scoring == "ot_plan" else None,
        )
        path = write_retrieval_report(
            output_dir,
            ranks,
            metrics,
            self.protocol,
            title=title
            or f"Retrieval on {describe_split(self.split, capital=False)} ({self.protocol['clips']} clips)",
            transport=transport,
        )
        return EvaluationReport(metrics=metrics, path=path)

    def _encode(self, model: Any) -> _EncodedSplit:
        """Every clip (:meth:`~hf_atr.evaluation.clip_evaluator.ClipEvaluator.encode_clips`) and every query caption
        once, checked for collapse; the queries of clips that could not be decoded are left out (relevant clips
        re-indexed to the kept ones)."""
        clips = self.encode_clips(model)
        queries = self.queries if not clips.skipped else _queries_on_clips(self.queries, clips.kept)
        if not queries.captions:
            raise ValueError(
                f"Evaluating on {describe_split(self.split, capital=False)}: no clip with a caption could be decoded."
            )
        self.protocol["captions"] = len(queries.captions)
        text_embeds = encode_text(
            model,
            self.processor,
            queries.captions,
            batch_size=4 * self.batch_size,
            show_progress=self.show_progress,
        )
        self._warn_if_collapsed(clips.embeddings, "audio", "clip")
        # Judged on distinct captions: clips that share a caption share its embedding, collapsed or not.
        first_rows: dict[str, int] = {}
        for row, caption in enumerate(queries.captions):
            first_rows.setdefault(caption, row)
        self._warn_if_collapsed(text_embeds[list(first_rows.values())], "caption", "distinct caption")
        return _EncodedSplit(clips, text_embeds, queries)

    def _ranks(self, model: Any, encoded: _EncodedSplit) -> RetrievalRanks:
        """The positions behind the metrics: scores from the head (in chunks) or from the OT plan."""
        queries, audio_embeds, text_embeds = encoded.queries, encoded.clips.embeddings, encoded.text_embeds
        multilingual = self.languages is not None and len(self.languages) > 1
        arguments = {
            "languages": queries.languages if multilingual else None,
            "caption_groups": queries.caption_groups if multilingual else None,
        }
        if self.scoring == "ot_plan":
            scores = ot_plan_scores(model, text_embeds, audio_embeds, queries.languages, reg=self.ot_reg)
            return retrieval_ranks(scores, queries.text_to_audio, **arguments)
        # Cosine and dot scores are the embeddings' inner products (a positive scale and any bias rank alike).
        score_fn = None if model.config.scoring in ("cosine", "dot") else head_similarity(model)
        with torch.no_grad():
            return retrieval_ranks_from_embeddings(
                audio_embeds, text_embeds, queries.text_to_audio, score_fn=score_fn, **arguments
            )

    def _protocol(self, relevance_file: str | None, threshold: float | None, judged: bool) -> dict[str, Any]:
        relevant_counts = [len(clips) for clips in self.queries.text_to_audio] if judged else [1]
        provenance = corpus_provenance(self.dataset) if hasattr(self.dataset, "info") else None
        protocol: dict[str, Any] = {
            "tie_rule": TIE_RULE,
            "split": self.split,
            "clips": len(self.dataset),
            "official_clips": official_clip_count(provenance),
            "corpus": provenance,
            "captions": len(self.queries.captions),
            "languages": list(dict.fromkeys(self.queries.languages)),
            "relevance": "judgements" if judged else "own clip",
            "relevance_file": relevance_file,
            "relevance_threshold": threshold,
            "captions_without_judgement": self.queries.without_judgement,
            "relevant_clips_per_caption": sum(relevant_counts) / len(relevant_counts),
            "ks": list(self.ks),
            "map_cutoffs": list(self.map_cutoffs),
            "scoring": self.scoring,
            **self.encoding_protocol(),
        }
        if self.scoring == "ot_plan":
            protocol["ot_reg"] = self.ot_reg
        return protocol

    def _warn_if_collapsed(self, embeds: torch.Tensor, what: str, item: str) -> None:
        if len(embeds) < 2:
            return
        spread = embedding_spread(embeds)
        if spread < COLLAPSE_RELATIVE_VARIANCE:
            logger.warning(
                f"Evaluating on {describe_split(self.split, capital=False)}: the {what} embeddings have collapsed (their variance across the "
                f"{len(embeds)} {item}s is {spread:.1e} of their mean squared norm), so every {item} scores "
                "(nearly) the same; ties count against the relevant item, so retrieval is at chance or below."
            )
