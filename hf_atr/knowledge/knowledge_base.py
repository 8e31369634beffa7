"""The ASK knowledge base: fine-grained (audio, text) pairs and coarse-grained prototype pairs (ASK §4.1).

The fine base ``K_f`` (ASK Eq. 6) is every (audio, caption) pair of a source dataset encoded by the
current model, L2-normalised, searched by exact inner product (:mod:`.exact_search`): by default a blocked
matrix product and ``torch.topk`` on the queries' device, or faiss ``IndexFlatIP`` indexes (one per modality, the
reference in the tests). The coarse base ``K_c`` (Eq. 7) comes from one faiss k-means partition of the paired
embeddings (each pair clustered as the concatenation ``[u; v]``, so audio and text prototypes share
their cluster); each cluster is max-pooled per modality and re-normalised (ASK does not fix the pooling), giving
``N_c`` (audio, text) prototype pairs.

The base is plain tensors; faiss indexes are built from them on the first faiss search, so a saved base
is one safetensors file (never a faiss-serialised or pickled blob).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import faiss
import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..encoding import encode_pairs, pair_audio_ids
from ..file_permissions import apply_umask
from ..objectives.ask import DEFAULT_NUM_PROTOTYPES, SEARCH_BACKENDS
from .exact_search import (
    flat_ip_index,
    top_distinct_clips,
    top_distinct_clips_faiss,
    top_entries,
    top_entries_faiss,
)

KMEANS_ITERATIONS = 20
MODALITIES = ("audio", "text")
GRANULARITIES = ("fine", "coarse")
_TENSOR_KEYS = ("fine_audio", "fine_text", "coarse_audio", "coarse_text")
_CLIP_KEY = "fine_clip"
"""Saved tensor of each fine pair's clip index into the ``clip_ids`` stored in the file's metadata."""
_CLIP_IDS_METADATA = "clip_ids"
_FORMAT = "hf_atr.knowledge_base"


def _check_pair_tensors(audio: torch.Tensor, text: torch.Tensor, what: str) -> None:
    if not (isinstance(audio, torch.Tensor) and isinstance(text, torch.Tensor)):
        raise TypeError(
            f"{what}: audio and text embeddings must be torch tensors, got {type(audio)} and {type(text)}."
        )
    if audio.dim() != 2 or audio.shape != text.shape:
        raise ValueError(
            f"{what}: audio and text embeddings must both be (pairs, dim) with the same shape, got "
            f"{tuple(audio.shape)} and {tuple(text.shape)}."
        )
    if audio.shape[0] == 0:
        raise ValueError(f"{what}: the knowledge base needs at least one (audio, text) pair.")
    if not (torch.isfinite(audio).all() and torch.isfinite(text).all()):
        raise ValueError(f"{what}: embeddings contain NaN or infinite values.")


def prototype_pairs(
    audio_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    num_prototypes: int = DEFAULT_NUM_PROTOTYPES,
    *,
    seed: int = 0,
    iterations: int = KMEANS_ITERATIONS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Coarse-grained prototype pairs ``K_c`` (ASK Eq. 7).

    One faiss k-means partition of the pairs ``[u_j; v_j]`` into ``min(num_prototypes, pairs)``
    clusters; each cluster's prototype is the element-wise max of its members, per modality,
    re-normalised. Clusters left empty by the final assignment are dropped.

    Args:
        audio_embeds: ``(pairs, dim)`` L2-normalised audio embeddings ``u_j``.
        text_embeds: ``(pairs, dim)`` L2-normalised caption embeddings ``v_j`` (row j pairs with ``u_j``).
        num_prototypes: ``N_c``; clamped to the number of pairs.

    Returns:
        ``(audio_prototypes, text_prototypes)``, each ``(clusters, dim)``, L2-normalised, float32.
    """
    _check_pair_tensors(audio_embeds, text_embeds, "prototype_pairs")
    if not (isinstance(num_prototypes, int) and num_prototypes >= 1):
        raise ValueError(f"prototype_pairs: `num_prototypes` must be a positive int, got {num_prototypes!r}.")
    audio_embeds, text_embeds = audio_embeds.detach().float().cpu(), text_embeds.detach().float().cpu()
    num_pairs, dim = audio_embeds.shape
    clusters = min(num_prototypes, num_pairs)
    joint = np.ascontiguousarray(torch.cat([audio_embeds, text_embeds], dim=1).numpy())
    kmeans = faiss.Kmeans(
        2 * dim, clusters, niter=iterations, seed=seed, min_points_per_centroid=1, verbose=False
    )
    kmeans.train(joint)
    _, assignment = kmeans.index.search(joint, 1)
    assignment = torch.from_numpy(assignment[:, 0].astype(np.int64))
    prototypes = []
    for embeds in (audio_embeds, text_embeds):
        pooled = torch.full((clusters, dim), float("-inf")).scatter_reduce(
            0, assignment[:, None].expand(-1, dim), embeds, reduce="amax"
        )
        prototypes.append(pooled)
    occupied = torch.bincount(assignment, minlength=clusters) > 0
    return tuple(F.normalize(pooled[occupied], dim=-1) for pooled in prototypes)


class KnowledgeBase:
    """Fine-grained pairs ``K_f`` and coarse-grained prototype pairs ``K_c`` with top-K search (ASK §4.1-4.2).

    Build it with :meth:`from_dataset` (encode a dataset with the current model),
    :meth:`from_embeddings` (precomputed pairs) or :meth:`load`.

    When the base knows the clip of each pair (``fine_audio_ids``), fine-grained search returns at most one
    pair per clip (its best-scoring one), so ``K`` neighbours are ``K`` distinct clips even when a clip's
    audio embedding is stored once per caption, and it can leave out the query's own clip
    (``exclude_audio_ids``): with a base built from the training set, a sample's own stored pair would
    otherwise be its top-1 neighbour.

    Args:
        fine_audio, fine_text: ``(pairs, dim)`` L2-normalised paired embeddings ``(u_j, v_j)``.
        coarse_audio, coarse_text: ``(prototypes, dim)`` L2-normalised prototype pairs ``(c_m^u, c_m^v)``.
        fine_audio_ids: the ``audio_id`` of the clip of each pair (``pairs`` strings), or None when unknown
            (every pair is then its own clip and nothing can be excluded).

    Example::

        base = KnowledgeBase.from_dataset(model, processor, features["train"], num_prototypes=512)
        scores, indices = base.search(audio_embeds, modality="audio", granularity="fine", k=10)
        neighbour_audio, neighbour_text = base.pairs(indices, granularity="fine")
        base.save("kb.safetensors")
    """

    def __init__(
        self,
        fine_audio: torch.Tensor,
        fine_text: torch.Tensor,
        coarse_audio: torch.Tensor,
        coarse_text: torch.Tensor,
        fine_audio_ids: Sequence[str] | None = None,
    ) -> None:
        _check_pair_tensors(fine_audio, fine_text, "KnowledgeBase fine pairs")
        _check_pair_tensors(coarse_audio, coarse_text, "KnowledgeBase coarse prototypes")
        if coarse_audio.shape[1] != fine_audio.shape[1]:
            raise ValueError(
                f"KnowledgeBase: prototypes have dim {coarse_audio.shape[1]} but pairs have dim {fine_audio.shape[1]}."
            )
        self.tensors = {
            name: tensor.detach().float().cpu().contiguous()
            for name, tensor in zip(_TENSOR_KEYS, (fine_audio, fine_text, coarse_audio, coarse_text))
        }
        self.clip_ids: list[str] | None = None
        """The distinct clips of the fine pairs, in order of first appearance (None when unknown)."""
        if fine_audio_ids is not None:
            if len(fine_audio_ids) != fine_audio.shape[0]:
                raise ValueError(
                    f"KnowledgeBase: {len(fine_audio_ids)} fine_audio_ids for {fine_audio.shape[0]} pairs; give one "
                    "audio_id per pair."
                )
            codes = {audio_id: code for code, audio_id in enumerate(dict.fromkeys(map(str, fine_audio_ids)))}
            self.clip_ids = list(codes)
            self.tensors[_CLIP_KEY] = torch.tensor([codes[str(audio_id)] for audio_id in fine_audio_ids])
        self._faiss_indexes: dict[str, faiss.IndexFlatIP] = {}
        self._device_tensors: dict[tuple[str, torch.device], torch.Tensor] = {}

    @classmethod
    def from_embeddings(
        cls,
        audio_embeds: torch.Tensor,
        text_embeds: torch.Tensor,
        *,
        audio_ids: Sequence[str] | None = None,
        num_prototypes: int = DEFAULT_NUM_PROTOTYPES,
        seed: int = 0,
    ) -> KnowledgeBase:
        """A base from ``(pairs, dim)`` paired embeddings (L2-normalised here), prototypes by :func:`prototype_pairs`.

        ``audio_ids`` names the clip of each pair (see the class docstring).
        """
        _check_pair_tensors(audio_embeds, text_embeds, "KnowledgeBase.from_embeddings")
        audio_embeds = F.normalize(audio_embeds.detach().float().cpu(), dim=-1)
        text_embeds = F.normalize(text_embeds.detach().float().cpu(), dim=-1)
        coarse_audio, coarse_text = prototype_pairs(audio_embeds, text_embeds, num_prototypes, seed=seed)
        return cls(audio_embeds, text_embeds, coarse_audio, coarse_text, fine_audio_ids=audio_ids)

    @classmethod
    def from_dataset(
        cls,
        model: Any,
        processor: Any,
        dataset: Any,
        *,
        num_prototypes: int = DEFAULT_NUM_PROTOTYPES,
        captions: str = "all",
        languages: Sequence[str] | None = None,
        batch_size: int = 64,
        show_progress: bool = True,
        seed: int = 0,
    ) -> KnowledgeBase:
        """Encode ``dataset`` with ``model`` (batched, with a progress bar) and build the base.

        See :func:`hf_atr.encoding.encode_pairs` for ``captions``, ``languages`` and ``batch_size``. The pairs
        keep the ``audio_id`` of their clip (:func:`hf_atr.encoding.pair_audio_ids`).
        """
        audio_ids = pair_audio_ids(dataset, captions=captions, languages=languages)
        audio_embeds, text_embeds = encode_pairs(
            model,
            processor,
            dataset,
            captions=captions,
            languages=languages,
            batch_size=batch_size,
            show_progress=show_progress,
        )
        return cls.from_embeddings(
            audio_embeds, text_embeds, audio_ids=audio_ids, num_prototypes=num_prototypes, seed=seed
        )

    @property
    def num_pairs(self) -> int:
        """Number of fine-grained pairs ``N_k``."""
        return self.tensors["fine_audio"].shape[0]

    @property
    def num_prototypes(self) -> int:
        """Number of coarse-grained prototype pairs (``N_c`` unless clamped or clusters were empty)."""
        return self.tensors["coarse_audio"].shape[0]

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return self.tensors["fine_audio"].shape[1]

    def size(self, granularity: str) -> int:
        """Number of entries searched at ``granularity`` (``"fine"`` or ``"coarse"``)."""
        self._check_names(granularity=granularity)
        return self.num_pairs if granularity == "fine" else self.num_prototypes

    def _tensor_on(self, name: str, device: torch.device) -> torch.Tensor:
        """``self.tensors[name]`` on ``device``, copied once per device (the base never changes)."""
        if device.type == "cpu":
            return self.tensors[name]
        if (name, device) not in self._device_tensors:
            self._device_tensors[(name, device)] = self.tensors[name].to(device)
        return self._device_tensors[(name, device)]

    def _check_names(self, *, granularity: str, modality: str = "audio") -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(
                f"KnowledgeBase: `granularity` must be one of {list(GRANULARITIES)}, got {granularity!r}."
            )
        if modality not in MODALITIES:
            raise ValueError(
                f"KnowledgeBase: `modality` must be one of {list(MODALITIES)}, got {modality!r}."
            )

    @torch.no_grad()
    def search(
        self,
        queries: torch.Tensor,
        *,
        modality: str,
        granularity: str = "fine",
        k: int = 10,
        backend: str = "torch",
        exclude_audio_ids: Sequence[str] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` entries of one modality by inner product (ASK §4.2, ``N_f(u_i)``).

        At ``granularity="fine"`` of a base that knows its clips (``clip_ids``), the ``k`` entries are the
        best-scoring pairs of ``k`` distinct clips, never of the clip in ``exclude_audio_ids``.

        Args:
            queries: ``(n, dim)`` embeddings, any device and float dtype (scored in float32).
            modality: ``"audio"`` searches the audio side, ``"text"`` the text side.
            granularity: ``"fine"`` (pairs) or ``"coarse"`` (prototypes).
            k: neighbours per query; clamped to the entries (or distinct clips other than the excluded one)
                there are.
            backend: ``"torch"`` scores blocks of (query, entry) pairs with a matrix product and
                ``torch.topk`` on ``queries.device`` (a GPU during GPU training); ``"faiss"`` searches a
                faiss ``IndexFlatIP`` on the CPU, built on first use (for distinct clips it fetches enough
                candidates to hold ``k + 1`` clips and keeps each clip's first). Both are exact and return
                the same entries up to ties; torch is about 4× faster per ASK step on one CPU thread at
                50k × 512 (``benchmarks/knowledge_base.py``).
            exclude_audio_ids: ``n`` audio ids, the clip of each query, whose pairs that query never gets (a
                sample's own stored pair when the base is built from the training set); ignored by the
                coarse prototypes and by a base that does not know its clips.

        Returns:
            ``(scores, indices)``, each ``(n, k)`` on ``queries.device``: inner products (float32) in
            descending order and the row indices of the entries (int64).
        """
        self._check_names(granularity=granularity, modality=modality)
        if backend not in SEARCH_BACKENDS:
            raise ValueError(
                f"KnowledgeBase.search: `backend` must be one of {list(SEARCH_BACKENDS)}, got {backend!r}."
            )
        if queries.dim() != 2 or queries.shape[1] != self.dim:
            raise ValueError(
                f"KnowledgeBase.search: queries must be (n, {self.dim}), got {tuple(queries.shape)}."
            )
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"KnowledgeBase.search: `k` must be a positive int, got {k!r}.")
        if exclude_audio_ids is not None and len(exclude_audio_ids) != queries.shape[0]:
            raise ValueError(
                f"KnowledgeBase.search: {len(exclude_audio_ids)} exclude_audio_ids for {queries.shape[0]} queries; "
                "give the audio_id of each query's clip."
            )
        name = f"{granularity}_{modality}"
        queries = queries.detach().float()
        if granularity == "coarse" or self.clip_ids is None:
            k = min(k, self.size(granularity))
            if backend == "faiss":
                return top_entries_faiss(self._faiss_index(name), queries, k)
            return top_entries(self._tensor_on(name, queries.device), queries, k)
        excluded = self._clip_codes(exclude_audio_ids, queries.shape[0], queries.device)
        k = min(k, len(self.clip_ids) - int(bool((excluded >= 0).any())))
        if k < 1:
            raise ValueError(
                "KnowledgeBase.search: the base holds no clip other than the query's own; build it from more clips."
            )
        if backend == "faiss":
            return top_distinct_clips_faiss(
                self._faiss_index(name), self.tensors[_CLIP_KEY], queries, k, excluded
            )
        entries, pair_clip = (self._tensor_on(key, queries.device) for key in (name, _CLIP_KEY))
        return top_distinct_clips(entries, pair_clip, len(self.clip_ids), queries, k, excluded)

    def _faiss_index(self, name: str) -> faiss.IndexFlatIP:
        if name not in self._faiss_indexes:
            self._faiss_indexes[name] = flat_ip_index(self.tensors[name])
        return self._faiss_indexes[name]

    def _clip_codes(self, audio_ids: Sequence[str] | None, count: int, device: torch.device) -> torch.Tensor:
        """``(count,)`` clip index of each audio id in this base, −1 for none (or no ids)."""
        if audio_ids is None:
            return torch.full((count,), -1, dtype=torch.long, device=device)
        codes = {audio_id: code for code, audio_id in enumerate(self.clip_ids)}
        return torch.tensor([codes.get(str(audio_id), -1) for audio_id in audio_ids], device=device)

    def pairs(
        self, indices: torch.Tensor, *, granularity: str = "fine", device: Any = None, dtype: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(audio, text)`` entries at ``indices``: each ``(*indices.shape, dim)``, on ``device`` (default ``indices.device``)."""
        self._check_names(granularity=granularity)
        device = indices.device if device is None else torch.device(device)
        flat = indices.reshape(-1).to(device)
        return tuple(
            self._tensor_on(f"{granularity}_{modality}", device)
            .index_select(0, flat)
            .reshape(*indices.shape, self.dim)
            .to(dtype=dtype)
            for modality in MODALITIES
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the tensors (and the clip ids, as metadata) to one safetensors file (:meth:`load` reads them back)."""
        metadata = {"format": _FORMAT}
        if self.clip_ids is not None:
            metadata[_CLIP_IDS_METADATA] = json.dumps(self.clip_ids)
        save_file(self.tensors, os.fspath(path), metadata=metadata)
        apply_umask(path)  # safetensors writes 0o600 (hf_atr.file_permissions)

    @classmethod
    def load(cls, path: str | os.PathLike) -> KnowledgeBase:
        """Read a base written by :meth:`save`."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"KnowledgeBase.load: no file at {path}.")
        tensors = load_file(path)
        missing = [key for key in _TENSOR_KEYS if key not in tensors]
        if missing:
            raise ValueError(
                f"KnowledgeBase.load: {path} lacks tensor(s) {missing} (has {sorted(tensors)}); it was not written "
                "by KnowledgeBase.save."
            )
        fine_audio_ids = None
        if _CLIP_KEY in tensors:
            with safe_open(path, framework="pt") as handle:
                clip_ids = json.loads(handle.metadata()[_CLIP_IDS_METADATA])
            fine_audio_ids = [clip_ids[code] for code in tensors[_CLIP_KEY].tolist()]
        return cls(*(tensors[key] for key in _TENSOR_KEYS), fine_audio_ids=fine_audio_ids)


@torch.no_grad()
def representation_drift(
    old: KnowledgeBase,
    new: KnowledgeBase,
    *,
    modality: str = "audio",
    temperature: float = 1.0,
    max_queries: int | None = 1024,
    seed: int = 0,
    chunk_size: int = 256,
) -> float:
    r"""Representation-drift mismatch between a stale and a fresh encoding of the same pairs (ASK Eq. 3-4).

    With ``z_i`` the fresh embeddings (``new``) and ``z°_j`` the stale ones (``old``),
    ``P_ideal(j|i) = softmax_j(z_iᵀz_j / T)``, ``P_actual(j|i) = softmax_j(z_iᵀz°_j / T)`` over all
    ``N`` pairs, and ``RDM = E_i KL(P_ideal(·|i) ‖ P_actual(·|i))``.

    Args:
        old, new: bases over the same pairs in the same order (``N`` and ``dim`` must match).
        modality: ``"audio"`` (the paper's Eq. 3) or ``"text"``.
        temperature: ``T`` (the paper's softmax has none: 1.0).
        max_queries: the expectation is estimated on this many queries drawn without replacement
            (``None``: all ``N``), each against all ``N`` keys; cost ``O(max_queries · N · dim)``.

    Returns:
        The mean KL divergence in nats (0 when the bases are identical).
    """
    if modality not in MODALITIES:
        raise ValueError(
            f"representation_drift: `modality` must be one of {list(MODALITIES)}, got {modality!r}."
        )
    if not temperature > 0:
        raise ValueError(f"representation_drift: `temperature` must be positive, got {temperature!r}.")
    fresh, stale = new.tensors[f"fine_{modality}"], old.tensors[f"fine_{modality}"]
    if fresh.shape != stale.shape:
        raise ValueError(
            f"representation_drift: the bases must hold the same pairs, got {tuple(stale.shape)} (old) and "
            f"{tuple(fresh.shape)} (new)."
        )
    num_pairs = fresh.shape[0]
    if max_queries is None or max_queries >= num_pairs:
        query_rows = torch.arange(num_pairs)
    else:
        query_rows = torch.randperm(num_pairs, generator=torch.Generator().manual_seed(seed))[:max_queries]
    total = 0.0
    for start in range(0, len(query_rows), chunk_size):
        queries = fresh[query_rows[start : start + chunk_size]]
        log_ideal = torch.log_softmax(queries @ fresh.T / temperature, dim=-1)
        log_actual = torch.log_softmax(queries @ stale.T / temperature, dim=-1)
        total += (log_ideal.exp() * (log_ideal - log_actual)).sum().item()
    return total / len(query_rows)
