"""A persistent embedding index for retrieval: faiss search, safetensors storage.

Cosine scoring searches inner products of unit vectors (``IndexFlatIP``). Euclidean and Mahalanobis
scoring search Euclidean distances (``IndexFlatL2``) of embeddings first mapped by
:meth:`~hf_atr.scoring_head.AtrScoringHead.transform` (``M^{1/2} x``), because
``(t − a)ᵀ M (t − a) = ‖M^{1/2} t − M^{1/2} a‖²`` (m-LTM Eq. 9); scores are then the negative
distance, exactly the head's :meth:`~hf_atr.scoring_head.AtrScoringHead.similarity`.

Approximate search for large corpora: ``kind="ivf"`` (inverted lists over k-means cells, ``nprobe``
cells searched) or ``kind="hnsw"`` (a navigable small-world graph, ``ef_search`` candidates kept).

Exact search on a torch device (a GPU; ``"cpu"`` runs the same code): ``device=`` (or
:meth:`EmbeddingIndex.search_on`) searches the stored vectors there by blocks (:mod:`.device_search`), in
float32 or float16, whatever the ``kind``: an IVF or HNSW index is then searched exactly, from the vectors it
always keeps (its faiss parameters apply to faiss search only). The device is a runtime choice, never saved.

Long recordings are stored window by window: several entries share the id of their file and each carries
its time span (``spans``, seconds); :meth:`EmbeddingIndex.search_files` returns the best entry of each of
the top-k distinct ids. An index of files records their ``root`` directory, so that relative ids resolve
from anywhere (:meth:`EmbeddingIndex.path_of`).

On disk an index is two files, vectors and ids, written atomically and checked when read, with its format
version and migrations: :mod:`.index_storage`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from ..deprecation import moved_names
from . import index_storage
from .device_search import DeviceSearch, checked_device, checked_dtype
from .index_storage import read_index_files, write_index_files

_FIRST_SEARCH_FACTOR = 4
""":meth:`EmbeddingIndex.search_files` first fetches this many entries per wanted file, then more until it
has enough distinct files (windows of one long file crowd the top of the list)."""


def metric_for_scoring(scoring: str) -> str:
    """The faiss metric that ranks like a scoring head: inner product for cosine and dot, L2 for distances."""
    if scoring in ("cosine", "dot"):
        return "inner_product"
    if scoring in ("euclidean", "mahalanobis"):
        return "l2"
    raise ValueError(f"Unknown scoring {scoring!r}; expected 'cosine', 'dot', 'euclidean' or 'mahalanobis'.")


class EmbeddingIndex:
    """Stored ``(n, dim)`` embeddings with ids, searchable by top-k score.

    Args:
        dim: embedding size.
        metric: ``"inner_product"`` (scores are inner products) or ``"l2"`` (scores are negative
            Euclidean distances).
        kind: ``"flat"`` (exact), ``"ivf"`` or ``"hnsw"`` (approximate).
        nlist: IVF cells; default ``round(sqrt(n))`` at build time, at most ``n / 39``.
        nprobe: IVF cells searched per query (default 16).
        hnsw_m: HNSW neighbours per node (default 32).
        ef_search / ef_construction: HNSW candidate-list sizes (defaults 64 / 80).
        fingerprint: identifies the model whose embeddings these are: its :func:`~hf_atr.pipelines.index_storage.model_fingerprint` in
            ``embedding_dtype``, or its fingerprints by dtype (:func:`~.index_storage.model_fingerprints`).
        embedding_dtype: the dtype the model computed the embeddings in (``"float32"``, ``"bfloat16"``,
            ``"float16"``); the stored vectors are float32 whatever it is.
        root: the directory relative ids resolve from (:meth:`path_of`); ``None`` for items that are not files.
        device / search_dtype: search exactly on this torch device, the vectors held there in ``"float32"`` or
            ``"float16"`` (:meth:`search_on`); ``None``: faiss on the CPU.
        frame_seconds: the entries are a model's frame embeddings pooled to this many seconds each
            (:class:`~hf_atr.windowing.Windowing` ``frame_seconds``), their spans at that resolution; ``None``
            (default): window or clip entries.

    Vectors are added with :meth:`add`; approximate indexes are (re)built on the first search after
    an addition, on all vectors, so :meth:`add` may be called in batches. Entries may share an id (the
    windows of one recording, each with its span); :meth:`search_files` ranks distinct ids.
    """

    def __init__(
        self,
        dim: int,
        *,
        metric: str = "inner_product",
        kind: str = "flat",
        nlist: int | None = None,
        nprobe: int = 16,
        hnsw_m: int = 32,
        ef_search: int = 64,
        ef_construction: int = 80,
        fingerprint: str | Mapping[str, str] | None = None,
        embedding_dtype: str = "float32",
        root: str | os.PathLike | None = None,
        device: str | torch.device | None = None,
        search_dtype: str = "float32",
        frame_seconds: float | None = None,
    ) -> None:
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}.")
        if metric not in index_storage.METRICS:
            raise ValueError(f"metric must be one of {index_storage.METRICS}, got {metric!r}.")
        if kind not in index_storage.INDEX_KINDS:
            raise ValueError(f"kind must be one of {index_storage.INDEX_KINDS}, got {kind!r}.")
        for name, value in (
            ("nprobe", nprobe),
            ("hnsw_m", hnsw_m),
            ("ef_search", ef_search),
            ("ef_construction", ef_construction),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if nlist is not None and (not isinstance(nlist, int) or nlist <= 0):
            raise ValueError(f"nlist must be a positive integer or None, got {nlist!r}.")
        self.dim = dim
        self.metric = metric
        self.kind = kind
        self.nlist = nlist
        self.nprobe = nprobe
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.ef_construction = ef_construction
        self.embedding_dtype = embedding_dtype
        self.fingerprints = (
            {}
            if fingerprint is None
            else {embedding_dtype: fingerprint}
            if isinstance(fingerprint, str)
            else dict(fingerprint)
        )
        """``{dtype: fingerprint}`` of the model that computed the embeddings."""
        self.root = None if root is None else str(root)
        self.frame_seconds = None if frame_seconds is None else float(frame_seconds)
        self.ids: list[str] = []
        self.captions: list[str] | None = None
        self.spans: list[tuple[float, float]] | None = None
        self._chunks: list[np.ndarray] = []
        self._faiss_index: Any = None
        self._distinct_ids: int | None = None
        self.device: torch.device | None = None
        self.search_dtype = "float32"
        self._device_search: DeviceSearch | None = None
        self.search_on(device, search_dtype)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint of the model that computed the embeddings, in ``embedding_dtype``."""
        return self.fingerprints.get(self.embedding_dtype)

    @property
    def embeddings(self) -> np.ndarray:
        """``(n, dim)`` float32 stored vectors."""
        if len(self._chunks) != 1:
            self._chunks = [
                np.concatenate(self._chunks) if self._chunks else np.zeros((0, self.dim), np.float32)
            ]
        return self._chunks[0]

    def add(
        self,
        embeddings: torch.Tensor | np.ndarray,
        ids: Sequence[str],
        captions: Sequence[str] | None = None,
        spans: Sequence[tuple[float, float]] | None = None,
    ) -> None:
        """Append ``embeddings: (n, dim)`` with their ``ids`` (and, for a caption index, their texts; for
        windows of recordings, their ``(start, end)`` spans in seconds)."""
        vectors = _as_vectors(embeddings, self.dim)
        ids = [str(item) for item in ids]
        if len(ids) != vectors.shape[0]:
            raise ValueError(f"Got {vectors.shape[0]} embeddings but {len(ids)} ids.")
        for name, values, stored in (("captions", captions, self.captions), ("spans", spans, self.spans)):
            if values is not None:
                if len(values) != len(ids):
                    raise ValueError(f"Got {len(ids)} ids but {len(values)} {name}.")
                if stored is None and self.ids:
                    raise ValueError(f"This index holds entries without {name}; add {name} for all or none.")
            elif stored is not None:
                raise ValueError(f"This index holds {name}; pass `{name}` with every addition.")
        if captions is not None:
            self.captions = [*(self.captions or []), *(str(caption) for caption in captions)]
        if spans is not None:
            self.spans = [*(self.spans or []), *((float(start), float(end)) for start, end in spans)]
        self.ids.extend(ids)
        self._chunks.append(vectors)
        self._faiss_index = None
        self._device_search = None
        self._distinct_ids = None

    def path_of(self, item_id: str) -> str | None:
        """Where the file of ``item_id`` is: ``root / id`` (an absolute id stays as it is); ``None`` without
        a root."""
        return None if self.root is None else str(Path(self.root) / item_id)

    def search_on(self, device: str | torch.device | None, search_dtype: str = "float32") -> EmbeddingIndex:
        """Search exactly on ``device`` from now on, the vectors held there in ``search_dtype`` (``None``: faiss on
        the CPU); returns the index. The vectors are copied there at the next search.

        Raises:
            ValueError: a device this machine lacks, or a dtype other than ``"float32"`` / ``"float16"``.
        """
        checked_dtype(search_dtype)
        placement = (None if device is None else checked_device(device), search_dtype)
        if placement != (self.device, self.search_dtype):
            self.device, self.search_dtype = placement
            self._device_search = None
        return self

    def search(self, queries: torch.Tensor | np.ndarray, top_k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Top-``top_k`` entries per query row.

        Args:
            queries: ``(q, dim)`` (already transformed like the stored vectors for Mahalanobis).

        Returns:
            ``scores (q, k)`` float32, best first (inner products, or negative Euclidean distances),
            and ``positions (q, k)`` int64 into :attr:`ids`; ``k = min(top_k, len(self))``. An
            approximate index may return fewer hits for a query, padded with ``-inf`` / ``-1``. On a ``device``,
            equal scores rank by position, lowest first (:mod:`.device_search`).
        """
        if not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
        if not self.ids:
            raise ValueError("The index is empty; add embeddings first (pipeline: `pipe.index(...)`).")
        vectors = _as_vectors(queries, self.dim, what="queries")
        searcher = self._built_index() if self.device is None else self._device_searcher()
        distances, positions = searcher.search(vectors, min(top_k, len(self)))
        missing = positions < 0
        if self.metric == "l2":
            distances = -np.sqrt(np.clip(distances, 0.0, None))
        distances[missing] = -np.inf
        return distances.astype(np.float32), positions.astype(np.int64)

    def search_files(
        self, queries: torch.Tensor | np.ndarray, top_k: int = 10
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top-``top_k`` distinct ids per query row, each at its best-scoring entry (window).

        Returns:
            ``scores (q, k)`` and ``positions (q, k)`` as :meth:`search` does, ``k = min(top_k, distinct
            ids)``, padded with ``-inf`` / ``-1`` where an approximate index found fewer.
        """
        if not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
        if self._distinct_ids is None:
            self._distinct_ids = len(set(self.ids))
        if self._distinct_ids == len(self.ids):
            return self.search(queries, top_k)
        wanted = min(top_k, self._distinct_ids)
        fetch = min(len(self), _FIRST_SEARCH_FACTOR * wanted)
        while True:
            scores, positions = self.search(queries, fetch)
            best = [
                self._best_per_id(row_scores, row_positions, wanted)
                for row_scores, row_positions in zip(scores, positions)
            ]
            if fetch == len(self) or all(len(hits) == wanted for hits in best):
                break
            fetch = min(len(self), fetch * _FIRST_SEARCH_FACTOR)
        file_scores = np.full((len(best), wanted), -np.inf, dtype=np.float32)
        file_positions = np.full((len(best), wanted), -1, dtype=np.int64)
        for row, hits in enumerate(best):
            for column, (score, position) in enumerate(hits):
                file_scores[row, column], file_positions[row, column] = score, position
        return file_scores, file_positions

    def _best_per_id(self, scores: np.ndarray, positions: np.ndarray, wanted: int) -> list[tuple[float, int]]:
        seen: set[str] = set()
        hits = []
        for score, position in zip(scores, positions):
            if position < 0 or self.ids[position] in seen:
                continue
            seen.add(self.ids[position])
            hits.append((float(score), int(position)))
            if len(hits) == wanted:
                break
        return hits

    def _device_searcher(self) -> DeviceSearch:
        if self._device_search is None:
            self._device_search = DeviceSearch(self.embeddings, self.metric, self.device, self.search_dtype)
        return self._device_search

    def _built_index(self) -> Any:
        if self._faiss_index is not None:
            return self._faiss_index
        vectors = self.embeddings
        faiss_metric = faiss.METRIC_INNER_PRODUCT if self.metric == "inner_product" else faiss.METRIC_L2
        if self.kind == "flat":
            index = (
                faiss.IndexFlatIP(self.dim) if self.metric == "inner_product" else faiss.IndexFlatL2(self.dim)
            )
        elif self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss_metric)
            index.hnsw.efConstruction = self.ef_construction
            index.hnsw.efSearch = self.ef_search
        else:
            nlist = min(self.nlist or _default_nlist(len(vectors)), len(vectors))
            quantizer = (
                faiss.IndexFlatIP(self.dim) if self.metric == "inner_product" else faiss.IndexFlatL2(self.dim)
            )
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss_metric)
            index.cp.seed = (
                1234  # a fixed k-means seed: the same vectors rebuild the same cells after loading
            )
            index.train(vectors)
            index.nprobe = min(self.nprobe, nlist)
        index.add(vectors)
        self._faiss_index = index
        return index

    def save(self, directory: str | os.PathLike, name: str) -> list[Path]:
        """Write ``<directory>/<name>.safetensors`` and ``<directory>/<name>.json``; returns both paths
        (:func:`~hf_atr.pipelines.index_storage.write_index_files`)."""
        entries = {
            "ids": self.ids,
            "captions": self.captions,
            "spans": self.spans,
            "root": self.root,
            "frame_seconds": self.frame_seconds,
        }
        return write_index_files(
            directory,
            name,
            self.embeddings,
            entries,
            metric=self.metric,
            kind=self.kind,
            parameters=self._parameters(),
            fingerprint=self.fingerprints,
            embedding_dtype=self.embedding_dtype,
        )

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        name: str,
        *,
        expected_dim: int | None = None,
        expected_fingerprint: str | Mapping[str, str] | None = None,
    ) -> EmbeddingIndex:
        """Read an index written by :meth:`save`, checking it against the model that will query it
        (:func:`~hf_atr.pipelines.index_storage.read_index_files`).

        Raises:
            IndexFormatError: missing or corrupt file, ids that do not belong to the vectors, a dimension
                other than ``expected_dim``, or a fingerprint other than ``expected_fingerprint`` (the
                index was built with another model or other weights: rebuild it).
        """
        stored = read_index_files(
            directory, name, expected_dim=expected_dim, expected_fingerprint=expected_fingerprint
        )
        entries = stored.entries
        index = cls(
            stored.vectors.shape[1],
            metric=stored.metric,
            kind=stored.kind,
            fingerprint=stored.fingerprints,
            embedding_dtype=stored.embedding_dtype,
            root=entries["root"],
            frame_seconds=entries["frame_seconds"],
            **stored.parameters,
        )
        index.add(stored.vectors, entries["ids"], entries["captions"], entries["spans"])
        return index

    def _parameters(self) -> dict[str, int | None]:
        return {
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "hnsw_m": self.hnsw_m,
            "ef_search": self.ef_search,
            "ef_construction": self.ef_construction,
        }


def _default_nlist(count: int) -> int:
    """``sqrt(n)`` cells, but at least 39 training points per cell (faiss's k-means minimum)."""
    return max(1, min(round(math.sqrt(count)), count // 39))


def _as_vectors(values: torch.Tensor | np.ndarray, dim: int, what: str = "embeddings") -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    vectors = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise ValueError(f"{what} must have shape (n, {dim}), got {vectors.shape}.")
    if not np.isfinite(vectors).all():
        raise ValueError(f"{what} contain NaN or infinity.")
    return vectors


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "FORMAT_VERSION": "hf_atr.pipelines.index_storage",
    "INDEX_KINDS": "hf_atr.pipelines.index_storage",
    "IndexFormatError": "hf_atr.pipelines.index_storage",
    "IndexMismatchError": "hf_atr.pipelines.index_storage",
    "METRICS": "hf_atr.pipelines.index_storage",
    "MIGRATIONS": "hf_atr.pipelines.index_storage",
    "model_fingerprint": "hf_atr.pipelines.index_storage",
    "replaced_atomically": "hf_atr.pipelines.index_storage",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "EmbeddingIndex",
    "metric_for_scoring",
]
