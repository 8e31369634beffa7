"""When in a long recording a described sound happens: a dual encoder's similarity curve, then moments.

Behind :meth:`AudioTextRetrievalPipeline.moments <hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.moments>`
(and so ``hf-atr search --moments`` and the search page's moment view):

- one recording, by a model with frame-level embeddings (``config.audio_frame_rate``: PE-Audio's 25 frames/s):
  scored frame by frame (:func:`frame_windowing`: one entry per frame, each frame read with a second of context
  on both sides, :func:`hf_atr.frame_encoding.encode_frame_entries`), unless a hop is asked for;
- one recording, by any other model (or with a hop): scored window by window at a fine hop
  (:func:`~hf_atr.windowing.moment_windowing`: the pipeline's window length, every
  :data:`~hf_atr.windowing.DEFAULT_MOMENT_HOP_SECONDS` unless asked otherwise), each window embedded as the
  index embeds its windows (:func:`hf_atr.audio_encoding.encode_audio_windows`) and scored against the query by the
  model's head;
- a recording the audio index already holds (a file under its root) in entries of the kind it would be scored
  with (frames, at the index's ``frame_seconds``, or windows) is scored from the stored entries instead, with
  nothing encoded, unless a hop is asked for;
- every file of the audio index: each file's stored entries (windows, or frames pooled to the index's
  ``frame_seconds``) scored against the query (exactly, whatever the index kind), so that one ranked list of
  ``(file, start, end, score)`` covers all of them.

Each curve (:class:`~hf_atr.moments.curve.SimilarityCurve`) becomes moments by the proposer of a
:class:`~hf_atr.moments.proposal.MomentProposalConfig` (:func:`~hf_atr.moments.proposal.propose_moments`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_atr import windowing as windowing_rules
from hf_atr.audio_encoding import encode_audio_windows
from hf_atr.data.audio import decode_audio, looks_like_audio_path
from hf_atr.deprecation import moved_names
from hf_atr.encoding import encode_text
from hf_atr.frame_encoding import frame_rate_of
from hf_atr.moments.curve import SimilarityCurve
from hf_atr.moments.proposal import MomentProposalConfig, propose_moments
from hf_atr.pipelines.index import EmbeddingIndex
from hf_atr.pipelines.indexing import index_vectors, relative_id
from hf_atr.windowing import Windowing

DEFAULT_TOP_K = 10
"""Moments :meth:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.moments` returns by default."""
MOVED_NAMES = {
    "DEFAULT_MOMENT_HOP_SECONDS": "hf_atr.windowing",
    "moment_windowing": "hf_atr.windowing",
}
"""Names that moved out of this module -> their home; the old path warns."""
__getattr__ = moved_names(__name__, MOVED_NAMES)


def frame_windowing(windowing: Windowing, model: Any) -> Windowing:
    """The entries a recording is scored with by a frame-level model: one per frame of ``model`` (``1 /
    config.audio_frame_rate`` seconds, 40 ms for PE-Audio), read in forward passes of ``windowing``'s window
    length (default the extractor's window), with ``windowing``'s pooling.

    Raises:
        ValueError: a model without frame-level embeddings (:func:`~hf_atr.frame_encoding.frame_rate_of`).
    """
    return Windowing(
        window_seconds=windowing.window_seconds,
        pooling=windowing.pooling,
        frame_seconds=1.0 / frame_rate_of(model),
    )


def recording_curve(
    model: Any,
    processor: Any,
    recording: Any,
    text_embeds: torch.Tensor,
    windowing: Windowing,
    *,
    name: str = "the recording",
    batch_size: int = 32,
) -> SimilarityCurve:
    """The similarity of ``text_embeds: (1, dim)`` and every window of ``recording`` (anything
    :func:`~hf_atr.data.audio.decode_audio` takes) cut by ``windowing`` (or every entry of its frames, with
    ``windowing.frame_seconds``: :func:`frame_windowing`): the head's unscaled similarity (cosine, the dot
    product of ``scoring="dot"``, or the negative Euclidean/Mahalanobis distance: the index's scores)."""
    waveform = decode_audio(recording, processor.sampling_rate, source=name)
    encoded = encode_audio_windows(
        model,
        processor,
        [{"audio": waveform, "audio_id": name}],
        windowing=windowing,
        batch_size=batch_size,
        description=f"Scoring {name}",
    )
    head = model.scoring_head
    device = head.logit_scale.device
    with torch.no_grad():
        scores = head.similarity(text_embeds.to(device), encoded.embeddings.to(device))[0]
    return SimilarityCurve(encoded.starts.numpy(), encoded.ends.numpy(), scores.double().cpu().numpy())


def entry_scores(vectors: np.ndarray, metric: str, query_vector: torch.Tensor) -> np.ndarray:
    """``(entries,)`` float64: the score of each stored vector of ``vectors: (entries, dim)`` for ``query_vector:
    (1, dim)`` (both in the index's geometry, :func:`~hf_atr.pipelines.indexing.index_vectors`), as
    :meth:`EmbeddingIndex.search` scores them with ``metric``: the inner product, or the negative Euclidean
    distance. Computed for every entry, exactly, whatever the index kind."""
    vectors = np.asarray(vectors, dtype=np.float64)
    query = query_vector.detach().to("cpu", torch.float64).numpy().reshape(-1)
    if metric == "inner_product":
        return vectors @ query
    return -np.linalg.norm(vectors - query, axis=1)


def file_curves(index: EmbeddingIndex, rows: Sequence[int], scores: np.ndarray) -> dict[str, SimilarityCurve]:
    """The entries ``rows`` of a windowed index, scored ``scores`` (one per row), as one curve per file over its
    stored spans, files in the order of their first entry.

    A pooled index (``pool=True``) holds one entry per file spanning all of it: each file is then one moment.

    Raises:
        ValueError: an index without spans (saved with format 1, before spans existed).
    """
    if index.spans is None:
        raise ValueError(
            "Moments need the audio index's windows with their time spans, and this index holds none (saved before "
            "spans existed, with format 1): rebuild it with `pipe.index(...)` or `hf-atr index`."
        )
    by_file: dict[str, list[tuple[float, float, float]]] = {}
    for row, score in zip(rows, scores):
        start, end = index.spans[row]
        by_file.setdefault(index.ids[row], []).append((start, end, float(score)))
    curves = {}
    for item_id, steps in by_file.items():
        starts, ends, values = np.asarray(sorted(steps, key=lambda step: step[0])).T
        curves[item_id] = SimilarityCurve(starts, ends, values)
    return curves


def find_moments(
    pipe: Any,
    query: str,
    recording: Any = None,
    *,
    top_k: int = DEFAULT_TOP_K,
    hop_seconds: float | None = None,
    proposal: MomentProposalConfig | None = None,
    sampling_rate: int | None = None,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """The work of ``pipe.moments(...)`` (its docstring says what it returns)."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"pipe.moments needs a text query describing the sound, got {query!r}.")
    if looks_like_audio_path(query):
        raise ValueError(
            f"pipe.moments takes a text query, and {query!r} names an audio file; describe the sound in words "
            "(the recording to search is the second argument)."
        )
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
    proposal = proposal or MomentProposalConfig()
    text_embeds = encode_text(pipe.model, pipe.processor, [query])
    if recording is None:
        return _index_moments(pipe, text_embeds, top_k, proposal)
    given = pipe.read_audio(recording, sampling_rate, "the recording")
    if not given.single:
        raise ValueError(
            f"pipe.moments searches one recording, got a {type(recording).__name__} of {len(given.clips)}; call "
            "it once per recording, or index them and call pipe.moments(query) to search them all."
        )
    # frame by frame when the model has frames, unless a window hop is asked for
    frames = hop_seconds is None and getattr(pipe.model.config, "audio_frame_rate", None) is not None
    curve = _stored_curve(pipe, recording, text_embeds, frames) if hop_seconds is None else None
    if curve is None:
        windowing = (
            frame_windowing(pipe.windowing, pipe.model)
            if frames
            else windowing_rules.moment_windowing(
                pipe.windowing, pipe.processor.feature_extractor, hop_seconds
            )
        )
        curve = recording_curve(
            pipe.model,
            pipe.processor,
            given.clips[0],
            text_embeds,
            windowing,
            name=given.names[0],
            batch_size=batch_size,
        )
    return [moment.as_dict() for moment in propose_moments(curve, proposal)[:top_k]]


def _stored_curve(
    pipe: Any, recording: Any, text_embeds: torch.Tensor, frames: bool
) -> SimilarityCurve | None:
    """The curve of ``recording`` from the audio index's entries when it is a file the index holds (under its
    root, with spans) in several entries of the kind asked for (frames, ``frames``, or windows); ``None`` otherwise
    (a file the index holds as one entry, pooled or no longer than a window, or in entries of the other kind, is
    encoded afresh)."""
    index = pipe.audio_index
    if (
        index is None
        or index.root is None
        or index.spans is None
        or (index.frame_seconds is not None) != frames
        or not isinstance(recording, (str, os.PathLike))
        or not os.path.isfile(recording)
    ):
        return None
    item_id = relative_id(recording, Path(index.root).expanduser().resolve())
    if item_id not in index.ids:
        return None
    rows = [position for position, stored in enumerate(index.ids) if stored == item_id]
    if len(rows) < 2:
        return None
    pipe.note_query_dtype(index)
    scores = entry_scores(index.embeddings[rows], index.metric, index_vectors(pipe.model, text_embeds))
    return file_curves(index, rows, scores)[item_id]


def _index_moments(
    pipe: Any, text_embeds: torch.Tensor, top_k: int, proposal: MomentProposalConfig
) -> list[dict[str, Any]]:
    """One ranked list of ``{"id", "score", "start", "end", "path"?}`` across the files of the audio index."""
    index = pipe.audio_index
    if index is None or len(index) == 0:
        raise ValueError(
            "pipe.moments(query) searches the files of the audio index, and this pipeline holds none: call "
            "`pipe.index(...)` with recordings, or `pipe.load_index(dir)`, or give a recording: "
            "pipe.moments(query, 'take.wav')."
        )
    pipe.note_query_dtype(index)
    scores = entry_scores(index.embeddings, index.metric, index_vectors(pipe.model, text_embeds))
    hits = []
    for item_id, curve in file_curves(index, range(len(index)), scores).items():
        for moment in propose_moments(curve, proposal):
            hit = {"id": item_id, "score": moment.score, "start": moment.start, "end": moment.end}
            if index.root is not None:
                hit["path"] = index.path_of(item_id)
            hits.append(hit)
    hits.sort(key=lambda hit: -hit["score"])
    return hits[:top_k]


__all__ = [
    "DEFAULT_TOP_K",
    "entry_scores",
    "find_moments",
    "file_curves",
    "frame_windowing",
    "recording_curve",
]
