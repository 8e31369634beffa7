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
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for scheme, metrics in groups.items():
        for language in (*languages, None):
            suffix = "" if language is None else f"/{language}"
            label = language if language is not None else ("avg" if languages else "all")
            cells = ([scheme] if grouped else []) + [label]
            cells += [_cell(metrics, column, suffix, language is None, decimals) for column in columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(metrics: Mapping[str, float], column: str, suffix: str, is_average: bool, decimals: int) -> str:
    if column == MRV:
        value = metrics.get(MRV) if is_average else None
        return MISSING if value is None else f"{value:.2f}"
    value = metrics.get(f"{column}{suffix}")
    if value is None:
        return MISSING
    return f"{value:.3f}" if column in CONSISTENCY_COLUMNS else f"{100 * value:.{decimals}f}"


__all__ = ["CONSISTENCY_COLUMNS", "RETRIEVAL_COLUMNS", "results_table"]
