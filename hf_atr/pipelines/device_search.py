"""Exact top-k search on a torch device: the item matrix held there, scored by matrix products, top-k by blocks.

:class:`DeviceSearch` is what :class:`~hf_atr.pipelines.index.EmbeddingIndex` searches with when it is given a
``device`` (a GPU, or ``"cpu"``, which runs the same code and is how the tests check it against faiss):

- the ``(n, dim)`` items are copied to the device once, in float32 or float16 (:data:`SEARCH_DTYPES`);
- a block of queries is scored against a block of items at a time (at most ``query_block × item_block``
  scores in memory: 1,024 × 65,536 by default, 256 MiB in float32), each block's top-k taken and merged with
  the best so far;
- inner product: ``s(q, x) = qᵀx``. L2: ``s(q, x) = −‖q − x‖``, ranked by the squared distance expanded as
  ``‖q‖² + ‖x‖² − 2 qᵀx`` and clamped at 0, as faiss's ``IndexFlatL2`` computes it. Mahalanobis scoring is L2
  on vectors already mapped by ``M^{1/2}`` (m-LTM Eq. 9: ``(t − a)ᵀ M (t − a) = ‖M^{1/2} t − M^{1/2} a‖²``;
  :func:`hf_atr.pipelines.indexing.index_vectors`), so it needs nothing here.

Tie rule: equal scores are ranked by item position (the order of addition), lowest first, and of the items
tied at the k-th place those of the lowest positions are kept. This is faiss ``IndexFlatL2``'s order (its heap
compares ``(distance, id)``); ``IndexFlatIP`` lists equal scores by descending id, and at the k-th place keeps
whichever of the tied items its heap held (it depends on the order they came in), so against it only the
scores, and the positions of rows without a tie at the k-th place, agree as sets.

Float16 halves the memory and, on a GPU, runs the products on tensor cores; its scores carry float16's
rounding (about 3 significant digits), so near-ties may swap (recall@10 against float32, not equality).
"""

from __future__ import annotations

import numpy as np
import torch

SEARCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}
"""The item matrix's precision on the device, by name. bfloat16 is left out: its 8-bit mantissa ranks unit
vectors too coarsely (recall@10 0.63 against float32 on clustered 512-d vectors, ``../shared/GPU-NOTES.md``)."""
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
        queries_on_device = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(self.device)
        if self.dtype == torch.float16:
            largest = float(queries_on_device.norm(dim=1).max()) * self._max_item_norm
            if largest >= _FLOAT16_MAX:
                raise ValueError(
                    f"float16 cannot hold these scores (inner products up to {largest:.4g}, float16 max "
                    f"{_FLOAT16_MAX:.0f}); search in float32."
                )
        blocks = [self._search_block(block, k) for block in queries_on_device.split(self.query_block)]
        keys = torch.cat([key for key, _ in blocks])
        positions = torch.cat([position for _, position in blocks])
        scores = keys if self.metric == "inner_product" else -keys
        return scores.cpu().numpy().astype(np.float32), positions.cpu().numpy().astype(np.int64)

    def _search_block(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Ranking keys ``(b, k)`` (inner products, or minus clamped squared distances) and positions of one
        block of float32 queries, merged over the blocks of items."""
        held = queries.to(self.dtype)
        query_norms = held.float().square().sum(dim=1, keepdim=True) if self.metric == "l2" else None
        best_keys = queries.new_empty((len(queries), 0))
        best_positions = torch.empty((len(queries), 0), dtype=torch.long, device=queries.device)
        for start in range(0, len(self), self.item_block):
            items = self.items[start : start + self.item_block]
            keys = (held @ items.T).float()
            if self.metric == "l2":
                squared = query_norms + self._squared_norms[start : start + len(items)] - 2 * keys
                keys = -squared.clamp_(min=0.0)
            block_keys, block_positions = _top_k_lowest_positions_first(keys, k)
            best_keys, best_positions = _merge(
                best_keys, best_positions, block_keys, block_positions + start, k
            )
        return best_keys, best_positions


def _top_k_lowest_positions_first(keys: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``min(k, columns)`` of each row of ``keys: (rows, columns)``; of the columns tied at the k-th
    place, the lowest. ``torch.topk`` breaks ties as it likes, so rows with such a tie are stable-sorted
    instead (rare unless items repeat)."""
    k = min(k, keys.shape[1])
    top = keys.topk(k, dim=1)
    values, positions = top.values, top.indices
    tied_rows = ((keys >= values[:, -1:]).sum(dim=1) > k).nonzero().squeeze(1)
    if len(tied_rows):
        # + 0.0 turns -0.0 into 0.0: a radix sort would otherwise order the two equal keys.
        ordered = (keys[tied_rows] + 0.0).sort(dim=1, descending=True, stable=True)
        values, positions = values.clone(), positions.clone()
        values[tied_rows], positions[tied_rows] = ordered.values[:, :k], ordered.indices[:, :k]
    return values, positions


def _merge(
    keys: torch.Tensor, positions: torch.Tensor, more_keys: torch.Tensor, more_positions: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` of two candidate lists per row, ordered by key, equal keys by position."""
    all_keys = torch.cat([keys, more_keys], dim=1)
    all_positions = torch.cat([positions, more_positions], dim=1)
    by_position = all_positions.argsort(dim=1)
    all_keys, all_positions = all_keys.gather(1, by_position), all_positions.gather(1, by_position)
    order = (all_keys + 0.0).sort(dim=1, descending=True, stable=True).indices[:, :k]
    return all_keys.gather(1, order), all_positions.gather(1, order)


__all__ = [
    "DEFAULT_ITEM_BLOCK",
    "DEFAULT_QUERY_BLOCK",
    "SEARCH_DTYPES",
    "DeviceSearch",
    "checked_device",
    "checked_dtype",
]
