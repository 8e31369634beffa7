"""16-bit PCM kept as stored: audio files read as ``int16`` when nothing needs converting.

A mono 16-bit file (WAV, FLAC, ... of subtype ``PCM_16``) already at the rate a feature extractor reads holds
exactly the samples the extractor will see, scaled by ``1/32768``. Reading it as ``int16`` instead of float32
halves what a DataLoader worker hands to the training process, and the scaling can run where the
features are computed: ``int16 -> float32`` is exact and ``1/32768 = 2**-15`` is a power of two, so
:func:`pcm16_to_float` gives bit for bit the float32 samples soundfile decodes from the same file (libsndfile
scales 16-bit PCM by ``1/0x8000``). Anything else (several channels, another rate, another sample format, audio
in memory) is decoded to float32 by :func:`~hf_atr.data.audio.decode_audio`: mixing down and resampling need
float, and re-quantising their result would add error.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
import soundfile

from .audio import declared_wav_frames, decode_audio, is_appledouble
from .audio_arrays import AUDIO_ARRAY_KEYS

PCM16_SUBTYPE = "PCM_16"
"""soundfile's name of 16-bit signed integer samples."""
PCM16_FULL_SCALE = 32768
"""``2**15``: 16-bit PCM divided by it lies in ``[-1, 1)``, as soundfile scales it to float."""


def decode_pcm16(value: Any, sampling_rate: int, *, source: str | None = None) -> np.ndarray:
    """``value``'s samples as stored (``int16``) when it is a mono 16-bit PCM file at ``sampling_rate``, else the
    float32 mono waveform :func:`~hf_atr.data.audio.decode_audio` makes of it.

    Args:
        value: what :func:`~hf_atr.data.audio.decode_audio` takes; only files (a path, or a shared-schema
            ``{"bytes", "path"}`` dict) can be read as ``int16``.
        sampling_rate: the rate the samples must have (the feature extractor's), in Hz.
        source: the clip's name in error messages (e.g. its ``audio_id``).

    Returns:
        ``(samples,)`` ``int16`` (the file's PCM, untouched) or float32 (decoded, mixed down, resampled).
        :func:`pcm16_to_float` turns the first into exactly the second would have been.

    Raises:
        AudioDecodeError: as :func:`~hf_atr.data.audio.decode_audio` (a file that fails here is decoded by it,
            so that its error names the file and the reason the same way); a truncated WAV is decoded by it too,
            which logs the truncation.
    """
    file = _file_of(value)
    if file is None:
        return decode_audio(value, sampling_rate, source=source)
    try:
        with soundfile.SoundFile(file) as audio_file:
            as_stored = (
                audio_file.subtype == PCM16_SUBTYPE
                and audio_file.channels == 1
                and audio_file.samplerate == sampling_rate
            )
            samples = audio_file.read(dtype="int16") if as_stored else None
    except (soundfile.LibsndfileError, RuntimeError, OSError):
        samples = None
    if samples is None or samples.size == 0 or _truncated(file, samples.size):
        return decode_audio(value, sampling_rate, source=source)
    return samples


def pcm16_to_float(samples: np.ndarray) -> np.ndarray:
    """``int16`` PCM -> float32 in ``[-1, 1)``, exactly as soundfile decodes 16-bit files (see the module)."""
    return samples.astype(np.float32) / PCM16_FULL_SCALE


def _file_of(value: Any) -> str | os.PathLike | io.BytesIO | None:
    """The file ``value`` names (its bytes win, as in :func:`~hf_atr.data.audio.decode_audio`), or ``None`` for
    audio in memory and for what that function refuses or reads with its own checks."""
    if isinstance(value, (str, os.PathLike)):
        path = value
    elif isinstance(value, dict) and not any(key in value for key in AUDIO_ARRAY_KEYS):
        if value.get("bytes") is not None:
            return io.BytesIO(value["bytes"])
        path = value.get("path")
    else:
        return None
    return path if path and os.path.isfile(path) and not is_appledouble(path) else None


def _truncated(file: str | os.PathLike | io.BytesIO, frames: int) -> bool:
    declared = declared_wav_frames(file)
    return declared is not None and frames < declared


__all__ = ["PCM16_FULL_SCALE", "PCM16_SUBTYPE", "decode_pcm16", "pcm16_to_float"]
