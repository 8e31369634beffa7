"""16-bit PCM read as stored: int16 only where nothing needs converting, and exactly soundfile's float32 then."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import soundfile
from synthetic_audio import synthetic_clip

from hf_atr.data.audio import decode_audio, encode_wav
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.pcm import PCM16_FULL_SCALE, decode_pcm16, pcm16_to_float

RATE = 16000


def _pcm16(samples: np.ndarray, rate: int = RATE, audio_format: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=audio_format, subtype="PCM_16")
    return buffer.getvalue()


def _every_int16() -> np.ndarray:
    """All 65,536 int16 values, full scale and zero included, in a shuffled order."""
    return np.random.default_rng(0).permutation(np.arange(-32768, 32768, dtype=np.int64)).astype(np.int16)


@pytest.mark.parametrize("audio_format", ["WAV", "FLAC"])
def test_mono_16_bit_files_at_the_rate_are_read_as_stored_and_scale_to_soundfiles_float(
    audio_format, tmp_path
):
    samples = _every_int16()
    data = _pcm16(samples, audio_format=audio_format)
    path = tmp_path / f"every value.{audio_format.lower()}"
    path.write_bytes(data)
    for value in ({"bytes": data, "path": None}, {"bytes": None, "path": str(path)}, str(path), path):
        stored = decode_pcm16(value, RATE, source="clip")
        assert stored.dtype == np.int16 and np.array_equal(stored, samples)
        # Bit for bit what the float path decodes (soundfile's own float32 scaling of the file).
        assert np.array_equal(pcm16_to_float(stored), decode_audio(value, RATE))
    # Against the definition, in float64: n / 2**15, every one exact in float32.
    expected = (samples.astype(np.float64) / 2**15).astype(np.float32)
    assert np.array_equal(pcm16_to_float(samples), expected) and PCM16_FULL_SCALE == 2**15


@pytest.mark.parametrize(
    ("make_value", "why"),
    [
        (lambda clip: {"bytes": _pcm16(np.stack([clip, -clip], axis=1)), "path": None}, "stereo"),
        (lambda clip: {"bytes": _pcm16(clip, rate=22050), "path": None}, "another rate"),
        (lambda clip: {"bytes": encode_wav(clip / 32768, RATE, subtype="FLOAT"), "path": None}, "float file"),
        (lambda clip: {"bytes": encode_wav(clip / 32768, RATE, subtype="PCM_24"), "path": None}, "24-bit"),
        (lambda clip: {"array": clip, "sampling_rate": RATE}, "in memory"),
        (lambda clip: clip, "bare array"),
    ],
)
def test_what_needs_converting_is_decoded_to_float_as_before(make_value, why):
    clip = (synthetic_clip(4000, RATE) * 20000).astype(np.int16)
    value = make_value(clip)
    decoded = decode_pcm16(value, RATE, source="clip")
    assert decoded.dtype == np.float32, why
    assert np.array_equal(decoded, decode_audio(value, RATE, source="clip")), why


def test_unreadable_files_fail_as_decode_audio_says(tmp_path):
    with pytest.raises(AudioDecodeError, match=r"^gone: the audio file does not exist\.$"):
        decode_pcm16(str(tmp_path / "missing.wav"), RATE, source="gone")
    with pytest.raises(AudioDecodeError, match=r"^clip7: the audio is unreadable or corrupt"):
        decode_pcm16({"bytes": b"not audio", "path": "clip7.wav"}, RATE, source="clip7")
    with pytest.raises(AudioDecodeError, match=r"^clip8: the audio file is empty \(0 bytes\)\.$"):
        decode_pcm16({"bytes": b"", "path": None}, RATE, source="clip8")
    appledouble = tmp_path / "._rain.wav"
    appledouble.write_bytes(_pcm16(np.zeros(100, dtype=np.int16)))
    with pytest.raises(AudioDecodeError, match="AppleDouble"):
        decode_pcm16(str(appledouble), RATE)


def test_a_truncated_wav_goes_through_the_float_path_and_is_named(tmp_path, caplog):
    whole = _pcm16((synthetic_clip(RATE, RATE) * 20000).astype(np.int16))
    path = tmp_path / "cut off.wav"
    path.write_bytes(whole[: 44 + 2 * 6000])
    with caplog.at_level(logging.WARNING):
        decoded = decode_pcm16(str(path), RATE)
    assert decoded.dtype == np.float32 and len(decoded) == 6000
    assert f"{path}: the file is truncated: it holds 6000 of the 16000 frames" in caplog.text
