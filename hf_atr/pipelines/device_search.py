"""Exact top-k search on a torch device: the item matrix held there, scored by matrix products, top-k by blocks.

:class:`DeviceSearch` is what :class:`~hf_atr.pipelines.index.EmbeddingIndex` searches with when it is given a
``device`` (a GPU, or ``"cpu"``, which runs the same code and is how the tests check it against faiss):

- the ``(n, dim)`` items are copied to the device once, in float32 or float16 (:data:`SEARCH_DTYPES`);
- a block of queries is scored against a block of items at a time (at most ``query_block × item_block``
  scores in memory: 1,024 × 65,536 by default, 256 MiB in float32), in the items' dtype, and each block's
  ``topk(k + 1)`` kept: its first ``k`` are candidates, the ``(k+1)``-th tells whether items tie at the block's
  k-th place; the candidates of all blocks are ordered once at the end (a sort of ``k × blocks`` per query);
- nothing is read back to the host until every block is searched. Then the rows whose merged k-th key is such a
  tie (``topk`` chose among the tied items as it liked) are searched again, and only those, keeping the lowest
  positions of the tied items: two more passes over each of their blocks. Without repeated or float16-rounded
  scores there are none;
- inner product: ``s(q, x) = qᵀx``. L2: ``s(q, x) = −‖q − x‖``, ranked by the squared distance expanded as
  ``‖q‖² + ‖x‖² − 2 qᵀx`` and clamped at 0, as faiss's ``IndexFlatL2`` computes it. Mahalanobis scoring is L2
  on vectors already mapped by ``M^{1/2}`` (m-LTM Eq. 9: ``(t − a)ᵀ M (t − a) = ‖M^{1/2} t − M^{1/2} a‖²``;
  :func:`hf_atr.pipelines.indexing.index_vectors`), so it needs nothing here.

Tie rule: equal scores are ranked by item position (the order of addition), lowest first, and of the items
tied at the k-th place those of the lowest positions are kept. This is faiss ``IndexFlatL2``'s order (its heap
compares ``(distance, id)``); ``IndexFlatIP`` lists equal scores by descending id, and at the k-th place keeps
whichever of the tied items its heap held (it depends on the order they came in), so against it only the
scores, and the positions of rows without a tie at the k-th place, agree as sets.

Float16 halves the memory and, on a GPU, runs the products on tensor cores; the inner products stay in float16
up to the top-k (L2 keys are expanded in float32: the expansion cancels). Its scores carry float16's rounding
(about 3 significant digits), so near-ties may swap (recall@10 against float32, not equality), and exact ties at
that rounding are more frequent: the rows they fall on are searched again.
"""

from __future__ import annotations

import numpy as np
import torch

SEARCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}
"""The item matrix's precision on the device, by name. bfloat16 is left out: its 8-bit mantissa ranks unit
vectors too coarsely (recall@10 0.63 against float32 on clustered 512-d vectors, measured on a GPU)."""
DEFAULT_QUERY_BLOCK = 1024
DEFAULT_ITEM_BLOCK = 65_536
_FLOAT16_MAX = torch.finfo(torch.float16).max


def checked_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` that this process can allocate on.

    Raises:
        ValueError: a name torch does not know, or a device this machine or this torch build lacks.
    """
    try:
        parsed = torch.device(device)
        torch.empty(1, device=parsed)
    except (RuntimeError, AssertionError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"Device {str(device)!r} is not available here: {reason}. Give a device this machine has ('cpu', or "
            "'cuda' where torch.cuda.is_available())."
        ) from error
    return parsed


def checked_dtype(name: str) -> torch.dtype:
    """The torch dtype of a :data:`SEARCH_DTYPES` name; a ``ValueError`` naming the choices otherwise."""
    if name not in SEARCH_DTYPES:
        raise ValueError(
            f"search_dtype must be one of {sorted(SEARCH_DTYPES)}, got {name!r} (bfloat16 ranks too coarsely "
            "for search)."
        )
    return SEARCH_DTYPES[name]


class DeviceSearch:
    """Exact top-k over ``items: (n, dim)`` float32 vectors, held on ``device`` in ``dtype``.

    Args:
        items: the stored vectors (already in the index's geometry: ``M^{1/2} x`` for Mahalanobis).
        metric: ``"inner_product"`` or ``"l2"``.
        device: a torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        dtype: ``"float32"`` or ``"float16"`` (:data:`SEARCH_DTYPES`).
        query_block / item_block: the block sizes that bound memory (scores of ``query_block × item_block``).
    """

    def __init__(
        self,
        items: np.ndarray,
        metric: str,
        device: str | torch.device,
        dtype: str = "float32",
        *,
        query_block: int = DEFAULT_QUERY_BLOCK,
        item_block: int = DEFAULT_ITEM_BLOCK,
    ) -> None:
        if metric not in ("inner_product", "l2"):
            raise ValueError(f"metric must be 'inner_product' or 'l2', got {metric!r}.")
        for name, value in (("query_block", query_block), ("item_block", item_block)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        self.metric = metric
        self.device = checked_device(device)
        self.dtype = checked_dtype(dtype)
        self.query_block = query_block
        self.item_block = item_block
        float32_items = torch.from_numpy(np.ascontiguousarray(items, dtype=np.float32))
        self._max_item_norm = float(float32_items.norm(dim=1).max()) if len(float32_items) else 0.0
        if self.dtype == torch.float16 and self._max_item_norm >= _FLOAT16_MAX:
            raise ValueError(
                f"float16 cannot hold these vectors (largest norm {self._max_item_norm:.4g}, float16 max "
                f"{_FLOAT16_MAX:.0f}); search in float32."
            )
        self.items = float32_items.to(device=self.device, dtype=self.dtype)
        self._squared_norms = (
            self.items.float().square().sum(dim=1) if metric == "l2" else None
        )  # of the vectors as held, so that distances are those between the rounded vectors

    def __len__(self) -> int:
        return self.items.shape[0]

    @torch.no_grad()
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` items of each query row, by the tie rule of the module docstring.

        Nothing is read back from the device until every block is searched: then the hits, and which rows had
        items tied at their k-th place (which only those rows are searched again for, exactly).

        Args:
            queries: ``(q, dim)`` float32.
            k: hits per query, ``1 <= k <= len(self)``.

        Returns:
            ``scores (q, k)`` float32 as faiss's flat indexes give them, best first: inner products, or squared
            Euclidean distances (clamped at 0); and ``positions (q, k)`` int64.
        """
        if not 1 <= k <= len(self):
            raise ValueError(f"k must be between 1 and the {len(self)} items, got {k}.")
        if len(queries) == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.dtype == torch.float16:
            largest = float(np.linalg.norm(queries, axis=1).max()) * self._max_item_norm
            if largest >= _FLOAT16_MAX:
                raise ValueError(
                    f"float16 cannot hold these scores (inner products up to {largest:.4g}, float16 max "
                    f"{_FLOAT16_MAX:.0f}); search in float32."
                )
        queries_on_device = torch.from_numpy(queries).to(self.device)
        blocks = [self._search_block(block, k) for block in queries_on_device.split(self.query_block)]
        keys, positions, tied = (torch.cat(parts) for parts in zip(*blocks))
        keys, positions, tied = keys.cpu().numpy(), positions.cpu().numpy(), tied.cpu().numpy()
        if tied.any():
            rows = np.flatnonzero(tied)
            tied_queries = queries_on_device[torch.from_numpy(rows).to(self.device)]
            exact = [self._search_rows_exactly(block, k) for block in tied_queries.split(self.query_block)]
            keys[rows] = torch.cat([block_keys for block_keys, _ in exact]).cpu().numpy()
            positions[rows] = torch.cat([block_positions for _, block_positions in exact]).cpu().numpy()
        scores = keys if self.metric == "inner_product" else -keys
        return scores.astype(np.float32), positions.astype(np.int64)

    def _keys(self, held: torch.Tensor, query_norms: torch.Tensor | None, start: int) -> torch.Tensor:
        """Ranking keys ``(b, item_block)`` of queries ``held: (b, dim)`` (in the items' dtype) against the block of
        items from ``start``: inner products in the items' dtype, or minus the clamped squared distances, in
        float32 (their expansion cancels: float16 would lose the small distances that decide)."""
        items = self.items[start : start + self.item_block]
        keys = held @ items.T
        if self.metric == "l2":
            squared = query_norms + self._squared_norms[start : start + len(items)] - 2 * keys.float()
            keys = -squared.clamp_(min=0.0)
        return keys

    def _search_block(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Ranking keys ``(b, k)`` float32 (inner products, or minus clamped squared distances), positions
        ``(b, k)`` and ``tied (b,)`` of one block of float32 queries.

        Each block of items gives its ``topk(k + 1)``: the first ``k`` are its candidates, and the ``(k+1)``-th
        says whether items tie at its k-th place, where ``topk`` chose among them as it liked. Such a choice
        matters only when the tied key is also the k-th of the merged hits (a block never has more than ``k``
        items above that key, so all of those are its candidates): ``tied`` marks those rows, which
        :meth:`_search_rows_exactly` searches again; the others' hits follow the tie rule as they are.
        """
        held = queries.to(self.dtype)
        query_norms = held.float().square().sum(dim=1, keepdim=True) if self.metric == "l2" else None
        candidate_keys, candidate_positions, tied_keys = [], [], []
        for start in range(0, len(self), self.item_block):
            keys = self._keys(held, query_norms, start)
            top = keys.topk(min(k + 1, keys.shape[1]), dim=1)
            candidate_keys.append(top.values[:, :k])
            candidate_positions.append(top.indices[:, :k] + start)
            if keys.shape[1] > k:
                kth, next_key = top.values[:, k - 1], top.values[:, k]
                tied_keys.append(torch.where(kth == next_key, kth, float("-inf")))
        best_keys, best_positions = _lowest_positions_first(
            torch.cat(candidate_keys, dim=1).float(), torch.cat(candidate_positions, dim=1), k
        )
        if not tied_keys:
            return (
                best_keys,
                best_positions,
                torch.zeros(len(queries), dtype=torch.bool, device=queries.device),
            )
        tied = (torch.stack(tied_keys, dim=1).float() == best_keys[:, -1:]).any(dim=1)
        return best_keys, best_positions, tied

    def _search_rows_exactly(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and positions ``(r, k)`` of float32 ``queries: (r, dim)`` with each block's top-k taken by the tie
        rule: the items above its k-th key, then the lowest positions of those equal to it (two more passes
        over the block, which is why only rows with such a tie come here)."""
        held = queries.to(self.dtype)
        query_norms = held.float().square().sum(dim=1, keepdim=True) if self.metric == "l2" else None
        candidate_keys, candidate_positions = [], []
        for start in range(0, len(self), self.item_block):
            keys = self._keys(held, query_norms, start)
            width = min(k, keys.shape[1])
            top = keys.topk(width, dim=1)
            kth = top.values[:, -1:]
            column = torch.arange(keys.shape[1], device=keys.device)
            lowest_tied = (
                torch.where(keys == kth, column, keys.shape[1]).topk(width, dim=1, largest=False).values
            )
            above, filler = top.values > kth, lowest_tied == keys.shape[1]
            # What is not a candidate gets the key -inf and a position past the last item: ranked last.
            candidate_keys += [
                top.values.masked_fill(~above, float("-inf")),
                kth.expand(-1, width).masked_fill(filler, float("-inf")),
            ]
            candidate_positions += [
                (top.indices + start).masked_fill(~above, len(self)),
                (lowest_tied + start).masked_fill(filler, len(self)),
            ]
        return _lowest_positions_first(
            torch.cat(candidate_keys, dim=1).float(), torch.cat(candidate_positions, dim=1), k
        )


def _lowest_positions_first(
    keys: torch.Tensor, positions: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` of each row of candidates ``keys, positions: (rows, c)`` (``c >= k``), ordered by key,
    equal keys by position."""
    by_position = positions.argsort(dim=1)
    keys, positions = keys.gather(1, by_position), positions.gather(1, by_position)
    # + 0.0 turns -0.0 into 0.0: a radix sort would otherwise order the two equal keys.
    order = (keys + 0.0).sort(dim=1, descending=True, stable=True).indices[:, :k]
    return keys.gather(1, order), positions.gather(1, order)


__all__ = [
    "DEFAULT_ITEM_BLOCK",
    "DEFAULT_QUERY_BLOCK",
    "SEARCH_DTYPES",
    "DeviceSearch",
    "checked_device",
    "checked_dtype",
]
