"""The evaluation report: PNG figures and one ``report.html`` that shows them with the metrics and the protocol.

:class:`~hf_atr.evaluation.evaluator.RetrievalEvaluator` and :class:`~hf_atr.evaluation.zero_shot
.ZeroShotEvaluator` call these with what they computed (``hf-atr evaluate --report DIR``):

- retrieval (:func:`write_retrieval_report`): R@k for k = 1..50 for both directions and every caption language,
  with the R@k of random scores for comparison (``recall_at_k.png``); the histogram of the rank of each query's
  best relevant item (``rank_histogram.png``); for a model trained with an OT objective, one evaluation batch's
  score matrix beside the transport plan on its ground cost (``transport_plan.png``). All from the positions
  the metrics were computed from (:class:`~hf_atr.metrics.ranks.RetrievalRanks`), never a second ranking.
- zero-shot classification (:func:`write_zero_shot_report`): the confusion matrix (``confusion_matrix.png``)
  and the accuracy of every class (``per_class_accuracy.png``).

The page embeds every figure as a base64 ``data:`` URI and uses no script, font or style sheet from elsewhere,
so it opens offline and can be sent as one file; the PNG files are written beside it for slides and papers.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics.ranks import QueryRanks, RetrievalRanks
from ..metrics.tables import format_metric, results_table_rows
from ..plots.canvas import save_figure
from ..plots.classification import confusion_matrix_figure, per_class_accuracy_figure
from ..plots.retrieval import (
    DIRECTIONS,
    GALLERY_ITEMS,
    QUERY_ITEMS,
    rank_histogram_figure,
    recall_at_k_figure,
    transport_plan_figure,
)

REPORT_FILE = "report.html"
RECALL_CURVE_KS = tuple(range(1, 51))
"""The cutoffs of the R@k curves."""
FIGURE_FILES = {
    "recall": "recall_at_k.png",
    "ranks": "rank_histogram.png",
    "transport": "transport_plan.png",
    "confusion": "confusion_matrix.png",
    "per_class": "per_class_accuracy.png",
}


@dataclass
class BatchTransport:
    """One evaluation batch: the model's scores and the transport plan computed on the batch's ground cost.

    Args:
        scores: `(n, n)` the model's similarity of caption i (row) to clip j (column); caption i belongs to clip i.
        plan: `(n, n)` the transport plan between the same captions and clips (rows sum to ``1 / n`` when
            balanced).
        score_label: what the scores are, with units (e.g. ``"cosine similarity"``).
        method: how the plan was obtained (solver, ε, objective), for the caption.
    """

    scores: np.ndarray
    plan: np.ndarray
    score_label: str
    method: str


@dataclass
class ReportFigure:
    """A figure written beside the report: its PNG file and the caption the page shows under it."""

    path: Path
    caption: str


def write_retrieval_report(
    output_dir: str | os.PathLike,
    ranks: RetrievalRanks,
    metrics: Mapping[str, float],
    protocol: Mapping[str, Any],
    *,
    title: str,
    transport: BatchTransport | None = None,
) -> Path:
    """Draw the retrieval figures into `output_dir` and write ``report.html`` there; returns the page's path.

    Args:
        ranks: the positions the metrics were computed from.
        metrics: the metrics dict (``ranks.metrics(...)``).
        protocol: how the figures were obtained (``RetrievalEvaluator.protocol``).
        title: the page's heading, e.g. ``"model on dataset (split test)"``.
        transport: one evaluation batch's scores and transport plan, for a model with an OT objective.
    """
    output_dir = Path(output_dir)
    figures = [_recall_figure(ranks, output_dir), _rank_figure(ranks, output_dir)]
    if transport is not None:
        figures.append(_transport_figure(transport, output_dir))
    headers, rows = results_table_rows(metrics)
    note = "Recall and mAP in %, ranks 1-based. t2a = text → audio (captions query the clips), a2t = audio → text."
    return write_html_report(
        output_dir / REPORT_FILE,
        title,
        note,
        [("Headline metrics (%)", headers, rows)],
        figures,
        protocol,
        appendix=[("All metrics", *_metric_matrix(metrics, ranks.languages if ranks.per_language else []))],
    )


def write_zero_shot_report(
    output_dir: str | os.PathLike,
    confusion: np.ndarray,
    class_names: Sequence[str],
    metrics: Mapping[str, float],
    protocol: Mapping[str, Any],
    *,
    title: str,
) -> Path:
    """Draw the confusion matrix and per-class accuracy into `output_dir` and write ``report.html``.

    Args:
        confusion: `(n_classes, n_classes)` clip counts, rows the true class, columns the predicted one.
        class_names: the classes in the matrix's order.
        metrics: the flat metrics of :class:`~hf_atr.evaluation.zero_shot.ZeroShotEvaluator`.
        protocol: how they were obtained (``ZeroShotEvaluator.protocol``); its ``chance`` figures fill the chance
            column, its ``too_few_clips`` flag (with ``clips`` and ``min_clips``) adds a line to the note.
        title: the page's heading.
    """
    output_dir = Path(output_dir)
    confusion = np.asarray(confusion)
    clip_counts = confusion.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.diag(confusion) / clip_counts
    figures = [
        ReportFigure(
            save_figure(
                confusion_matrix_figure(confusion, class_names), output_dir / FIGURE_FILES["confusion"]
            ),
            "Confusion matrix: each row is a true class, coloured by the share of its clips given each predicted "
            "class (the label whose prompts score highest; a tie with the true label counts against it).",
        ),
        ReportFigure(
            save_figure(
                per_class_accuracy_figure(accuracy, clip_counts, class_names),
                output_dir / FIGURE_FILES["per_class"],
            ),
            "Accuracy of every class, best first, with the accuracy over all clips and chance (one over the number "
            "of classes).",
        ),
    ]
    class_rows = [
        [name, str(int(count)), "—" if count == 0 else f"{100 * correct:.1f}"]
        for name, count, correct in zip(class_names, clip_counts, accuracy)
    ]
    chance = protocol.get("chance") or {}
    metric_rows = [
        [name, format_metric(name, value), format_metric(name, chance[name]) if name in chance else "—"]
        for name, value in metrics.items()
    ]
    note = (
        "Accuracy and mAP in %, beside what a classifier ranking the classes at random scores (chance). Every clip "
        "is a query over the class prompts (audio → class)."
    )
    if protocol.get("too_few_clips"):
        note += (
            f" Too few clips to measure: {protocol.get('clips')} clips for {len(class_names)} classes, fewer than "
            f"{protocol.get('min_clips')}."
        )
    return write_html_report(
        output_dir / REPORT_FILE,
        title,
        note,
        [("Metrics", ["metric", "value", "chance"], metric_rows)],
        figures,
        protocol,
        appendix=[("Per class", ["class", "clips", "accuracy (%)"], class_rows)],
    )


def write_html_report(
    path: str | os.PathLike,
    title: str,
    note: str,
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]],
    figures: Sequence[ReportFigure],
    protocol: Mapping[str, Any],
    *,
    appendix: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]] = (),
) -> Path:
    """Write one self-contained HTML page: tables, figures (embedded as base64 PNG), appendix tables, protocol.

    Args:
        path: where the page is written.
        title: its heading.
        note: one paragraph under the heading (units, conventions).
        tables: (caption, headers, rows of cells) per table, shown before the figures.
        figures: the figures, in order.
        protocol: shown last as a two-column table, values as JSON.
        appendix: tables shown after the figures (the long ones).
    """
    path = Path(path)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(note)}</p>",
    ]
    for caption, headers, rows in tables:
        parts.append(_html_table(caption, headers, rows))
    parts.append("<h2>Figures</h2>")
    for figure in figures:
        encoded = base64.b64encode(figure.path.read_bytes()).decode("ascii")
        parts += [
            "<figure>",
            f'<img src="data:image/png;base64,{encoded}" alt="{html.escape(figure.caption)}">',
            f"<figcaption>{html.escape(figure.caption)} <span class=file>({html.escape(figure.path.name)})</span>"
            "</figcaption>",
            "</figure>",
        ]
    if appendix:
        parts.append("<h2>Details</h2>")
    for caption, headers, rows in appendix:
        parts.append(_html_table(caption, headers, rows))
    protocol_rows = [[key, json.dumps(value, ensure_ascii=False)] for key, value in protocol.items()]
    parts += [
        _html_table(
            "Protocol: how these figures were obtained", ["field", "value"], protocol_rows, numbers=False
        ),
        "</body>",
        "</html>",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right}"
    "th:first-child,td:first-child,table.text td,table.text th{text-align:left}caption{font-weight:bold;text-align:left;padding:.3em 0}"
    "figure{margin:1.5em 0}img{max-width:100%;height:auto;border:1px solid #ddd}"
    "figcaption{font-size:.95em;color:#444}.file{color:#888}"
)


def _html_table(
    caption: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, numbers: bool = True
) -> str:
    """An HTML table; `numbers` right-aligns every column but the first."""
    lines = [f"<table{'' if numbers else ' class=text'}><caption>{html.escape(caption)}</caption>"]
    lines.append("<tr>" + "".join(f"<th>{html.escape(str(cell))}</th>" for cell in headers) + "</tr>")
    lines += [
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows
    ]
    lines.append("</table>")
    return "\n".join(lines)


def _metric_matrix(
    metrics: Mapping[str, float], languages: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Every metric, one row per metric and one column per language after the mean (``avg``, or ``all`` without
    languages): headers and rows of formatted cells, ``—`` where a metric has no per-language value (MRV)."""
    names = list(dict.fromkeys(name.split("/", 1)[0] for name in metrics))
    headers = ["metric", "avg" if languages else "all", *languages]
    rows = []
    for name in names:
        keys = [name, *(f"{name}/{language}" for language in languages)]
        rows.append([name, *(format_metric(name, metrics[key]) if key in metrics else "—" for key in keys)])
    return headers, rows


def _recall_figure(ranks: RetrievalRanks, output_dir: Path) -> ReportFigure:
    directions = _directions(ranks)
    recall = {
        direction: {
            language: query_ranks.recall_at(RECALL_CURVE_KS) for language, query_ranks in by_language.items()
        }
        for direction, by_language in directions.items()
    }
    chance = {
        direction: _pooled_chance(by_language.values()) for direction, by_language in directions.items()
    }
    counts = {
        direction: {language: len(query_ranks.positions) for language, query_ranks in by_language.items()}
        for direction, by_language in directions.items()
    }
    figure = recall_at_k_figure(
        RECALL_CURVE_KS,
        recall,
        chance,
        query_counts=counts,
        title="Recall at k: the share of queries with a relevant item in the top k",
    )
    caption = (
        "R@k: the share of queries with a relevant item among the k best-scored ones, per caption language; "
        "dotted: the R@k of random scores."
    )
    return ReportFigure(save_figure(figure, output_dir / FIGURE_FILES["recall"]), caption)


def _rank_figure(ranks: RetrievalRanks, output_dir: Path) -> ReportFigure:
    directions = _directions(ranks)
    best = {
        direction: {language: query_ranks.best_ranks for language, query_ranks in by_language.items()}
        for direction, by_language in directions.items()
    }
    sizes = {
        direction: max(query_ranks.gallery_size for query_ranks in by_language.values())
        for direction, by_language in directions.items()
    }
    figure = rank_histogram_figure(best, sizes)
    caption = (
        f"Where each query finds its best relevant item: the {GALLERY_ITEMS['t2a']} of a {QUERY_ITEMS['t2a']} "
        f"(text → audio), the best of a {QUERY_ITEMS['a2t']}'s {GALLERY_ITEMS['a2t']}s (audio → text); dashed: "
        "medians."
    )
    return ReportFigure(save_figure(figure, output_dir / FIGURE_FILES["ranks"]), caption)


def _transport_figure(transport: BatchTransport, output_dir: Path) -> ReportFigure:
    size = len(transport.plan)
    figure = transport_plan_figure(
        transport.scores,
        size * np.asarray(transport.plan),
        score_label=transport.score_label,
        plan_label=f"{size} · Π (1 = a caption's whole mass on one clip)",
        title=f"One evaluation batch of {size} clips and their first captions",
    )
    caption = (
        f"Left: the model's scores of the batch; right: the transport plan on the batch's ground cost "
        f"({transport.method}). A model that matches well puts the plan's mass on the diagonal."
    )
    return ReportFigure(save_figure(figure, output_dir / FIGURE_FILES["transport"]), caption)


def _directions(ranks: RetrievalRanks) -> dict[str, dict[str, QueryRanks]]:
    by_direction = {"t2a": ranks.text_to_audio, "a2t": ranks.audio_to_text}
    return {direction: by_direction[direction] for direction in DIRECTIONS}


def _pooled_chance(by_language: Sequence[QueryRanks] | Any) -> np.ndarray:
    """The R@k of random scores over all queries of a direction (each language weighted by its queries)."""
    by_language = list(by_language)
    counts = np.array([len(query_ranks.positions) for query_ranks in by_language], dtype=np.float64)
    curves = np.stack([query_ranks.chance_recall_at(RECALL_CURVE_KS) for query_ranks in by_language])
    return (counts[:, None] * curves).sum(axis=0) / counts.sum()


__all__ = [
    "BatchTransport",
    "FIGURE_FILES",
    "RECALL_CURVE_KS",
    "REPORT_FILE",
    "ReportFigure",
    "write_html_report",
    "write_retrieval_report",
    "write_zero_shot_report",
]
