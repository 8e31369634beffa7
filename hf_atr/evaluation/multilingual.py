"""Cross-language consistency of a multilingual model (ATRI §5.3) and ATRI-style result tables.

Retrieval metrics per language and MRV (Eq. 16) come from
:func:`~hf_atr.evaluation.retrieval.retrieval_metrics`; this module adds the embedding-space measures of
Eq. (14)–(15) and formats everything as one table like ATRI's Tables 1–3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..data.schema import ENGLISH
from ..encoding import caption_table, encode_text
from ..processing_atr import AtrProcessor

TABLE_COLUMNS = (
    ("T2A R@1", "t2a_R@1"),
    ("T2A R@5", "t2a_R@5"),
    ("T2A R@10", "t2a_R@10"),
    ("T2A mAP10", "t2a_mAP@10"),
    ("A2T R@1", "a2t_R@1"),
    ("A2T R@5", "a2t_R@5"),
    ("A2T R@10", "a2t_R@10"),
    ("A2T mAP10", "a2t_mAP@10"),
)
"""(header, metric key) of the percentage columns of :func:`format_multilingual_table`."""


def _check_aligned(english_embeds: torch.Tensor, language_embeds: torch.Tensor) -> None:
    if (
        english_embeds.dim() != 2
        or english_embeds.shape != language_embeds.shape
        or english_embeds.shape[0] == 0
    ):
        raise ValueError(
            "english_embeds and language_embeds must be non-empty (n, dim) tensors of the same shape, row i of each "
            f"the same caption; got {tuple(english_embeds.shape)} and {tuple(language_embeds.shape)}."
        )


def embedding_gap(english_embeds: torch.Tensor, language_embeds: torch.Tensor) -> torch.Tensor:
    r"""ATRI Eq. (14): :math:`\vec\Delta_{gap,k} = \frac1N\sum_i g(t_{i1}) - \frac1N\sum_i g(t_{ik})`.

    Args:
        english_embeds: ``(n, dim)`` embeddings of English captions.
        language_embeds: ``(n, dim)`` embeddings of their translations into language ``k`` (row-aligned).

    Returns:
        ``(dim,)`` difference of the centroids; ATRI's Table 2 reports its Euclidean norm.
    """
    _check_aligned(english_embeds, language_embeds)
    return english_embeds.mean(dim=0) - language_embeds.mean(dim=0)


def mean_embedding_distance(english_embeds: torch.Tensor, language_embeds: torch.Tensor) -> torch.Tensor:
    r"""ATRI Eq. (15): :math:`\Delta_{dis,k} = \frac1N\sum_i \lVert g(t_{i1}) - g(t_{ik}) \rVert_2` (scalar).

    Args:
        english_embeds, language_embeds: ``(n, dim)``, row i of each the same caption.
    """
    _check_aligned(english_embeds, language_embeds)
    return (english_embeds - language_embeds).norm(dim=1).mean()


def language_consistency(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    languages: Sequence[str],
    *,
    batch_size: int = 256,
) -> dict[str, float]:
    """Embedding gap and mean distance to English for each non-English language of an evaluation set.

    Every caption is encoded once; a translation is paired with the English caption of the same clip and
    slot, and clips without that translation are left out for that language.

    Returns:
        ``gap/<lang>`` (Euclidean norm of Eq. 14), ``dis/<lang>`` (Eq. 15), ``pairs/<lang>`` (captions
        compared), and ``gap``, ``dis``: their means over the languages (ATRI's "avg" row).
    """
    foreign = [language for language in languages if language != ENGLISH]
    if not foreign:
        raise ValueError(
            f"language_consistency needs at least one language besides English, got {list(languages)}."
        )
    table = caption_table(dataset, [ENGLISH, *foreign])
    embeds = encode_text(model, processor, table.captions, batch_size=batch_size)
    groups = table.caption_groups.tolist()
    english_row = {
        group: row
        for row, (group, language) in enumerate(zip(groups, table.languages))
        if language == ENGLISH
    }
    metrics: dict[str, float] = {}
    for language in foreign:
        rows = [
            row
            for row, (group, lang) in enumerate(zip(groups, table.languages))
            if lang == language and group in english_row
        ]
        if not rows:
            raise ValueError(f"No caption in {language!r} has an English counterpart in the evaluation set.")
        english = embeds[[english_row[groups[row]] for row in rows]]
        translated = embeds[rows]
        metrics[f"gap/{language}"] = float(embedding_gap(english, translated).norm())
        metrics[f"dis/{language}"] = float(mean_embedding_distance(english, translated))
        metrics[f"pairs/{language}"] = float(len(rows))
    metrics["gap"] = sum(metrics[f"gap/{language}"] for language in foreign) / len(foreign)
    metrics["dis"] = sum(metrics[f"dis/{language}"] for language in foreign) / len(foreign)
    return metrics


def format_multilingual_table(results: Mapping[str, Mapping[str, float]], languages: Sequence[str]) -> str:
    """One Markdown table of several training schemes, like ATRI's Tables 1–3 side by side.

    Args:
        results: scheme name → metrics dict with per-language keys (``t2a_R@1/<lang>``, ...), un-suffixed
            averages, ``MRV``, and optionally ``gap/<lang>``, ``dis/<lang>``, ``gap``, ``dis`` from
            :func:`language_consistency`.
        languages: the rows of each scheme, followed by an ``avg`` row.

    Returns:
        Rows ``scheme | language``; recall and mAP@10 in percent, Gap and Dis to three decimals, MRV on the
        ``avg`` row. Missing values are shown as ``—``.
    """
    if not results:
        raise ValueError("format_multilingual_table needs at least one scheme's metrics.")
    headers = ["Scheme", "Lang", *(header for header, _ in TABLE_COLUMNS), "Gap", "Dis", "MRV"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for scheme, metrics in results.items():
        for language in (*languages, None):
            suffix = "" if language is None else f"/{language}"
            cells = [scheme, "avg" if language is None else language]
            cells += [_format(metrics.get(f"{key}{suffix}"), 100, ".2f") for _, key in TABLE_COLUMNS]
            cells += [_format(metrics.get(f"{key}{suffix}"), 1, ".3f") for key in ("gap", "dis")]
            cells.append(_format(metrics.get("MRV") if language is None else None, 1, ".2f"))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _format(value: float | None, factor: float, spec: str) -> str:
    return "—" if value is None else format(factor * value, spec)
