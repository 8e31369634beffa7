"""Cross-language consistency of a multilingual model (ATRI §5.3).

Retrieval metrics per language and MRV (Eq. 16) come from
:func:`~hf_atr.metrics.retrieval.retrieval_metrics`; this module adds the embedding-space measures of
Eq. (14)–(15). :func:`~hf_atr.metrics.tables.results_table` shows them side by side, like ATRI's
Tables 1–3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..data.schema import ENGLISH
from ..encoding import caption_table, encode_text
from ..processing_atr import AtrProcessor


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
