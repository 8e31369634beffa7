"""hf_atr.data.audio_arrays: audio in memory, and audio as a caller hands it over (files: tests/data/test_audio.py)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from hf_atr.data.audio import decode_audio
from hf_atr.data.audio_arrays import MAX_ARRAY_CHANNELS, AudioDecodeError, audio_clips


def _sine(frequency: float, sampling_rate: int, seconds: float = 1.0) -> np.ndarray:
    time = np.arange(int(seconds * sampling_rate)) / sampling_rate
    return (0.5 * np.sin(2 * np.pi * frequency * time)).astype(np.float32)


@pytest.fixture
def stereo_file(tmp_path):
    """A 0.5-s stereo PCM-16 WAV at 22.05 kHz written with soundfile, different sounds left and right."""
    left, right = _sine(440, 22050, 0.5), 0.3 * _sine(3000, 22050, 0.5)
    path = tmp_path / "dog bark.wav"
    soundfile.write(path, np.stack([left, right], axis=1), 22050, subtype="PCM_16")
    return path


def test_an_array_read_from_a_stereo_file_is_one_clip_in_either_orientation(stereo_file):
    frames, rate = soundfile.read(stereo_file)  # (samples, channels) float64, as users read files
    assert frames.shape == (11025, 2) and rate == 22050
    from_file = decode_audio(str(stereo_file), 16000)
    given = audio_clips(frames, sampling_rate=rate, default_rate=16000)
    assert given.single and len(given.clips) == 1 and given.rate_assumed == 0
    # The same down-mix and resampling as the file: bitwise equal, whatever way round or wrapped.
    for value in (
        frames,
        frames.T,
        {"raw": frames, "sampling_rate": rate},
        {"array": frames.T, "sampling_rate": rate},
        soundfile.read(stereo_file, dtype="int16")[0],
        torch.from_numpy(frames),
    ):
        clip = audio_clips(value, sampling_rate=None if isinstance(value, dict) else rate, default_rate=16000)
        np.testing.assert_array_equal(decode_audio(clip.clips[0], 16000), from_file)
    np.testing.assert_array_equal(
        decode_audio(frames, 16000), decode_audio(str(stereo_file))
    )  # decode_audio itself reads either orientation (arrays at the target rate)
    assert len(from_file) == 8000


def test_a_batch_is_a_list_and_each_clip_is_named(stereo_file):
    frames, rate = soundfile.read(stereo_file)
    given = audio_clips(
        [str(stereo_file), frames, {"raw": frames, "sampling_rate": rate}, stereo_file.read_bytes()],
        sampling_rate=rate,
        default_rate=16000,
    )
    assert not given.single
    assert given.names == [str(stereo_file), "item 1", "item 2", "item 3"]
    decoded = [decode_audio(clip, 16000) for clip in given.clips]
    for waveform in decoded[1:]:
        np.testing.assert_array_equal(waveform, decoded[0])
    assert audio_clips(str(stereo_file), default_rate=16000).single
    assert len(audio_clips((frames, frames), sampling_rate=rate, default_rate=16000).clips) == 2


def test_arrays_without_a_rate_are_counted_and_taken_at_the_default_rate():
    mono = _sine(440, 16000, 0.1)
    given = audio_clips([mono, mono, {"array": mono, "sampling_rate": 8000}], default_rate=16000)
    assert given.rate_assumed == 2
    assert [clip["sampling_rate"] for clip in given.clips] == [16000, 16000, 8000]
    assert audio_clips(mono, sampling_rate=16000, default_rate=16000).rate_assumed == 0


def test_a_stacked_batch_is_not_taken_for_a_multichannel_clip():
    stacked = np.stack([_sine(440 * (i + 1), 16000, 0.5) for i in range(8)])
    message = (
        r"the audio: an audio array of shape \(8, 8000\) is not one clip: its shorter axis \(8\) is read as "
        r"channels, and a clip has at most 7\. Pass a batch of clips as a list \(e\.g\. list\(array\)\)"
    )
    with pytest.raises(AudioDecodeError, match=message):
        audio_clips(stacked, default_rate=16000)
    with pytest.raises(
        AudioDecodeError, match=r"item 0: an audio array of shape \(8000, 8\) is not one clip"
    ):
        audio_clips([stacked.T], default_rate=16000)
    assert len(audio_clips(list(stacked), default_rate=16000).clips) == 8
    seven = stacked[:MAX_ARRAY_CHANNELS]
    only = audio_clips(seven, default_rate=16000).clips[0]["array"]
    np.testing.assert_allclose(only, seven.mean(axis=0), atol=1e-7)


def test_bad_audio_inputs_are_explained():
    mono = _sine(440, 16000, 0.1)
    with pytest.raises(ValueError, match=r"the audio: an empty list holds no audio clip"):
        audio_clips([], default_rate=16000)
    with pytest.raises(TypeError, match=r"item 0: cannot read audio of type float\. Give one clip"):
        audio_clips([0.1, 0.2], default_rate=16000)
    with pytest.raises(TypeError, match=r"the audio: cannot read audio of type int"):
        audio_clips(3, default_rate=16000)
    with pytest.raises(AudioDecodeError, match=r"the audio: an audio dict with 'raw' needs its positive int"):
        audio_clips({"raw": mono}, default_rate=16000)
    with pytest.raises(
        AudioDecodeError, match=r"the audio: an audio dict needs 'raw' or 'array'.*\['wave'\]"
    ):
        audio_clips({"wave": mono}, default_rate=16000)
    with pytest.raises(ValueError, match=r"says 'sampling_rate': 8000, but sampling_rate=16000 was passed"):
        audio_clips({"raw": mono, "sampling_rate": 8000}, sampling_rate=16000, default_rate=16000)
    with pytest.raises(ValueError, match="sampling_rate must be a positive int"):
        audio_clips(mono, sampling_rate=0, default_rate=16000)
