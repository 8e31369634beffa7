"""How an :class:`~hf_atr.pipelines.index.EmbeddingIndex` is stored: its two files, checked when read.

On disk an index is two files: ``<name>.safetensors`` (the stored vectors and, in its metadata, the
metric, the index kind and its parameters, the model fingerprint) and ``<name>.json`` (the ids, optional
captions, optional spans and root). No faiss or pickle blobs are ever written or read: the faiss structure
is rebuilt from the vectors on load, so a file from an untrusted source can hold nothing but numbers and
strings. Each file is written under a temporary name and renamed into place (a save interrupted half-way
leaves the previous file whole), with the permissions of any new file (``0o666`` less the umask).

Format versions: ``"1"`` (ids and captions) is read as ``"2"`` without spans or root (:data:`MIGRATIONS`);
``"2"`` adds ``spans`` and ``root``; ``"3"`` adds ``frame_seconds``: the resolution of entries pooled from a
model's frame-level embeddings (``None``: window or clip entries, what every earlier index holds).

The metadata also records the dtype the model computed the embeddings in (``embedding_dtype``: ``"float32"``,
``"bfloat16"``, ``"float16"``; the vectors themselves are float32 whatever it is) and the model's fingerprint in that
dtype and in each coarser half precision (``fingerprints``), so that the same weights loaded in another precision
are recognised (:func:`model_fingerprints`). An index without them was computed in float32.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..file_permissions import apply_umask
from ..lazy import get_logger

logger = get_logger(__name__)

METRICS = ("inner_product", "l2")
INDEX_KINDS = ("flat", "ivf", "hnsw")
FORMAT_VERSION = "3"
_VECTORS_KEY = "embeddings"
HALF_DTYPES = ("bfloat16", "float16")
"""The half precisions a float32 model's fingerprint is also recorded in (its weights rounded to each)."""
EMBEDDING_DTYPES = ("float64", "float32", *HALF_DTYPES)
"""The dtypes an index's embeddings may have been computed in."""


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


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: how an index names a dtype."""
    return str(dtype).removeprefix("torch.")


def model_dtype(model: Any) -> str:
    """The name of the dtype ``model`` computes in (that of its weights, ``PreTrainedModel.dtype``)."""
    return dtype_name(model.dtype)


def model_fingerprint(model: Any, dtype: str | None = None) -> str:
    """A short hash of what fixes the embedding space of ``model``.

    Covers the architecture (backbone types, projection size, scoring) and the values of the
    projections and the scoring head, which change whenever the model is trained: an index built with
    other weights is stale even when its dimension fits. ``dtype`` (``"bfloat16"``, ``"float16"``): the weights
    rounded to it first, which is what the same weights loaded in that dtype give (default: as they are). A model
    that carries the fingerprint of the torch model it was exported from
    (:class:`~hf_atr.export.onnx_encoder.OnnxDualEncoder`'s ``fingerprint``, taken in float32) gives that one.
    """
    recorded = getattr(model, "fingerprint", None)
    if isinstance(recorded, str):
        if dtype not in (None, "float32"):
            raise ValueError(
                f"An exported model's fingerprint is recorded in float32 only; it has none in {dtype}."
            )
        return recorded
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
            values = tensor.detach().to("cpu")
            if dtype is not None:
                values = values.to(getattr(torch, dtype))
            digest.update(name.encode())
            digest.update(values.to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def model_fingerprints(model: Any) -> dict[str, str]:
    """``{dtype: fingerprint}`` of ``model`` in its own dtype and in each :data:`HALF_DTYPES` coarser than it (a
    float32 model: all three; a half-precision one: its own only, as its weights cannot be rounded to the other)."""
    if isinstance(getattr(model, "fingerprint", None), str):  # an exported model: its float32 graphs' record
        return {"float32": model.fingerprint}
    own = model_dtype(model)
    coarser = [name for name in HALF_DTYPES if _bits(name) < _bits(own)]
    return {own: model_fingerprint(model), **{name: model_fingerprint(model, name) for name in coarser}}


def _bits(name: str) -> int:
    return torch.finfo(getattr(torch, name)).bits


def _fingerprints(fingerprint: str | Mapping[str, str] | None, embedding_dtype: str) -> dict[str, str]:
    """A fingerprint given as one string (that of ``embedding_dtype``) or by dtype, as ``{dtype: fingerprint}``."""
    if fingerprint is None:
        return {}
    return {embedding_dtype: fingerprint} if isinstance(fingerprint, str) else dict(fingerprint)


@dataclass(frozen=True)
class StoredIndex:
    """What :func:`read_index_files` read, checked and migrated to :data:`FORMAT_VERSION`.

    Attributes:
        vectors: ``(n, dim)`` float32.
        metric / kind / parameters: the index's metric, kind and faiss parameters (``nlist``, ``nprobe``, ...).
        fingerprint: the model's (:func:`model_fingerprint`) in ``embedding_dtype``, ``None`` when none was recorded.
        embedding_dtype: the dtype the model computed the embeddings in (``"float32"`` when none was recorded).
        fingerprints: ``{dtype: fingerprint}`` (:func:`model_fingerprints`).
        entries: ``ids``, ``captions``, ``spans`` (``(start, end)`` tuples or ``None``), ``root``,
            ``frame_seconds``.
    """

    vectors: np.ndarray
    metric: str
    kind: str
    parameters: dict[str, int | None]
    fingerprint: str | None
    entries: dict[str, Any]
    embedding_dtype: str = "float32"
    fingerprints: dict[str, str] | None = None


def write_index_files(
    directory: str | os.PathLike,
    name: str,
    vectors: np.ndarray,
    entries: dict[str, Any],
    *,
    metric: str,
    kind: str,
    parameters: dict[str, int | None],
    fingerprint: str | Mapping[str, str] | None,
    embedding_dtype: str = "float32",
) -> list[Path]:
    """Write ``<directory>/<name>.safetensors`` (``vectors: (n, dim)`` float32 and the metadata) and
    ``<directory>/<name>.json`` (``entries``), each replaced atomically; returns both paths.

    ``fingerprint``: the model's in ``embedding_dtype`` (the dtype it computed the vectors in), or by dtype
    (:func:`model_fingerprints`)."""
    fingerprints = _fingerprints(fingerprint, embedding_dtype)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors_path, ids_path = directory / f"{name}.safetensors", directory / f"{name}.json"
    ids_text = json.dumps(entries, ensure_ascii=False)
    metadata = {
        "format_version": FORMAT_VERSION,
        "dim": str(vectors.shape[1]),
        "metric": metric,
        "kind": kind,
        "parameters": json.dumps(parameters),
        "fingerprint": fingerprints.get(embedding_dtype, ""),
        "fingerprints": json.dumps(fingerprints, sort_keys=True),
        "embedding_dtype": embedding_dtype,
        "count": str(len(vectors)),
        "ids_sha256": hashlib.sha256(ids_text.encode()).hexdigest(),
    }
    with replaced_atomically(tensors_path) as partial:
        save_file({_VECTORS_KEY: torch.from_numpy(np.ascontiguousarray(vectors))}, partial, metadata)
    with replaced_atomically(ids_path) as partial:
        partial.write_text(ids_text, encoding="utf-8")
    return [tensors_path, ids_path]


def read_index_files(
    directory: str | os.PathLike,
    name: str,
    *,
    expected_dim: int | None = None,
    expected_fingerprint: str | Mapping[str, str] | None = None,
) -> StoredIndex:
    """Read the files :func:`write_index_files` wrote, checking them against the model that will query them.

    ``expected_fingerprint``: the querying model's, one string (compared in the index's ``embedding_dtype``) or by
    dtype (:func:`model_fingerprints`, compared in every dtype both record). When they share no dtype (an index
    computed in bfloat16 and a model in float16, or one that records float32 only and a half-precision model), the
    model cannot be checked against the index: a warning says so and the index is read.

    Raises:
        IndexFormatError: missing or corrupt file, ids that do not belong to the vectors, or a format version
            this hf-atr cannot read.
        IndexMismatchError: a dimension other than ``expected_dim``, or a fingerprint other than
            ``expected_fingerprint`` (the index was built with another model or other weights: rebuild it).
    """
    directory = Path(directory)
    tensors_path, ids_path = directory / f"{name}.safetensors", directory / f"{name}.json"
    for path in (tensors_path, ids_path):
        if not path.is_file():
            raise IndexFormatError(f"Index file {path} is missing; save an index with `save_index` first.")
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
    embedding_dtype = metadata.get("embedding_dtype", "float32")
    stored_fingerprints = (
        json.loads(metadata["fingerprints"])
        if "fingerprints" in metadata
        else _fingerprints(stored_fingerprint, embedding_dtype)
    )
    if expected_fingerprint is not None:
        _check_fingerprints(
            tensors_path,
            name,
            stored_fingerprints,
            _fingerprints(expected_fingerprint, embedding_dtype),
            embedding_dtype,
        )
    entries = json.loads(ids_text)
    version = metadata["format_version"]
    while version != FORMAT_VERSION:
        entries = MIGRATIONS[version](entries)
        version = str(int(version) + 1)
    if entries["spans"] is not None:
        entries["spans"] = [tuple(span) for span in entries["spans"]]
    return StoredIndex(
        vectors=tensors[_VECTORS_KEY].numpy(),
        metric=metadata["metric"],
        kind=metadata["kind"],
        parameters=json.loads(metadata["parameters"]),
        fingerprint=stored_fingerprint,
        entries=entries,
        embedding_dtype=embedding_dtype,
        fingerprints=stored_fingerprints,
    )


def _check_fingerprints(
    tensors_path: Path,
    name: str,
    stored: Mapping[str, str],
    expected: Mapping[str, str],
    embedding_dtype: str,
) -> None:
    """Raise :class:`IndexMismatchError` when a dtype both record has two fingerprints (the index's own dtype
    compared first); warn when they share none."""
    shared = sorted(
        (dtype for dtype in expected if dtype in stored), key=lambda dtype: dtype != embedding_dtype
    )
    for dtype in shared:
        if stored[dtype] != expected[dtype]:
            precision = "" if dtype == embedding_dtype else f" (the weights rounded to {dtype})"
            raise IndexMismatchError(
                tensors_path.parent,
                name,
                f"Index {tensors_path} was built with a model of fingerprint {stored[dtype]}, but this "
                f"model's fingerprint is {expected[dtype]}{precision} (other architecture or weights).",
            )
    if stored and not shared:
        logger.warning(
            f"Index {tensors_path} records its model's fingerprint in {', '.join(sorted(stored))}, and this model "
            f"computes in {', '.join(sorted(expected))}: the weights cannot be compared across these precisions, so "
            "the index is used unchecked. Load the model in float32 to check it, or rebuild the index with this one."
        )


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
    if metadata.get("embedding_dtype", "float32") not in EMBEDDING_DTYPES:
        return [
            f"unknown embedding dtype {metadata['embedding_dtype']!r}; expected one of {list(EMBEDDING_DTYPES)}"
        ]
    if "fingerprints" in metadata and not _is_fingerprint_table(metadata["fingerprints"]):
        return [f"fingerprints {metadata['fingerprints']!r} are not a JSON object of dtype names to strings"]
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


def _is_fingerprint_table(text: str) -> bool:
    try:
        table = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(table, dict) and all(
        dtype in EMBEDDING_DTYPES and isinstance(value, str) for dtype, value in table.items()
    )


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


__all__ = [
    "FORMAT_VERSION",
    "INDEX_KINDS",
    "IndexFormatError",
    "EMBEDDING_DTYPES",
    "HALF_DTYPES",
    "IndexMismatchError",
    "METRICS",
    "MIGRATIONS",
    "StoredIndex",
    "dtype_name",
    "model_dtype",
    "model_fingerprint",
    "model_fingerprints",
    "read_index_files",
    "replaced_atomically",
    "write_index_files",
]
