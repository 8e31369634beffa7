"""Audio held in memory read as one mono clip, and audio as a caller hands it over: one clip or a list of clips.

An array (numpy, or a torch tensor), a ``{"raw" | "array", "sampling_rate"}`` dict, or a list of clips
(:func:`audio_clips`, the one reading of every place that accepts audio from users: the retrieval pipeline, the
processor). Files are decoded by :mod:`hf_atr.data.audio`, which mixes their channels down with the same
:func:`mix_down`; both raise :class:`AudioDecodeError` naming the clip and the reason.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

AUDIO_ARRAY_KEYS = ("array", "raw")
"""Keys of audio held in memory in a dict, beside its ``sampling_rate``: ``array`` (datasets' decoded audio),
``raw`` (what transformers' audio pipelines take)."""
MAX_ARRAY_CHANNELS = 7
"""The most channels a 2-D audio array may have. Its shorter axis is read as channels (mono to 6.1
surround); a shorter axis of 8 or more is refused: such an array is far more likely a stack of clips (a
batch of 8) than one recording, and a batch is a list. Files have no such limit: their channels are known."""


class AudioDecodeError(ValueError):
    """An audio file or value cannot be turned into a waveform; the message names the file and the reason.

    ``reason`` is the message without the name (e.g. ``"the audio file is empty (0 bytes)."``), for reports
    that list names and reasons in separate columns.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def mix_down(frames: np.ndarray) -> np.ndarray:
    """``frames: (samples, channels)`` -> ``(samples,)`` float32: the mean of the channels, in float32.

    The one down-mix of the library: a file's frames as soundfile reads them and a multi-channel array are
    mixed by this same arithmetic, so that a file and the array read from it give the same waveform.
    """
    return np.asarray(frames, dtype=np.float32).mean(axis=1, dtype=np.float32)


def to_mono(array: np.ndarray, name: str) -> np.ndarray:
    """One clip's samples, ``(samples,)`` or 2-D in either orientation (the longer axis is time), as a
    ``(samples,)`` float32 waveform; integer PCM is scaled to [-1, 1) as soundfile scales integer files."""
    if np.issubdtype(array.dtype, np.integer):
        array = array / float(2 ** (8 * array.dtype.itemsize - 1))
    if array.ndim == 1:
        return np.asarray(array, dtype=np.float32)
    if array.ndim != 2:
        raise AudioDecodeError(
            name,
            f"an audio array must be 1-D (samples,) or 2-D (channels and samples, either way round), got "
            f"shape {array.shape}; pass a batch of clips as a list.",
        )
    channels = min(array.shape)
    if channels > MAX_ARRAY_CHANNELS:
        raise AudioDecodeError(
            name,
            f"an audio array of shape {array.shape} is not one clip: its shorter axis ({channels}) is read as "
            f"channels, and a clip has at most {MAX_ARRAY_CHANNELS}. Pass a batch of clips as a list (e.g. "
            "list(array)); give a recording with more channels by its file path, or mix it down to 1-D first.",
        )
    # The longer axis is time: (samples, channels) as soundfile reads, or (channels, samples) as librosa.
    return mix_down(array if array.shape[0] > array.shape[1] else array.T)


def as_array(value: Any) -> np.ndarray:
    """A numpy view of in-memory samples: an array, a torch tensor (on any device), or a list of numbers."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor; not imported here (hf_atr.data stays free of torch)
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _is_array(value: Any) -> bool:
    """Whether ``value`` holds samples in memory: a numpy array or an array-like (torch, JAX) with a shape."""
    return isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "shape"))


def dict_array(value: Mapping[str, Any]) -> Any:
    """The samples of an in-memory audio dict: ``raw`` (transformers' pipelines) or ``array`` (datasets)."""
    return value["raw"] if value.get("raw") is not None else value.get("array")


def dict_rate(value: Mapping[str, Any], name: str) -> int:
    """The ``sampling_rate`` of an in-memory audio dict, a positive integer."""
    rate = value.get("sampling_rate")
    if isinstance(rate, bool) or not isinstance(rate, numbers.Integral) or rate <= 0:
        raise AudioDecodeError(
            name,
            f"an audio dict with {'raw' if 'raw' in value else 'array'!r} needs its positive int "
            f"'sampling_rate', got {rate!r}.",
        )
    return int(rate)


@dataclass(frozen=True)
class AudioClips:
    """Audio as a caller handed it over, read by :func:`audio_clips`."""

    clips: list[Any]
    """One value per clip, each taken by :func:`decode_audio`: a file path, a ``{"bytes", "path"}`` dict, or
    ``{"array": (samples,) float32, "sampling_rate": int}`` (in-memory audio already mixed down)."""
    names: list[str]
    """How messages name each clip: its path, else the caller's name for a single clip, else ``item <i>``."""
    single: bool
    """Whether one clip was given (rather than a list of clips)."""
    rate_assumed: int
    """How many arrays came without a rate and were taken at ``default_rate``."""


def audio_clips(
    audio: Any, *, sampling_rate: int | None = None, default_rate: int, name: str = "the audio"
) -> AudioClips:
    """Read ``audio`` as users hand it over, the way transformers' audio pipelines read their input.

    - One clip: a file path, the bytes of a file, ``{"raw" | "array": samples, "sampling_rate": rate}``
      (transformers' pipelines, datasets' decoded audio), a ``{"bytes", "path"}`` dict (our datasets), or an
      array (numpy, or a torch tensor). **One array is one clip**: ``(samples,)``, or 2-D with several
      channels in either orientation, ``(samples, channels)`` as ``soundfile.read`` returns it or
      ``(channels, samples)``; the longer axis is time, the channels are mixed down as a file's are
      (:func:`mix_down`), and a shorter axis of more than :data:`MAX_ARRAY_CHANNELS` is refused (a stacked
      ``(8, samples)`` batch is not an 8-channel clip).
    - A batch: a list (or tuple, or any other iterable that is not itself a clip) of such clips.

    Args:
        sampling_rate: the rate of the arrays given bare; ``None`` takes them at ``default_rate`` and counts
            them in :attr:`AudioClips.rate_assumed` (the caller says so in its log). A dict brings its own
            rate (a different ``sampling_rate`` is an error); files have theirs.
        default_rate: the rate a bare array is taken at: the processor's.
        name: how messages name a single clip that is not a file (in a batch: ``item <i>``).

    Raises:
        AudioDecodeError: an array that is not one clip (3-D, or a shorter axis of more than
            :data:`MAX_ARRAY_CHANNELS`), a dict without a positive int ``sampling_rate``; the message names
            the clip.
        ValueError: an empty batch, or a dict whose rate contradicts ``sampling_rate``.
        TypeError: something that is neither a clip nor a list of clips.
    """
    if sampling_rate is not None and (
        isinstance(sampling_rate, bool)
        or not isinstance(sampling_rate, numbers.Integral)
        or sampling_rate <= 0
    ):
        raise ValueError(f"sampling_rate must be a positive int, got {sampling_rate!r}.")
    single = is_one_clip(audio)
    if not single and not isinstance(audio, Iterable):
        raise TypeError(_NOT_AUDIO.format(name=name, kind=type(audio).__name__))
    items = [audio] if single else list(audio)
    if not items:
        raise ValueError(f"{name}: an empty list holds no audio clip.")
    clips, names, assumed = [], [], 0
    for position, item in enumerate(items):
        item_name = name if single else f"item {position}"
        clip, item_name, rate_assumed = _clip(item, item_name, sampling_rate, default_rate)
        clips.append(clip)
        names.append(item_name)
        assumed += rate_assumed
    return AudioClips(clips, names, single, assumed)


_NOT_AUDIO = (
    "{name}: cannot read audio of type {kind}. Give one clip (a file path, an array, or "
    "{{'raw': array, 'sampling_rate': rate}}), or a list of clips for a batch."
)


def is_one_clip(value: Any) -> bool:
    """Whether ``value`` is one clip as :func:`audio_clips` reads it (a path, bytes, a dict, an array), not a
    list of clips."""
    return isinstance(value, (str, os.PathLike, bytes, bytearray, Mapping)) or _is_array(value)


def _clip(item: Any, name: str, sampling_rate: int | None, default_rate: int) -> tuple[Any, str, bool]:
    """One clip of :func:`audio_clips`: its value for :func:`decode_audio`, its name, and whether its rate
    was assumed."""
    if isinstance(item, (str, os.PathLike)):
        return item, str(item), False
    if isinstance(item, (bytes, bytearray)):
        return {"bytes": bytes(item), "path": None}, name, False
    if isinstance(item, Mapping):
        name = str(item.get("path") or name)
        if any(key in item for key in AUDIO_ARRAY_KEYS):
            rate = dict_rate(item, name)
            if sampling_rate is not None and sampling_rate != rate:
                raise ValueError(
                    f"{name}: the audio dict says 'sampling_rate': {rate}, but sampling_rate={sampling_rate} "
                    "was passed too; give the rate once."
                )
            return {"array": to_mono(as_array(dict_array(item)), name), "sampling_rate": rate}, name, False
        if "bytes" in item or "path" in item:
            return dict(item), name, False
        raise AudioDecodeError(
            name,
            f"an audio dict needs 'raw' or 'array' with 'sampling_rate' (audio in memory), or 'bytes' / 'path' "
            f"(an audio file); got the keys {sorted(item)}.",
        )
    if _is_array(item):
        waveform = to_mono(as_array(item), name)
        return (
            {"array": waveform, "sampling_rate": sampling_rate or default_rate},
            name,
            sampling_rate is None,
        )
    raise TypeError(_NOT_AUDIO.format(name=name, kind=type(item).__name__))
