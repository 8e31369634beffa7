"""The inputs of the retrieval metrics checked and put in one form: score and embedding matrices, relevance, labels, cutoffs.

Every function raises ``ValueError`` naming the argument, the caption and the value at fault
(:mod:`hf_atr.metrics.retrieval` calls them before any score is read).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

ArrayLike = Any


def as_float_matrix(values: ArrayLike, name: str) -> torch.Tensor:
    try:
        matrix = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name} must be a 2-D array of numbers: {error}") from error
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(matrix.shape)}.")
    if matrix.dtype == torch.bool or matrix.is_complex():
        raise ValueError(f"{name} must hold real numbers, got dtype {matrix.dtype}.")
    return matrix if matrix.is_floating_point() else matrix.double()


def as_relevant_clips(text_to_audio: ArrayLike, n_text: int, n_audio: int) -> np.ndarray:
    """`(n_text, max_clips_per_caption)` int64 relevant clip indices per caption, -1 for padding, checked."""
    if isinstance(text_to_audio, torch.Tensor) or (
        isinstance(text_to_audio, np.ndarray) and text_to_audio.dtype != object
    ):
        values = _to_numpy(text_to_audio)
    else:
        entries = list(text_to_audio)
        values = np.asarray(entries) if all(_is_scalar(entry) for entry in entries) else None
    if values is None:
        if len(entries) != n_text:
            raise ValueError(f"text_to_audio must have one entry per caption ({n_text}), got {len(entries)}.")
        rows = [_clip_list(entry, caption, n_audio) for caption, entry in enumerate(entries)]
        clips = np.full((n_text, max(len(row) for row in rows)), -1, dtype=np.int64)
        for caption, row in enumerate(rows):
            clips[caption, : len(row)] = row
    else:
        if values.ndim not in (1, 2) or len(values) != n_text or values.size == 0:
            raise ValueError(
                f"text_to_audio must have shape ({n_text},) (one clip per caption) or ({n_text}, R) (R clips "
                f"per caption), or hold one clip index or sequence of clip indices per caption; got shape "
                f"{values.shape}."
            )
        if values.dtype.kind not in "iu":
            raise ValueError(f"text_to_audio must hold integer clip indices, got dtype {values.dtype}.")
        clips = values.astype(np.int64).reshape(n_text, -1)
        out_of_range = (clips < 0) | (clips >= n_audio)
        if out_of_range.any():
            caption, slot = (int(index) for index in np.argwhere(out_of_range)[0])
            raise ValueError(
                f"{_describe_out_of_range(caption, int(clips[caption, slot]), clips.shape[1], n_audio)} "
                f"({int(out_of_range.sum())} out-of-range value(s))."
            )
    if clips.shape[1] > 1:
        ordered = np.sort(clips, axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        if repeated.any():
            caption, slot = (int(index) for index in np.argwhere(repeated)[0])
            raise ValueError(f"text_to_audio[{caption}] lists clip {ordered[caption, slot]} more than once.")
    return clips


def _clip_list(entry: Any, caption: int, n_audio: int) -> list[int]:
    """The relevant clips of one caption given as a clip index or a sequence of them, checked."""
    if _is_scalar(entry):
        values = [entry]
    else:
        values = entry.tolist() if isinstance(entry, (torch.Tensor, np.ndarray)) else list(entry)
        if not values:
            raise ValueError(
                f"text_to_audio[{caption}] is empty; every caption needs at least one relevant clip."
            )
    clips = []
    for value in values:
        if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
            value = value.item()
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"text_to_audio[{caption}] must hold integer clip indices, got {value!r}.")
        if not 0 <= value < n_audio:
            raise ValueError(_describe_out_of_range(caption, int(value), len(values), n_audio) + ".")
        clips.append(int(value))
    return clips


def _describe_out_of_range(caption: int, clip: int, num_clips: int, n_audio: int) -> str:
    if num_clips == 1:
        return f"text_to_audio[{caption}] = {clip} is not a clip index in [0, {n_audio})"
    return f"text_to_audio[{caption}] contains {clip}, which is not a clip index in [0, {n_audio})"


def _is_scalar(entry: Any) -> bool:
    if isinstance(entry, (torch.Tensor, np.ndarray)):
        return entry.ndim == 0
    return isinstance(entry, (str, bytes)) or not isinstance(entry, Iterable)


def as_labels(labels: ArrayLike, n_text: int, name: str) -> tuple[list[str], np.ndarray]:
    """Names in order of first appearance and `(n_text,)` int64 codes into them."""
    values = _to_numpy(labels)
    if values.shape != (n_text,):
        raise ValueError(f"{name} must have shape ({n_text},) (one label per caption), got {values.shape}.")
    unique, first_index, codes = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first_index)
    rename = np.empty_like(order)
    rename[order] = np.arange(len(order))
    return [str(label) for label in unique[order]], rename[codes.reshape(-1)].astype(np.int64)


def as_caption_groups(
    caption_groups: ArrayLike, relevant_clips: np.ndarray, language_of_text: np.ndarray
) -> np.ndarray:
    """`(n_text,)` int64 group codes, checked to hold one caption per language, all with the same clips."""
    _, group_of_text = as_labels(caption_groups, len(relevant_clips), "caption_groups")
    _, clip_set_of_text = np.unique(np.sort(relevant_clips, axis=1), axis=0, return_inverse=True)
    clip_set_of_text = clip_set_of_text.reshape(-1)
    n_groups = int(group_of_text.max()) + 1
    first_caption = np.full(n_groups, -1, dtype=np.int64)
    first_caption[group_of_text[::-1]] = np.arange(len(group_of_text))[::-1]
    mismatch = np.flatnonzero(clip_set_of_text[first_caption[group_of_text]] != clip_set_of_text)
    if len(mismatch) > 0:
        caption = int(mismatch[0])
        other = int(first_caption[group_of_text[caption]])
        raise ValueError(
            f"caption_groups puts caption {caption} ({_describe_clips(relevant_clips[caption])}) in a group "
            f"with a caption of {_describe_clips(relevant_clips[other])}; translations of one caption must "
            "share its relevant clips."
        )
    group_language = group_of_text * (int(language_of_text.max()) + 1) + language_of_text
    _, first_index, pair_counts = np.unique(group_language, return_index=True, return_counts=True)
    if (pair_counts > 1).any():
        caption = int(first_index[np.argmax(pair_counts > 1)])
        raise ValueError(
            f"caption_groups has several captions of one language in the group of caption {caption}; "
            "a group holds one translation per language."
        )
    return group_of_text


def _describe_clips(clips: np.ndarray) -> str:
    clips = sorted(int(clip) for clip in clips if clip >= 0)
    return f"clip {clips[0]}" if len(clips) == 1 else f"clips {clips}"


def check_cutoffs(ks: Sequence[int], map_cutoffs: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    for name, values in (("ks", ks), ("map_cutoffs", map_cutoffs)):
        if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
            raise ValueError(f"{name} must be a sequence of positive integers, e.g. (10,), got {values!r}.")
        check_positive_integers(name, tuple(values))
    return tuple(int(k) for k in ks), tuple(dict.fromkeys(int(c) for c in map_cutoffs))


def check_positive_integers(name: str, values: tuple[Any, ...]) -> None:
    if not values or any(
        isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in values
    ):
        shown = values[0] if name == "chunk_size" else values
        raise ValueError(f"{name} must be positive integer(s), got {shown!r}.")


def _to_numpy(values: ArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)
