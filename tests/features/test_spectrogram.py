from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ClapFeatureExtractor, WhisperFeatureExtractor
from transformers.audio_utils import spectrogram, window_function

from hf_atr.features.spectrogram import (
    apply_filter_bands,
    centered_frame_counts,
    centered_frames,
    filter_bands,
    frame_power,
    linear_resize_time,
    pad_waveforms,
    reflect_pad_ends,
    used_bins,
)


def test_pad_waveforms_stacks_clips_of_different_lengths():
    waveforms, lengths = pad_waveforms([np.ones(3), torch.full((5,), 2.0)], dtype=torch.float64)
    assert waveforms.dtype == torch.float64 and lengths.tolist() == [3, 5]
    assert waveforms.tolist() == [[1, 1, 1, 0, 0], [2, 2, 2, 2, 2]]


@pytest.mark.parametrize(
    ("waveforms", "message"),
    [
        ([], "empty batch"),
        ([np.ones(3), np.ones((2, 3))], "Waveform 1 must be a non-empty 1-D"),
        ([np.ones(0)], "Waveform 0"),
    ],
)
def test_pad_waveforms_rejects_bad_input(waveforms, message):
    with pytest.raises(ValueError, match=message):
        pad_waveforms(waveforms)


def test_reflect_pad_ends_reflects_each_clip_at_its_own_end():
    clips = [np.arange(1.0, 8.0), np.arange(10.0, 15.0)]
    waveforms, lengths = pad_waveforms(clips, dtype=torch.float64)
    padded = reflect_pad_ends(waveforms, lengths, 3)
    for row, clip in enumerate(clips):
        expected = np.pad(clip, 3, mode="reflect")
        np.testing.assert_array_equal(padded[row, : len(expected)].numpy(), expected)
    uniform = reflect_pad_ends(waveforms[:1], None, 3)
    np.testing.assert_array_equal(uniform[0].numpy(), np.pad(clips[0], 3, mode="reflect"))


def test_reflect_pad_ends_names_clips_too_short():
    waveforms, lengths = pad_waveforms([np.ones(8), np.ones(3)])
    with pytest.raises(ValueError, match="clips longer than 3 samples, got 3"):
        reflect_pad_ends(waveforms, lengths, 3)


def test_centered_frame_power_of_a_padded_batch_equals_each_clip_alone():
    # Reference: transformers' NumPy STFT (centre, reflect padding, periodic Hann), one clip at a time.
    lengths = [4000, 2500, 3333]
    clips = synthetic_clips(lengths, 16000)
    waveforms, lengths_tensor = pad_waveforms(clips, dtype=torch.float64)
    window = window_function(512, "hann")
    power = frame_power(centered_frames(waveforms, lengths_tensor, 512, 160), torch.from_numpy(window))
    frames = centered_frame_counts(lengths_tensor, 512, 160)
    assert power.shape == (3, int(frames.max()), 257)
    for row, clip in enumerate(clips):
        expected = spectrogram(clip, window, frame_length=512, hop_length=160, power=2.0, dtype=np.float64)
        assert expected.shape[1] == frames[row]
        np.testing.assert_allclose(power[row, : frames[row]].numpy(), expected.T, rtol=1e-5, atol=1e-9)
    uniform = centered_frames(waveforms[:1], None, 512, 160)
    first_bins = frame_power(uniform, torch.from_numpy(window), bins=40)
    torch.testing.assert_close(first_bins, power[:1, : frames[0], :40])


def test_linear_resize_time_equals_bilinear_interpolate_per_clip():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(3, 50, 8, generator=generator)
    lengths = torch.tensor([50, 31, 12])
    resized = linear_resize_time(features, lengths, 20)
    for row, length in enumerate(lengths.tolist()):
        expected = torch.nn.functional.interpolate(
            features[row, :length][None, None], size=(20, 8), mode="bilinear", align_corners=False
        )[0, 0]
        torch.testing.assert_close(resized[row], expected)


@pytest.mark.parametrize(
    "filters",
    [ClapFeatureExtractor().mel_filters, WhisperFeatureExtractor().mel_filters],
    ids=["clap", "whisper"],
)
def test_filter_bands_give_the_dense_product(filters):
    bands = filter_bands(filters)
    assert bands[0][0] == 0 and bands[-1][1] == filters.shape[1]
    assert all(end == start for (_, end, _, _), (start, _, _, _) in zip(bands, bands[1:]))
    spectrum = torch.rand(2, 7, filters.shape[0], dtype=torch.float64)
    dense = spectrum @ torch.from_numpy(filters)
    banded = apply_filter_bands(spectrum[..., : used_bins(bands)], torch.from_numpy(filters), bands)
    torch.testing.assert_close(banded, dense)
