"""A persistent embedding index for retrieval: faiss search, safetensors storage.

Cosine scoring searches inner products of unit vectors (``IndexFlatIP``). Euclidean and Mahalanobis
scoring search Euclidean distances (``IndexFlatL2``) of embeddings first mapped by
:meth:`~hf_atr.modeling_atr.AtrScoringHead.transform` (``M^{1/2} x``), because
``(t − a)ᵀ M (t − a) = ‖M^{1/2} t − M^{1/2} a‖²`` (m-LTM Eq. 9); scores are then the negative
distance, exactly the head's :meth:`~hf_atr.modeling_atr.AtrScoringHead.similarity`.

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

On disk an index is two files: ``<name>.safetensors`` (the stored vectors and, in its metadata, the
metric, the index kind and its parameters, the model fingerprint) and ``<name>.json`` (the ids, optional
captions, optional spans and root). No faiss or pickle blobs are ever written or read: the faiss structure
is rebuilt from the vectors on load, so a file from an untrusted source can hold nothing but numbers and
strings. Each file is written under a temporary name and renamed into place (a save interrupted half-way
leaves the previous file whole), with the permissions of any new file (``0o666`` less the umask).

Format versions: ``"1"`` (ids and captions) is read as ``"2"`` without spans or root (:data:`MIGRATIONS`);
``"2"`` adds ``spans`` and ``root``; ``"3"`` adds ``frame_seconds``: the resolution of entries pooled from a
model's frame-level embeddings (``None``: window or clip entries, what every earlier index holds).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..file_permissions import apply_umask
from .device_search import DeviceSearch, checked_device, checked_dtype

METRICS = ("inner_product", "l2")
INDEX_KINDS = ("flat", "ivf", "hnsw")
FORMAT_VERSION = "3"
_VECTORS_KEY = "embeddings"
_TRAINING_POINTS_PER_CELL = 64
_FIRST_SEARCH_FACTOR = 4
""":meth:`EmbeddingIndex.search_files` first fetches this many entries per wanted file, then more until it
has enough distinct files (windows of one long file crowd the top of the list)."""


def _entries_v1_to_v2(entries: dict[str, Any]) -> dict[str, Any]:
    """Format 1 had no windows and no root: one entry per item, ids as given."""
    return {**entries, "spans": None, "root": None}


def _entries_v2_to_v3(entries: dict[str, Any]) -> dict[str, Any]:
    """Format 2 held window (or clip) entries only: no frame resolution."""
    return {**entries, "frame_seconds": None}


MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "1": _entries_v1_to_v2,
    "2": _entries_v2_to_v3,
}
"""``version -> step`` turning the ids JSON of that version into the next one's; applied in turn on load."""


class IndexFormatError(ValueError):
    """A saved index is corrupt, incomplete, or does not belong to the model that tries to use it."""


class IndexMismatchError(IndexFormatError):
    """A saved index built by another model (other embedding size, or other weights: its fingerprint).

    Attributes:
        directory: the folder the index was read from.
        name: which index, ``"audio_index"`` or ``"text_index"``.
        problem: what differs. The message adds the Python call that rebuilds the index; ``hf-atr`` names its
            command instead.
    """

    def __init__(self, directory: Path, name: str, problem: str) -> None:
        self.directory = directory
        self.name = name
        self.problem = problem
        super().__init__(f"{problem} Rebuild it with `pipe.index(...)`.")


def metric_for_scoring(scoring: str) -> str:
    """The faiss metric that ranks like a scoring head: inner product for cosine and dot, L2 for distances."""
    if scoring in ("cosine", "dot"):
        return "inner_product"
    if scoring in ("euclidean", "mahalanobis"):
        return "l2"
    raise ValueError(f"Unknown scoring {scoring!r}; expected 'cosine', 'dot', 'euclidean' or 'mahalanobis'.")


def model_fingerprint(model: Any) -> str:
    """A short hash of what fixes the embedding space of ``model``.

    Covers the architecture (backbone types, projection size, scoring) and the values of the
    projections and the scoring head, which change whenever the model is trained: an index built with
    other weights is stale even when its dimension fits.
    """
    config = model.config
    digest = hashlib.sha256()
    architecture = {
        "audio_model_type": config.audio_config.model_type,
        "text_model_type": config.text_config.model_type,
        "projection_dim": config.projection_dim,
        "scoring": config.scoring,
    }
    digest.update(json.dumps(architecture, sort_keys=True).encode())
    for module in (model.audio_projection, model.text_projection, model.scoring_head):
        for name, tensor in sorted(module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


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
        fingerprint: identifies the model whose embeddings these are (:func:`model_fingerprint`).
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
        fingerprint: str | None = None,
        root: str | os.PathLike | None = None,
        device: str | torch.device | None = None,
        search_dtype: str = "float32",
        frame_seconds: float | None = None,
    ) -> None:
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}.")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}.")
        if kind not in INDEX_KINDS:
            raise ValueError(f"kind must be one of {INDEX_KINDS}, got {kind!r}.")
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
        self.fingerprint = fingerprint
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
        """Write ``<directory>/<name>.safetensors`` and ``<directory>/<name>.json``; returns both paths."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors_path, ids_path = directory / f"{name}.safetensors", directory / f"{name}.json"
        entries = {
            "ids": self.ids,
            "captions": self.captions,
            "spans": self.spans,
            "root": self.root,
            "frame_seconds": self.frame_seconds,
        }
        ids_text = json.dumps(entries, ensure_ascii=False)
        metadata = {
            "format_version": FORMAT_VERSION,
            "dim": str(self.dim),
            "metric": self.metric,
            "kind": self.kind,
            "parameters": json.dumps(self._parameters()),
            "fingerprint": self.fingerprint or "",
            "count": str(len(self)),
            "ids_sha256": hashlib.sha256(ids_text.encode()).hexdigest(),
        }
        with replaced_atomically(tensors_path) as partial:
            save_file(
                {_VECTORS_KEY: torch.from_numpy(np.ascontiguousarray(self.embeddings))}, partial, metadata
            )
        with replaced_atomically(ids_path) as partial:
            partial.write_text(ids_text, encoding="utf-8")
        return [tensors_path, ids_path]

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        name: str,
        *,
        expected_dim: int | None = None,
        expected_fingerprint: str | None = None,
    ) -> EmbeddingIndex:
        """Read an index written by :meth:`save`, checking it against the model that will query it.

        Raises:
            IndexFormatError: missing or corrupt file, ids that do not belong to the vectors, a dimension
                other than ``expected_dim``, or a fingerprint other than ``expected_fingerprint`` (the
                index was built with another model or other weights: rebuild it).
        """
        directory = Path(directory)
        tensors_path, ids_path = directory / f"{name}.safetensors", directory / f"{name}.json"
        for path in (tensors_path, ids_path):
            if not path.is_file():
                raise IndexFormatError(
                    f"Index file {path} is missing; save an index with `save_index` first."
                )
        try:
            with safe_open(tensors_path, framework="pt") as handle:
                metadata = handle.metadata() or {}
                tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError, ValueError) as error:
            raise IndexFormatError(
                f"Index file {tensors_path} is corrupt or not a safetensors file: {error}"
            ) from error
        ids_text = ids_path.read_text(encoding="utf-8")
        problems = _metadata_problems(metadata, tensors, ids_text)
        if problems:
            raise IndexFormatError(f"Index {tensors_path} is corrupt or incomplete: {'; '.join(problems)}.")
        dim = int(metadata["dim"])
        if expected_dim is not None and dim != expected_dim:
            raise IndexMismatchError(
                directory,
                name,
                f"Index {tensors_path} holds {dim}-d embeddings but the model produces {expected_dim}-d ones; "
                "it was built with another model.",
            )
        stored_fingerprint = metadata["fingerprint"] or None
        if expected_fingerprint is not None and stored_fingerprint not in (None, expected_fingerprint):
            raise IndexMismatchError(
                directory,
                name,
                f"Index {tensors_path} was built with a model of fingerprint {stored_fingerprint}, but this "
                f"model's fingerprint is {expected_fingerprint} (other architecture or weights).",
            )
        entries = json.loads(ids_text)
        version = metadata["format_version"]
        while version != FORMAT_VERSION:
            entries = MIGRATIONS[version](entries)
            version = str(int(version) + 1)
        index = cls(
            dim,
            metric=metadata["metric"],
            kind=metadata["kind"],
            fingerprint=stored_fingerprint,
            root=entries["root"],
            frame_seconds=entries["frame_seconds"],
            **json.loads(metadata["parameters"]),
        )
        spans = None if entries["spans"] is None else [tuple(span) for span in entries["spans"]]
        index.add(tensors[_VECTORS_KEY].numpy(), entries["ids"], entries["captions"], spans)
        return index

    def _parameters(self) -> dict[str, int | None]:
        return {
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "hnsw_m": self.hnsw_m,
            "ef_search": self.ef_search,
            "ef_construction": self.ef_construction,
        }


def _metadata_problems(
    metadata: dict[str, str], tensors: dict[str, torch.Tensor], ids_text: str
) -> list[str]:
    """What is wrong with a loaded index, in words; empty when it is consistent."""
    required = ("format_version", "dim", "metric", "kind", "parameters", "fingerprint", "count", "ids_sha256")
    missing = [key for key in required if key not in metadata]
    if missing:
        return [f"metadata lacks {missing}"]
    if metadata["format_version"] not in (*MIGRATIONS, FORMAT_VERSION):
        readable = sorted((*MIGRATIONS, FORMAT_VERSION))
        return [f"format version {metadata['format_version']!r}; this hf-atr reads versions {readable}"]
    if metadata["metric"] not in METRICS or metadata["kind"] not in INDEX_KINDS:
        return [f"unknown metric {metadata['metric']!r} or kind {metadata['kind']!r}"]
    if set(tensors) != {_VECTORS_KEY}:
        return [f"expected one tensor {_VECTORS_KEY!r}, found {sorted(tensors)}"]
    vectors = tensors[_VECTORS_KEY]
    problems = []
    if vectors.dtype != torch.float32 or vectors.ndim != 2 or str(vectors.shape[1]) != metadata["dim"]:
        problems.append(
            f"embeddings are {vectors.dtype} {tuple(vectors.shape)}, expected float32 (n, {metadata['dim']})"
        )
    elif not torch.isfinite(vectors).all():
        problems.append("embeddings contain NaN or infinity")
    if str(vectors.shape[0]) != metadata["count"]:
        problems.append(f"{vectors.shape[0]} embeddings but metadata says {metadata['count']}")
    if hashlib.sha256(ids_text.encode()).hexdigest() != metadata["ids_sha256"]:
        problems.append("the ids JSON file does not match the embeddings file (edited or from another index)")
    return problems


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it replaces ``path`` in one rename.

    The file gets the permissions of any new file (``0o666`` less the umask, whatever the writer used:
    safetensors writes ``0o600``); it is removed if writing fails, so ``path`` is either the old file or the
    new one, never half of one.
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        yield partial
        apply_umask(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


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


__all__ = [
    "FORMAT_VERSION",
    "MIGRATIONS",
    "EmbeddingIndex",
    "INDEX_KINDS",
    "IndexFormatError",
    "IndexMismatchError",
    "METRICS",
    "metric_for_scoring",
    "model_fingerprint",
    "replaced_atomically",
]
