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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..file_permissions import apply_umask

METRICS = ("inner_product", "l2")
INDEX_KINDS = ("flat", "ivf", "hnsw")
FORMAT_VERSION = "3"
_VECTORS_KEY = "embeddings"


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


def model_fingerprint(model: Any) -> str:
    """A short hash of what fixes the embedding space of ``model``.

    Covers the architecture (backbone types, projection size, scoring) and the values of the
    projections and the scoring head, which change whenever the model is trained: an index built with
    other weights is stale even when its dimension fits. A model that carries the fingerprint of the torch model it
    was exported from (:class:`~hf_atr.export.onnx_encoder.OnnxDualEncoder`'s ``fingerprint``) gives that one.
    """
    recorded = getattr(model, "fingerprint", None)
    if isinstance(recorded, str):
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
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class StoredIndex:
    """What :func:`read_index_files` read, checked and migrated to :data:`FORMAT_VERSION`.

    Attributes:
        vectors: ``(n, dim)`` float32.
        metric / kind / parameters: the index's metric, kind and faiss parameters (``nlist``, ``nprobe``, ...).
        fingerprint: the model's (:func:`model_fingerprint`), ``None`` when none was recorded.
        entries: ``ids``, ``captions``, ``spans`` (``(start, end)`` tuples or ``None``), ``root``,
            ``frame_seconds``.
    """

    vectors: np.ndarray
    metric: str
    kind: str
    parameters: dict[str, int | None]
    fingerprint: str | None
    entries: dict[str, Any]


def write_index_files(
    directory: str | os.PathLike,
    name: str,
    vectors: np.ndarray,
    entries: dict[str, Any],
    *,
    metric: str,
    kind: str,
    parameters: dict[str, int | None],
    fingerprint: str | None,
) -> list[Path]:
    """Write ``<directory>/<name>.safetensors`` (``vectors: (n, dim)`` float32 and the metadata) and
    ``<directory>/<name>.json`` (``entries``), each replaced atomically; returns both paths."""
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
        "fingerprint": fingerprint or "",
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
    expected_fingerprint: str | None = None,
) -> StoredIndex:
    """Read the files :func:`write_index_files` wrote, checking them against the model that will query them.

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
    if entries["spans"] is not None:
        entries["spans"] = [tuple(span) for span in entries["spans"]]
    return StoredIndex(
        vectors=tensors[_VECTORS_KEY].numpy(),
        metric=metadata["metric"],
        kind=metadata["kind"],
        parameters=json.loads(metadata["parameters"]),
        fingerprint=stored_fingerprint,
        entries=entries,
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


__all__ = [
    "FORMAT_VERSION",
    "INDEX_KINDS",
    "IndexFormatError",
    "IndexMismatchError",
    "METRICS",
    "MIGRATIONS",
    "StoredIndex",
    "model_fingerprint",
    "read_index_files",
    "replaced_atomically",
    "write_index_files",
]
