"""The one results table: retrieval metrics as Markdown, per language, for one model or several side by side.

Model cards, the demo's report and the multilingual comparison (ATRI's Tables 1-3) all print this table,
with one column order: text-to-audio R@1/5/10 and mAP@10, then audio-to-text, then the cross-language
measures (``gap``, ``dis``: ATRI Eq. 14-15, ``MRV``: Eq. 16). Columns are metric keys, as in the metrics
dict; a column appears when at least one row has a value for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

RETRIEVAL_COLUMNS = (
    "t2a_R@1",
    "t2a_R@5",
    "t2a_R@10",
    "t2a_mAP@10",
    "a2t_R@1",
    "a2t_R@5",
    "a2t_R@10",
    "a2t_mAP@10",
)
"""Metric keys shown in percent, in this order."""
CONSISTENCY_COLUMNS = ("gap", "dis")
"""Per-language embedding-space measures (3 decimals)."""
MRV = "MRV"
"""Mean rank variance: one value per model, shown on its ``avg`` row (2 decimals)."""
MISSING = "—"
FRACTION_METRICS = ("R@", "mAP@", "recall_fraction@", "accuracy")
"""A metric whose name contains one of these is a fraction in [0, 1], shown in percent."""


def results_table(
    results: Mapping[str, Mapping[str, float]] | Mapping[str, float],
    languages: Sequence[str] | None = None,
    *,
    decimals: int = 1,
) -> str:
    """Markdown table of retrieval metrics.

    Args:
        results: one model's metrics (``retrieval_metrics`` keys: ``t2a_R@1``, ``t2a_R@1/fra``, ``MRV``,
            ...), or scheme/model name -> metrics for a table with one block of rows per scheme.
        languages: the rows: one per language (keys with a ``/<lang>`` suffix) followed by ``avg`` (the
            un-suffixed keys); default: the languages found in the keys. Without any language, one row ``all``.
        decimals: decimals of the percentages.

    Returns:
        Rows ``[scheme |] language | columns``; missing values are ``—``.
    """
    headers, rows = results_table_rows(results, languages, decimals=decimals)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def results_table_rows(
    results: Mapping[str, Mapping[str, float]] | Mapping[str, float],
    languages: Sequence[str] | None = None,
    *,
    decimals: int = 1,
) -> tuple[list[str], list[list[str]]]:
    """The cells of :func:`results_table` (headers, then one list of formatted cells per row), for other
    renderings of the same table (the HTML evaluation report)."""
    if not results:
        raise ValueError("results_table needs the metrics of at least one scheme or model.")
    grouped = all(isinstance(value, Mapping) for value in results.values())
    groups = dict(results) if grouped else {"": results}
    keys = {key for metrics in groups.values() for key in metrics}
    if languages is None:
        languages = sorted({key.split("/", 1)[1] for key in keys if "/" in key})
    languages = list(languages)
    present = {key.split("/", 1)[0] for key in keys}
    columns = [column for column in (*RETRIEVAL_COLUMNS, *CONSISTENCY_COLUMNS, MRV) if column in present]
    headers = (["scheme"] if grouped else []) + ["language", *columns]
    rows = []
    for scheme, metrics in groups.items():
        for language in (*languages, None):
            suffix = "" if language is None else f"/{language}"
            label = language if language is not None else ("avg" if languages else "all")
            cells = ([scheme] if grouped else []) + [label]
            cells += [_cell(metrics, column, suffix, language is None, decimals) for column in columns]
            rows.append(cells)
    return headers, rows


def format_metric(name: str, value: float) -> str:
    """One metric as printed in full listings (``hf-atr evaluate``, the HTML report): fractions in percent with two
    decimals, ranks and variances with three."""
    if any(marker in name for marker in FRACTION_METRICS):
        return f"{100 * value:.2f}"
    return f"{value:.3f}"


def _cell(metrics: Mapping[str, float], column: str, suffix: str, is_average: bool, decimals: int) -> str:
    if column == MRV:
        value = metrics.get(MRV) if is_average else None
        return MISSING if value is None else f"{value:.2f}"
    value = metrics.get(f"{column}{suffix}")
    if value is None:
        return MISSING
    return f"{value:.3f}" if column in CONSISTENCY_COLUMNS else f"{100 * value:.{decimals}f}"


__all__ = ["CONSISTENCY_COLUMNS", "RETRIEVAL_COLUMNS", "format_metric", "results_table", "results_table_rows"]
