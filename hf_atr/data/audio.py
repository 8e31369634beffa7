"""Audio decoding with soundfile (no torchcodec, no FFmpeg, which datasets' own ``Audio`` decoding needs).

The shared schema keeps audio undecoded (``Audio(decode=False)``: ``{"bytes", "path"}``); this module
turns such a value, a file path, an already decoded ``{"array" | "raw", "sampling_rate"}`` dict or a bare
array into the float32 mono waveform a feature extractor expects, resampling when asked. Every failure raises
:class:`~hf_atr.data.audio_arrays.AudioDecodeError` naming the file (or the caller's ``source``, e.g. the
``audio_id``) and the reason. Audio in memory, and audio as a caller hands it over
(:func:`~hf_atr.data.audio_arrays.audio_clips`), are read by :mod:`hf_atr.data.audio_arrays`, which defines those
names and the error.
"""

from __future__ import annotations

import io
import math
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import soundfile

from hf_atr.data import audio_arrays
from hf_atr.data.audio_arrays import (
    as_array,
    dict_array,
    dict_rate,
    to_mono,
)
from hf_atr.deprecation import moved_names
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

AUDIO_EXTENSIONS: frozenset[str] = frozenset(
    {".wav", ".flac", ".mp3", ".ogg", ".opus", ".aiff", ".aif", ".aifc", ".au", ".caf", ".w64", ".m4a"}
)
"""File extensions counted as audio when a folder is searched for audio files."""
APPLEDOUBLE_PREFIX = "._"
"""macOS writes a ``._<name>`` AppleDouble file (resource fork, no audio) beside files copied to non-Apple
file systems; it carries the audio file's extension."""


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
            is time, and a shorter axis of more than :data:`~hf_atr.data.audio_arrays.MAX_ARRAY_CHANNELS` is refused.
        sampling_rate: target rate in Hz; ``None`` keeps the rate of the source.
        source: name of the clip used in error messages (e.g. its ``audio_id``); defaults to the path.

    Returns:
        ``(samples,)`` float32 array. Several channels are down-mixed to mono by averaging them in float32
        (:func:`~hf_atr.data.audio_arrays.mix_down`, for files and arrays alike: the mean keeps the level of correlated channels and,
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
        waveform = to_mono(value, name)
        source_rate = sampling_rate
    elif isinstance(value, (str, os.PathLike)):
        name = source or str(value)
        waveform, source_rate = _read_file(value, name)
    elif isinstance(value, dict) and any(key in value for key in audio_arrays.AUDIO_ARRAY_KEYS):
        name = source or value.get("path") or "<array>"
        source_rate = dict_rate(value, name)
        waveform = to_mono(as_array(dict_array(value)), name)
    elif isinstance(value, dict) and ("bytes" in value or "path" in value):
        path = value.get("path")
        name = source or path or "<bytes>"
        if value.get("bytes") is not None:
            waveform, source_rate = _read_file(io.BytesIO(value["bytes"]), name)
        elif path:
            waveform, source_rate = _read_file(path, name)
        else:
            raise audio_arrays.AudioDecodeError(name, "the audio value has neither 'bytes' nor 'path'.")
    else:
        raise TypeError(
            f"Cannot decode audio {source or ''} of type {type(value).__name__}: expected a dict "
            "{'bytes', 'path'} or {'array' | 'raw', 'sampling_rate'}, a file path, or a numpy array."
        )
    if waveform.size == 0:
        raise audio_arrays.AudioDecodeError(name, "the audio has zero length.")
    if not np.isfinite(waveform).all():
        raise audio_arrays.AudioDecodeError(name, "the audio contains non-finite samples (NaN or inf).")
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
        raise audio_arrays.AudioDecodeError(name, "the audio file does not exist.")
    if os.path.getsize(path) == 0:
        raise audio_arrays.AudioDecodeError(name, "the audio file is empty (0 bytes).")
    try:
        with soundfile.SoundFile(path) as audio_file:
            rate, total = audio_file.samplerate, audio_file.frames
            first = round(start_seconds * rate)
            if first >= total:
                raise audio_arrays.AudioDecodeError(
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
        raise audio_arrays.AudioDecodeError(name, "the audio file does not exist.")
    return _checked_header(path, name)


def check_audio_bytes(data: bytes, name: str) -> Any:
    """:func:`check_audio_file` for an audio file's bytes held in memory (``name`` heads the error message)."""
    return _checked_header(io.BytesIO(data), name)


def _checked_header(source: Any, name: str) -> Any:
    """``soundfile.info`` of a path or file object, refusing what cannot be read or holds no audio."""
    try:
        info = soundfile.info(source)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
        raise audio_arrays.AudioDecodeError(
            name, f"the audio file is unreadable or corrupt ({error})."
        ) from error
    if info.channels < 1:
        raise audio_arrays.AudioDecodeError(name, "the audio file has no channel.")
    if info.frames <= 0:
        raise audio_arrays.AudioDecodeError(name, "the audio file has zero length.")
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
            raise audio_arrays.AudioDecodeError(name, "the audio file does not exist.")
        if is_appledouble(file):
            raise audio_arrays.AudioDecodeError(name, "a macOS AppleDouble file (resource fork, no audio).")
    if _byte_size(file) == 0:
        raise audio_arrays.AudioDecodeError(name, "the audio file is empty (0 bytes).")
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
    return audio_arrays.mix_down(frames), rate


def _unreadable(name: str, error: Exception, hint: str = "") -> audio_arrays.AudioDecodeError:
    """The error for audio that soundfile fails to decode: libsndfile's own reason (without the file name
    ``str(error)`` adds), then ``hint``."""
    reason = (getattr(error, "error_string", None) or str(error)).rstrip(".")
    return audio_arrays.AudioDecodeError(name, f"the audio is unreadable or corrupt ({reason}).{hint}")


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


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "AUDIO_ARRAY_KEYS": "hf_atr.data.audio_arrays",
    "AudioClips": "hf_atr.data.audio_arrays",
    "AudioDecodeError": "hf_atr.data.audio_arrays",
    "MAX_ARRAY_CHANNELS": "hf_atr.data.audio_arrays",
    "audio_clips": "hf_atr.data.audio_arrays",
    "is_one_clip": "hf_atr.data.audio_arrays",
    "mix_down": "hf_atr.data.audio_arrays",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "APPLEDOUBLE_PREFIX",
    "AUDIO_EXTENSIONS",
    "check_audio_bytes",
    "check_audio_file",
    "declared_wav_frames",
    "decode_audio",
    "encode_wav",
    "is_appledouble",
    "looks_like_audio_path",
    "read_audio_span",
    "resample",
]
