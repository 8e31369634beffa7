"""Audio decoding with soundfile (no torchcodec, no FFmpeg; STACK-NOTES.md).

The shared schema keeps audio undecoded (``Audio(decode=False)``: ``{"bytes", "path"}``); this module
turns such a value, a file path, an already decoded ``{"array" | "raw", "sampling_rate"}`` dict or a bare
array into the float32 mono waveform a feature extractor expects, resampling when asked. Every failure raises
:class:`AudioDecodeError` naming the file (or the caller's ``source``, e.g. the ``audio_id``) and the reason.
:func:`audio_clips` reads audio as a caller hands it over (one clip, or a list of clips), the one reading of
every place that accepts audio from users (the retrieval pipeline, the processor).
"""

from __future__ import annotations

import io
import math
import numbers
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import soundfile

from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

AUDIO_EXTENSIONS: frozenset[str] = frozenset(
    {".wav", ".flac", ".mp3", ".ogg", ".opus", ".aiff", ".aif", ".aifc", ".au", ".caf", ".w64", ".m4a"}
)
"""File extensions counted as audio when a folder is searched for audio files."""
AUDIO_ARRAY_KEYS = ("array", "raw")
"""Keys of audio held in memory in a dict, beside its ``sampling_rate``: ``array`` (datasets' decoded audio),
``raw`` (what transformers' audio pipelines take)."""
MAX_ARRAY_CHANNELS = 7
"""The most channels a 2-D audio array may have. Its shorter axis is read as channels (mono to 6.1
surround); a shorter axis of 8 or more is refused: such an array is far more likely a stack of clips (a
batch of 8) than one recording, and a batch is a list. Files have no such limit: their channels are known."""
APPLEDOUBLE_PREFIX = "._"
"""macOS writes a ``._<name>`` AppleDouble file (resource fork, no audio) beside files copied to non-Apple
file systems; it carries the audio file's extension."""


class AudioDecodeError(ValueError):
    """An audio file or value cannot be turned into a waveform; the message names the file and the reason.

    ``reason`` is the message without the name (e.g. ``"the audio file is empty (0 bytes)."``), for reports
    that list names and reasons in separate columns.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def is_appledouble(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a macOS AppleDouble file (``._<name>``), which holds no audio."""
    return Path(path).name.startswith(APPLEDOUBLE_PREFIX)


def looks_like_audio_path(text: str | os.PathLike) -> bool:
    """Whether ``text`` is meant as an audio file: it names an existing file, or ends in an audio extension
    (:data:`AUDIO_EXTENSIONS`, any case), such as ``"rain.wav"`` or ``"Lighting matches.WAV"``."""
    text = str(text).strip()
    return bool(text) and (Path(text).suffix.lower() in AUDIO_EXTENSIONS or os.path.isfile(text))


def decode_audio(value: Any, sampling_rate: int | None = None, *, source: str | None = None) -> np.ndarray:
    """Decode ``value`` into a float32 mono waveform, resampled to ``sampling_rate`` when that is given.

    Args:
        value: one of
            - ``{"bytes": bytes | None, "path": str | None}`` (the shared schema; ``bytes`` win when not
              ``None``, ``path`` is then only used to name the clip in errors);
            - ``{"array": array, "sampling_rate": int}`` (a decoded ``datasets`` audio value), or ``"raw"``
              for ``"array"`` (transformers' audio pipelines);
            - a ``str`` / ``os.PathLike`` file path;
            - a ``numpy`` array, assumed to be at the target rate already.
            Arrays are ``(samples,)``, or one multi-channel clip in either orientation, ``(channels,
            samples)`` (datasets, librosa) or ``(samples, channels)`` (``soundfile.read``): the longer axis
            is time, and a shorter axis of more than :data:`MAX_ARRAY_CHANNELS` is refused.
        sampling_rate: target rate in Hz; ``None`` keeps the rate of the source.
        source: name of the clip used in error messages (e.g. its ``audio_id``); defaults to the path.

    Returns:
        ``(samples,)`` float32 array. Several channels are down-mixed to mono by averaging them in float32
        (:func:`mix_down`, for files and arrays alike: the mean keeps the level of correlated channels and,
        unlike taking one channel, keeps every source).
        A different source rate is converted with ``scipy.signal.resample_poly`` using the up/down factors
        ``target/g`` and ``source/g``, ``g = gcd(target, source)`` (polyphase FIR, anti-aliased).

    Raises:
        AudioDecodeError: missing, unreadable or corrupt file, zero-length audio, non-finite samples, a
            malformed value. The message names ``source`` / the path.
        TypeError: ``value`` is of none of the supported types.
    """
    if sampling_rate is not None and (not isinstance(sampling_rate, int) or sampling_rate <= 0):
        raise ValueError(f"sampling_rate must be a positive int, got {sampling_rate!r}.")
    if isinstance(value, np.ndarray):
        name = source or "<array>"
        waveform = _to_mono(value, name)
        source_rate = sampling_rate
    elif isinstance(value, (str, os.PathLike)):
        name = source or str(value)
        waveform, source_rate = _read_file(value, name)
    elif isinstance(value, dict) and any(key in value for key in AUDIO_ARRAY_KEYS):
        name = source or value.get("path") or "<array>"
        source_rate = _dict_rate(value, name)
        waveform = _to_mono(_as_array(_dict_array(value)), name)
    elif isinstance(value, dict) and ("bytes" in value or "path" in value):
        path = value.get("path")
        name = source or path or "<bytes>"
        if value.get("bytes") is not None:
            waveform, source_rate = _read_file(io.BytesIO(value["bytes"]), name)
        elif path:
            waveform, source_rate = _read_file(path, name)
        else:
            raise AudioDecodeError(name, "the audio value has neither 'bytes' nor 'path'.")
    else:
        raise TypeError(
            f"Cannot decode audio {source or ''} of type {type(value).__name__}: expected a dict "
            "{'bytes', 'path'} or {'array' | 'raw', 'sampling_rate'}, a file path, or a numpy array."
        )
    if waveform.size == 0:
        raise AudioDecodeError(name, "the audio has zero length.")
    if not np.isfinite(waveform).all():
        raise AudioDecodeError(name, "the audio contains non-finite samples (NaN or inf).")
    if sampling_rate is not None and source_rate != sampling_rate:
        waveform = resample(waveform, source_rate, sampling_rate)
    return waveform


def resample(waveform: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """Resample ``waveform: (samples,)`` from ``source_rate`` to ``target_rate`` Hz (polyphase, float32).

    The output has ``ceil(samples * target_rate / source_rate)`` samples.
    """
    from scipy.signal import resample_poly  # 0.5 s to import: only when a clip needs resampling

    divisor = math.gcd(source_rate, target_rate)
    resampled = resample_poly(waveform.astype(np.float64), target_rate // divisor, source_rate // divisor)
    return resampled.astype(np.float32)


def read_audio_span(
    path: str | os.PathLike, start_seconds: float, end_seconds: float | None = None
) -> tuple[np.ndarray, int]:
    """The samples of ``path`` from ``start_seconds`` to ``end_seconds`` (``None``: the end of the file), as
    stored: the file's own rate and channels, nothing before the span decoded (soundfile seeks to it).

    Returns:
        ``(frames, channels)`` float32 samples (fewer frames when the span runs past the end of the file) and
        the file's sampling rate.

    Raises:
        ValueError: a negative start, or an end not after the start.
        AudioDecodeError: missing, empty or unreadable file, or a span that starts at or after its end.
    """
    if start_seconds < 0 or (end_seconds is not None and end_seconds <= start_seconds):
        end = "the end" if end_seconds is None else f"{end_seconds:g} s"
        raise ValueError(f"A span needs 0 <= start < end, got {start_seconds:g} s to {end} (file {path}).")
    name = str(path)
    if not Path(path).is_file():
        raise AudioDecodeError(name, "the audio file does not exist.")
    if os.path.getsize(path) == 0:
        raise AudioDecodeError(name, "the audio file is empty (0 bytes).")
    try:
        with soundfile.SoundFile(path) as audio_file:
            rate, total = audio_file.samplerate, audio_file.frames
            first = round(start_seconds * rate)
            if first >= total:
                raise AudioDecodeError(
                    name,
                    f"the span from {start_seconds:.2f} s starts after the end of the file ({total / rate:.2f} s).",
                )
            last = total if end_seconds is None else min(total, round(end_seconds * rate))
            audio_file.seek(first)
            frames = audio_file.read(last - first, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        raise _unreadable(name, error) from error
    return frames, rate


def check_audio_file(path: str | os.PathLike) -> Any:
    """Validate an audio file from its header only (no decoding) and return its ``soundfile.info``.

    Used by the corpus loaders to report every bad file of a corpus before anything is decoded.

    Raises:
        AudioDecodeError: the file does not exist, cannot be read as audio, has no frames or no channel.
    """
    name = str(path)
    if not Path(path).is_file():
        raise AudioDecodeError(name, "the audio file does not exist.")
    return _checked_header(path, name)


def check_audio_bytes(data: bytes, name: str) -> Any:
    """:func:`check_audio_file` for an audio file's bytes held in memory (``name`` heads the error message)."""
    return _checked_header(io.BytesIO(data), name)


def _checked_header(source: Any, name: str) -> Any:
    """``soundfile.info`` of a path or file object, refusing what cannot be read or holds no audio."""
    try:
        info = soundfile.info(source)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        raise AudioDecodeError(name, f"the audio file is unreadable or corrupt ({error}).") from error
    if info.channels < 1:
        raise AudioDecodeError(name, "the audio file has no channel.")
    if info.frames <= 0:
        raise AudioDecodeError(name, "the audio file has zero length.")
    return info


def encode_wav(array: np.ndarray, sampling_rate: int, *, subtype: str = "PCM_16") -> bytes:
    """Encode ``array: (samples,)`` or ``(channels, samples)`` as WAV bytes.

    Args:
        array: samples in ``[-1, 1]``; for PCM subtypes values outside are clipped (libsndfile would
            otherwise wrap them around).
        sampling_rate: rate in Hz written into the header.
        subtype: a soundfile WAV subtype, ``"PCM_16"`` (default) or ``"FLOAT"`` for lossless float32.
    """
    array = np.asarray(array)
    if array.ndim not in (1, 2) or array.size == 0:
        raise ValueError(
            f"encode_wav expects a non-empty (samples,) or (channels, samples) array, got {array.shape}."
        )
    if not np.isfinite(array).all():
        raise ValueError("encode_wav got non-finite samples (NaN or inf).")
    if subtype.startswith("PCM"):
        array = np.clip(array, -1.0, 1.0)
    buffer = io.BytesIO()
    soundfile.write(
        buffer, array.T if array.ndim == 2 else array, sampling_rate, format="WAV", subtype=subtype
    )
    return buffer.getvalue()


def _read_file(file: str | os.PathLike | io.BytesIO, name: str) -> tuple[np.ndarray, int]:
    if not isinstance(file, io.BytesIO):
        if not Path(file).is_file():
            raise AudioDecodeError(name, "the audio file does not exist.")
        if is_appledouble(file):
            raise AudioDecodeError(name, "a macOS AppleDouble file (resource fork, no audio).")
    if _byte_size(file) == 0:
        raise AudioDecodeError(name, "the audio file is empty (0 bytes).")
    try:
        frames, rate = soundfile.read(file, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        raise _unreadable(name, error, _cut_off_hint(file)) from error
    declared = declared_wav_frames(file)
    if declared is not None and len(frames) < declared:
        logger.warning(
            f"{name}: the file is truncated: it holds {len(frames)} of the {declared} frames its header "
            f"declares ({len(frames) / rate:.2f} of {declared / rate:.2f} s); decoding the {len(frames) / rate:.2f} s "
            "it holds."
        )
    return mix_down(frames), rate


def mix_down(frames: np.ndarray) -> np.ndarray:
    """``frames: (samples, channels)`` -> ``(samples,)`` float32: the mean of the channels, in float32.

    The one down-mix of the library: a file's frames as soundfile reads them and a multi-channel array are
    mixed by this same arithmetic, so that a file and the array read from it give the same waveform.
    """
    return np.asarray(frames, dtype=np.float32).mean(axis=1, dtype=np.float32)


def _unreadable(name: str, error: Exception, hint: str = "") -> AudioDecodeError:
    """The error for audio that soundfile fails to decode: libsndfile's own reason (without the file name
    ``str(error)`` adds), then ``hint``."""
    reason = (getattr(error, "error_string", None) or str(error)).rstrip(".")
    return AudioDecodeError(name, f"the audio is unreadable or corrupt ({reason}).{hint}")


def _cut_off_hint(file: str | os.PathLike | io.BytesIO) -> str:
    """For a file whose header reads but whose audio does not decode (libsndfile cannot decode any of a FLAC
    file cut off mid-stream, unlike a cut-off WAV): what that most often means, or ``""``."""
    try:
        if isinstance(file, io.BytesIO):
            file.seek(0)
        info = soundfile.info(file)
    except (soundfile.LibsndfileError, RuntimeError, OSError):
        return ""
    if info.frames <= 0 or info.samplerate <= 0:
        return ""
    return (
        f" Its {info.format} header is intact and declares {info.frames / info.samplerate:.2f} s, so the file "
        "is probably cut off: copy or download it again."
    )


def _byte_size(file: str | os.PathLike | io.BytesIO) -> int:
    return file.getbuffer().nbytes if isinstance(file, io.BytesIO) else os.path.getsize(file)


def declared_wav_frames(file: str | os.PathLike | BinaryIO) -> int | None:
    """The frame count a WAV (RIFF/WAVE) header declares in its ``data`` chunk, or ``None`` for other
    formats and for streaming headers whose size is a placeholder (0 or 0xFFFFFFFF).

    libsndfile trusts the file's length over its header and reads a truncated WAV without complaint; this
    reads the header itself so that a cut-off download can be reported.
    """
    handle = open(file, "rb") if isinstance(file, (str, os.PathLike)) else file  # noqa: SIM115
    position = None if isinstance(file, (str, os.PathLike)) else handle.tell()
    try:
        handle.seek(0)
        if handle.read(4) != b"RIFF" or len(handle.read(4)) != 4 or handle.read(4) != b"WAVE":
            return None
        block_align = None
        while True:
            header = handle.read(8)
            if len(header) < 8:
                return None
            chunk_id, size = header[:4], struct.unpack("<I", header[4:])[0]
            if chunk_id == b"fmt ":
                fmt = handle.read(size)
                if len(fmt) < 14:
                    return None
                block_align = struct.unpack("<H", fmt[12:14])[0]
                handle.seek(size % 2, io.SEEK_CUR)
            elif chunk_id == b"data":
                if not block_align or size in (0, 0xFFFFFFFF):
                    return None
                return size // block_align
            else:
                handle.seek(size + size % 2, io.SEEK_CUR)
    finally:
        if position is None:
            handle.close()
        else:
            handle.seek(position)


def _to_mono(array: np.ndarray, name: str) -> np.ndarray:
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


def _as_array(value: Any) -> np.ndarray:
    """A numpy view of in-memory samples: an array, a torch tensor (on any device), or a list of numbers."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor; not imported here (hf_atr.data stays free of torch)
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _is_array(value: Any) -> bool:
    """Whether ``value`` holds samples in memory: a numpy array or an array-like (torch, JAX) with a shape."""
    return isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "shape"))


def _dict_array(value: Mapping[str, Any]) -> Any:
    """The samples of an in-memory audio dict: ``raw`` (transformers' pipelines) or ``array`` (datasets)."""
    return value["raw"] if value.get("raw") is not None else value.get("array")


def _dict_rate(value: Mapping[str, Any], name: str) -> int:
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
            rate = _dict_rate(item, name)
            if sampling_rate is not None and sampling_rate != rate:
                raise ValueError(
                    f"{name}: the audio dict says 'sampling_rate': {rate}, but sampling_rate={sampling_rate} "
                    "was passed too; give the rate once."
                )
            return {"array": _to_mono(_as_array(_dict_array(item)), name), "sampling_rate": rate}, name, False
        if "bytes" in item or "path" in item:
            return dict(item), name, False
        raise AudioDecodeError(
            name,
            f"an audio dict needs 'raw' or 'array' with 'sampling_rate' (audio in memory), or 'bytes' / 'path' "
            f"(an audio file); got the keys {sorted(item)}.",
        )
    if _is_array(item):
        waveform = _to_mono(_as_array(item), name)
        return (
            {"array": waveform, "sampling_rate": sampling_rate or default_rate},
            name,
            sampling_rate is None,
        )
    raise TypeError(_NOT_AUDIO.format(name=name, kind=type(item).__name__))
