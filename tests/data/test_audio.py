from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile

from hf_atr.data.audio import (
    check_audio_bytes,
    check_audio_file,
    declared_wav_frames,
    decode_audio,
    encode_wav,
    is_appledouble,
    looks_like_audio_path,
    read_audio_span,
    resample,
)
from hf_atr.data.audio_arrays import AudioDecodeError


def _sine(frequency: float, sampling_rate: int, seconds: float = 1.0) -> np.ndarray:
    time = np.arange(int(seconds * sampling_rate)) / sampling_rate
    return (0.5 * np.sin(2 * np.pi * frequency * time)).astype(np.float32)


def _peak_frequency(waveform: np.ndarray, sampling_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(waveform * np.hanning(len(waveform))))
    return float(np.fft.rfftfreq(len(waveform), 1 / sampling_rate)[np.argmax(spectrum)])


def _write(path: Path, array: np.ndarray, sampling_rate: int, subtype: str = "FLOAT") -> Path:
    path.write_bytes(encode_wav(array, sampling_rate, subtype=subtype))
    return path


def test_bytes_and_path_decode_to_the_same_waveform(tmp_path):
    sine = _sine(440, 16000)
    path = _write(tmp_path / "sine.wav", sine, 16000)
    from_path = decode_audio({"bytes": None, "path": str(path)})
    from_bytes = decode_audio({"bytes": path.read_bytes(), "path": "elsewhere.wav"})
    from_str = decode_audio(str(path))
    from_pathlike = decode_audio(path)
    assert from_path.dtype == np.float32 and from_path.ndim == 1
    np.testing.assert_array_equal(from_path, sine)
    for other in (from_bytes, from_str, from_pathlike):
        np.testing.assert_array_equal(other, from_path)


def test_bytes_win_over_a_missing_path():
    sine = _sine(440, 16000)
    decoded = decode_audio({"bytes": encode_wav(sine, 16000, subtype="FLOAT"), "path": "/does/not/exist.wav"})
    np.testing.assert_array_equal(decoded, sine)


def test_pcm16_round_trip_is_within_quantisation():
    sine = _sine(440, 16000)
    decoded = decode_audio({"bytes": encode_wav(sine, 16000), "path": None})
    assert np.abs(decoded - sine).max() <= 1 / 32768 + 1e-7


def test_pcm16_encoding_clips_out_of_range_samples():
    decoded = decode_audio({"bytes": encode_wav(np.array([2.0, -3.0, 0.5]), 8000), "path": None})
    np.testing.assert_allclose(decoded, [32767 / 32768, -1.0, 0.5], atol=1e-4)


@pytest.mark.parametrize(("source_rate", "target_rate"), [(44100, 16000), (8000, 16000), (48000, 32000)])
def test_resampling_preserves_frequency_and_scales_length(tmp_path, source_rate, target_rate):
    path = _write(tmp_path / "sine.wav", _sine(1000, source_rate), source_rate)
    decoded = decode_audio(str(path), target_rate)
    assert len(decoded) == target_rate  # one second
    assert abs(_peak_frequency(decoded, target_rate) - 1000) <= 2
    # The polyphase filter keeps the amplitude of an in-band tone.
    assert abs(np.abs(decoded[1000:-1000]).max() - 0.5) < 0.01


def test_resample_matches_closed_form_length():
    waveform = np.random.default_rng(0).standard_normal(12345).astype(np.float32)
    assert len(resample(waveform, 44100, 16000)) == int(np.ceil(12345 * 16000 / 44100))


def test_same_rate_is_left_untouched(tmp_path):
    sine = _sine(440, 16000)
    path = _write(tmp_path / "sine.wav", sine, 16000)
    np.testing.assert_array_equal(decode_audio(str(path), 16000), sine)


def test_multichannel_is_averaged_to_mono(tmp_path):
    left = _sine(440, 16000)
    right = _sine(3000, 16000)
    path = _write(tmp_path / "stereo.wav", np.stack([left, right]), 16000)
    assert soundfile.info(path).channels == 2
    np.testing.assert_allclose(decode_audio(str(path)), (left + right) / 2, atol=1e-6)


def test_decoded_dict_is_resampled():
    decoded = decode_audio({"array": _sine(1000, 8000), "sampling_rate": 8000}, 16000)
    assert len(decoded) == 16000
    assert abs(_peak_frequency(decoded, 16000) - 1000) <= 2


def test_arrays_are_taken_as_at_the_target_rate():
    stereo = np.stack([np.ones(100), np.zeros(100)])
    np.testing.assert_allclose(decode_audio(stereo, 16000), np.full(100, 0.5))
    integer = np.array([16384, -32768], dtype=np.int16)
    np.testing.assert_allclose(decode_audio(integer), [0.5, -1.0])


def test_missing_file_names_the_file(tmp_path):
    missing = tmp_path / "nowhere" / "clip_007.wav"
    with pytest.raises(AudioDecodeError, match=r"clip_007\.wav: the audio file does not exist"):
        decode_audio({"bytes": None, "path": str(missing)})
    with pytest.raises(AudioDecodeError, match=r"clip_007\.wav: the audio file does not exist"):
        decode_audio(missing)
    with pytest.raises(AudioDecodeError, match=r"clip_007\.wav: the audio file does not exist"):
        check_audio_file(missing)


def test_corrupt_file_names_the_file(tmp_path):
    corrupt = tmp_path / "broken clip.wav"
    corrupt.write_bytes(b"RIFF\x00\x00not really audio")
    with pytest.raises(AudioDecodeError, match=r"broken clip\.wav: the audio is unreadable or corrupt"):
        decode_audio(str(corrupt))
    with pytest.raises(AudioDecodeError, match=r"broken clip\.wav: the audio file is unreadable or corrupt"):
        check_audio_file(corrupt)


def test_audio_bytes_are_checked_from_their_header():
    info = check_audio_bytes(encode_wav(np.zeros(1600, dtype=np.float32), 16000), "Clip 'a'")
    assert (info.frames, info.samplerate, info.channels) == (1600, 16000, 1)
    with pytest.raises(AudioDecodeError, match=r"Clip 'b': the audio file is unreadable or corrupt"):
        check_audio_bytes(b"RIFF\x00\x00not really audio", "Clip 'b'")
    empty = io.BytesIO()
    soundfile.write(empty, np.zeros(0, dtype=np.float32), 16000, format="WAV")
    with pytest.raises(AudioDecodeError, match=r"Clip 'c': the audio file has zero length"):
        check_audio_bytes(empty.getvalue(), "Clip 'c'")


def test_corrupt_bytes_name_the_source():
    with pytest.raises(AudioDecodeError, match=r"ytid_42: the audio is unreadable"):
        decode_audio({"bytes": b"garbage", "path": "a.wav"}, source="ytid_42")
    with pytest.raises(AudioDecodeError, match=r"a\.wav: the audio is unreadable"):
        decode_audio({"bytes": b"garbage", "path": "a.wav"})


def test_zero_length_audio_names_the_file(tmp_path):
    empty = tmp_path / "empty.wav"
    soundfile.write(empty, np.zeros(0, dtype=np.float32), 16000)
    with pytest.raises(AudioDecodeError, match=r"empty\.wav: the audio has zero length"):
        decode_audio(str(empty))
    with pytest.raises(AudioDecodeError, match=r"empty\.wav: the audio file has zero length"):
        check_audio_file(empty)
    with pytest.raises(AudioDecodeError, match=r"clip_9: the audio has zero length"):
        decode_audio(np.zeros(0), source="clip_9")


def test_non_finite_samples_name_the_file(tmp_path):
    path = tmp_path / "nan.wav"
    soundfile.write(path, np.array([0.0, np.nan, 0.1], dtype=np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioDecodeError, match=r"nan\.wav: the audio contains non-finite samples"):
        decode_audio(str(path))
    with pytest.raises(AudioDecodeError, match=r"clip_3: the audio contains non-finite"):
        decode_audio({"array": np.array([np.inf, 0.0]), "sampling_rate": 16000}, source="clip_3")


def test_malformed_values_are_reported():
    with pytest.raises(AudioDecodeError, match=r"clip_1: the audio value has neither 'bytes' nor 'path'"):
        decode_audio({"bytes": None, "path": None}, source="clip_1")
    with pytest.raises(
        AudioDecodeError,
        match=r"x\.wav: an audio dict with 'array' needs its positive int 'sampling_rate', got None",
    ):
        decode_audio({"array": np.ones(3), "sampling_rate": None, "path": "x.wav"})
    with pytest.raises(AudioDecodeError, match=r"clip_2: an audio array of shape \(100, 9\) is not one clip"):
        decode_audio(np.ones((100, 9)), source="clip_2")
    with pytest.raises(AudioDecodeError, match=r"clip_4: an audio array must be 1-D \(samples,\) or 2-D"):
        decode_audio(np.ones((2, 2, 100)), source="clip_4")
    with pytest.raises(TypeError, match="expected a dict"):
        decode_audio(3.5)
    with pytest.raises(ValueError, match="sampling_rate must be a positive int"):
        decode_audio(np.ones(3), 0)


def test_check_audio_file_returns_header_info(tmp_path):
    path = _write(tmp_path / "sine.wav", _sine(440, 22050, 0.5), 22050)
    info = check_audio_file(path)
    assert (info.samplerate, info.frames, info.channels) == (22050, 11025, 1)


def test_encode_wav_rejects_bad_arrays():
    with pytest.raises(ValueError, match="non-empty"):
        encode_wav(np.zeros(0), 16000)
    with pytest.raises(ValueError, match="non-finite"):
        encode_wav(np.array([np.nan]), 16000)


def test_a_truncated_wav_decodes_what_it_holds_and_is_named_in_a_warning(tmp_path, caplog):
    sine = _sine(440, 16000)
    whole = encode_wav(sine, 16000)
    path = tmp_path / "cut off.wav"
    path.write_bytes(whole[: 44 + 2 * 6000])  # the header still declares 16000 frames
    with caplog.at_level(logging.WARNING):
        decoded = decode_audio(str(path))
    np.testing.assert_allclose(decoded, sine[:6000], atol=1 / 32768)
    assert (
        f"{path}: the file is truncated: it holds 6000 of the 16000 frames its header declares (0.38 of 1.00 s); "
        "decoding the 0.38 s it holds." in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        decode_audio({"bytes": whole, "path": "whole.wav"})
    assert caplog.text == ""


def test_a_cut_off_flac_is_named_as_probably_cut_off(tmp_path):
    path = tmp_path / "cut off.flac"
    soundfile.write(path, _sine(440, 16000, 2.0), 16000)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # libsndfile decodes none of it
    with pytest.raises(AudioDecodeError) as error:
        decode_audio(str(path))
    assert error.value.name == str(path) and re.fullmatch(
        r"the audio is unreadable or corrupt \(.+\)\. Its FLAC header is intact and declares 2\.00 s, so the "
        r"file is probably cut off: copy or download it again\.",
        error.value.reason,
    )
    with pytest.raises(AudioDecodeError, match=r"^clip_3: .*Its FLAC header is intact and declares 2\.00 s"):
        decode_audio({"bytes": path.read_bytes(), "path": None}, source="clip_3")


def test_declared_wav_frames_reads_the_header_of_wav_files_only(tmp_path):
    stereo = np.stack([_sine(440, 8000), _sine(880, 8000)])
    path = _write(tmp_path / "stereo.wav", stereo, 8000, subtype="PCM_24")
    assert declared_wav_frames(path) == 8000
    with open(path, "rb") as handle:
        handle.seek(10)
        assert declared_wav_frames(handle) == 8000 and handle.tell() == 10  # the position is kept
    flac = tmp_path / "sine.flac"
    soundfile.write(flac, _sine(440, 8000), 8000)
    assert declared_wav_frames(flac) is None
    (tmp_path / "text.wav").write_text("RIFF but not really")
    assert declared_wav_frames(tmp_path / "text.wav") is None


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.wav", b"", "the audio file is empty (0 bytes)."),
        ("._rain.wav", None, "a macOS AppleDouble file (resource fork, no audio)."),
        ("notes.wav", b"some text, renamed", "the audio is unreadable or corrupt (Format not recognised)."),
    ],
)
def test_unreadable_files_are_named_with_a_reason(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(encode_wav(_sine(440, 8000), 8000) if content is None else content)
    with pytest.raises(AudioDecodeError) as error:
        decode_audio(str(path))
    assert str(error.value) == f"{path}: {reason}" and error.value.reason == reason
    assert error.value.name == str(path)


def test_what_looks_like_an_audio_path(tmp_path):
    (tmp_path / "notes").write_text("x")
    assert looks_like_audio_path("rain.wav") and looks_like_audio_path("Lighting matches.WAV")
    assert looks_like_audio_path(str(tmp_path / "notes"))  # an existing file, whatever its name
    assert not looks_like_audio_path("a dog barks") and not looks_like_audio_path("rain falls.")
    assert is_appledouble("/x/._rain.wav") and not is_appledouble("/x/rain.wav")


def test_read_audio_span_returns_the_stored_samples_of_the_span(tmp_path):
    """A stereo FLAC at 44.1 kHz: the span's frames exactly as stored (rate and channels kept), the rest of the
    file when the span runs past its end or has no end."""
    rate = 44100
    stereo = np.stack([_sine(440, rate, seconds=3.0), _sine(660, rate, seconds=3.0)])
    path = tmp_path / "take 1.flac"
    soundfile.write(path, stereo.T, rate, subtype="PCM_24")
    stored, _ = soundfile.read(path, dtype="float32", always_2d=True)
    frames, read_rate = read_audio_span(path, 1.25, 2.0)
    assert read_rate == rate and frames.shape == (round(0.75 * rate), 2)
    np.testing.assert_array_equal(frames, stored[round(1.25 * rate) : 2 * rate])
    np.testing.assert_array_equal(read_audio_span(path, 2.5, 9.0)[0], stored[round(2.5 * rate) :])
    np.testing.assert_array_equal(read_audio_span(path, 2.5)[0], stored[round(2.5 * rate) :])


def test_read_audio_span_names_the_file_and_the_problem(tmp_path):
    path = _write(tmp_path / "short.wav", _sine(440, 16000), 16000)
    with pytest.raises(
        AudioDecodeError,
        match=r"short\.wav: the span from 3\.00 s starts after the end of the file \(1\.00 s\)",
    ):
        read_audio_span(path, 3.0, 4.0)
    with pytest.raises(
        ValueError, match=r"A span needs 0 <= start < end, got 2 s to 1 s \(file .*short\.wav\)"
    ):
        read_audio_span(path, 2.0, 1.0)
    with pytest.raises(AudioDecodeError, match=r"gone\.wav: the audio file does not exist"):
        read_audio_span(tmp_path / "gone.wav", 0.0, 1.0)
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AudioDecodeError, match=r"empty\.wav: the audio file is empty \(0 bytes\)"):
        read_audio_span(tmp_path / "empty.wav", 0.0, 1.0)
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(AudioDecodeError, match=r"text\.wav: the audio is unreadable or corrupt"):
        read_audio_span(tmp_path / "text.wav", 0.0, 1.0)
