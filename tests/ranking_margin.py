"""Order assertions that hold on every CPU: an argmax, a top-k or a ranking of computed scores, taken only after
asserting that the margin it relies on is wide.

Scores that two code paths compute (a batched and a single forward pass, an index and brute force, AVX-512 and
SSE kernels) agree to rounding, about 1e-7 of their size in float32, not bit for bit. An order decided by less
flips with the CPU's vector units. Each function here asserts that every gap the order relies on is at least
``min_gap`` of the score scale (the largest absolute score compared, unless ``scale`` is given), and fails on a
near-tie with a message asking for a clearer case: planted events or hand-set weights, not random ones. Rounding
is relative to the terms summed, not to their sum: where scores are small next to those terms (cosine similarities
near 0, dot products of nearly orthogonal vectors), pass their size as ``scale`` (``1`` for cosines, the product
of the norms for dot products).

``scores`` is ``(items,)``, or ``(queries, items)`` with one order per row. A list, NumPy array or torch tensor.
"""

from __future__ import annotations

import numpy as np
import torch

MIN_RELATIVE_GAP = 1e-4
"""A gap this large relative to the score scale is about 1,000 times float32's rounding: no CPU flips it."""


def _as_rows(scores) -> tuple[np.ndarray, bool]:
    """``scores`` as float64 ``(queries, items)``, and whether they were one row ``(items,)`` (refused where
    neither)."""
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().double()
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim not in (1, 2):
        raise ValueError(f"scores must be (items,) or (queries, items), got shape {array.shape}")
    return np.atleast_2d(array), array.ndim == 1


def _assert_gap(
    row: np.ndarray,
    higher: int,
    lower: int,
    scale: float | None,
    min_gap: float,
    query: int | None,
) -> None:
    """Assert that ``row[higher]`` leads ``row[lower]`` by ``min_gap`` of ``scale`` (``row``'s largest absolute
    score for ``None``)."""
    scale = np.abs(row).max() if scale is None else scale
    gap = row[higher] - row[lower]
    if not gap >= min_gap * scale:
        where = "" if query is None else f"query {query}: "
        raise AssertionError(
            f"{where}near-tie: the order relies on score {row[higher]:.9g} (item {higher}) leading "
            f"{row[lower]:.9g} (item {lower}) by {gap:.3g}, {gap / scale:.2g} of the score scale {scale:.3g} "
            f"(needed: {min_gap:g}); rounding can flip it on another CPU (AVX-512, AVX2, SSE). Build a clearer "
            "case: plant the event or hand-set the weights so that the order is decided by a wide margin."
        )


def clear_ranking(
    scores, k: int | None = None, *, min_gap: float = MIN_RELATIVE_GAP, scale: float | None = None
) -> np.ndarray:
    """The positions of the ``k`` highest scores (all with ``None``), best first, after asserting that each of
    them leads the next score by ``min_gap`` of the scale. Returns ``(k,)``, or ``(queries, k)`` for rows."""
    rows, single = _as_rows(scores)
    k = rows.shape[1] if k is None else k
    order = np.argsort(-rows, axis=1, kind="stable")
    for query, row in enumerate(rows):
        for rank in range(min(k, row.size - 1)):
            label = None if single else query
            _assert_gap(row, order[query, rank], order[query, rank + 1], scale, min_gap, label)
    return order[0, :k] if single else order[:, :k]


def clear_top_k(
    scores, k: int, *, min_gap: float = MIN_RELATIVE_GAP, scale: float | None = None
) -> np.ndarray:
    """The positions of the ``k`` highest scores, best first, after asserting only that the ``k``-th leads the
    next by ``min_gap`` of the scale (the set is clear; the order inside it may rest on near-ties). Returns
    ``(k,)``, or ``(queries, k)`` for rows."""
    rows, single = _as_rows(scores)
    order = np.argsort(-rows, axis=1, kind="stable")
    if k < rows.shape[1]:
        for query, row in enumerate(rows):
            _assert_gap(row, order[query, k - 1], order[query, k], scale, min_gap, None if single else query)
    return order[0, :k] if single else order[:, :k]


def clear_best_among(
    scores, candidates, *, min_gap: float = MIN_RELATIVE_GAP, scale: float | None = None
) -> int:
    """The position of the highest of ``(items,)`` ``scores``, after asserting that the best of ``candidates`` (a
    boolean mask or positions: several windows holding one event) leads every other item by ``min_gap`` of the
    scale. The order among the candidates is not read."""
    rows, single = _as_rows(scores)
    if not single:
        raise ValueError(f"scores must be (items,), got shape {rows.shape}")
    (row,) = rows
    inside = np.zeros(row.size, dtype=bool)
    inside[np.asarray(candidates)] = True
    if not inside.any() or inside.all():
        raise ValueError(
            f"candidates must hold some items and leave some out, got {inside.sum()} of {row.size}"
        )
    positions = np.arange(row.size)
    best_inside = positions[inside][np.argmax(row[inside])]
    best_outside = positions[~inside][np.argmax(row[~inside])]
    _assert_gap(row, best_inside, best_outside, scale, min_gap, None)
    return int(best_inside)


def clear_rank_of(
    scores,
    relevant,
    *,
    min_gap: float = MIN_RELATIVE_GAP,
    scale: float | None = None,
) -> np.ndarray:
    """The rank (1 for the best) of the best relevant item of each row of ``(queries, items)`` ``scores``:
    ``relevant[q]`` is an item, or several. Asserts first that each relevant item's score is ``min_gap`` of the
    scale apart from every irrelevant score of its row (above or below): what retrieval metrics count. The order
    among the relevant items, and among the others, is not read. An exact tie is no proof either: identical inputs
    tie exactly on one CPU and differ in the last bit on another (the rows of one batch round differently at other
    vector levels); give the items inputs that differ. Returns ``(queries,)``."""
    rows, single = _as_rows(scores)
    if single:
        raise ValueError(f"scores must be (queries, items), got shape ({rows.shape[1]},)")
    ranks = np.empty(len(rows), dtype=int)
    for query, row in enumerate(rows):
        items = np.atleast_1d(np.asarray(relevant[query]))
        others = np.setdiff1d(np.arange(row.size), items)
        for item in items:
            above = others[row[others] >= row[item]]
            below = others[row[others] < row[item]]
            if above.size:
                _assert_gap(row, above[np.argmin(row[above])], item, scale, min_gap, query)
            if below.size:
                _assert_gap(row, item, below[np.argmax(row[below])], scale, min_gap, query)
        ranks[query] = (row[others] >= row[items].max()).sum() + 1
    return ranks


def clear_argmax(scores, *, min_gap: float = MIN_RELATIVE_GAP, scale: float | None = None):
    """The position of the highest score (an ``int``; a ``(queries,)`` array for rows), after asserting that it
    leads the second by ``min_gap`` of the scale."""
    best = clear_top_k(scores, 1, min_gap=min_gap, scale=scale)
    return int(best[0]) if best.ndim == 1 else best[:, 0]
