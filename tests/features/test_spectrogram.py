from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ClapFeatureExtractor, WhisperFeatureExtractor
from transformers.audio_utils import spectrogram, window_function

from hf_atr.features.spectrogram import (
    apply_filter_bands,
    audible_frame_counts,
    centered_frame_counts,
    centered_signal,
    filter_bands,
    interleave_bins,
    linear_resize_time,
    mel_power_,
    pad_waveforms,
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


def _signal(clip, content, signal, padding_value):
    return np.concatenate([clip[:content], np.full(signal - content, padding_value)])


def test_centered_signal_reflects_each_clip_at_its_own_end():
    clips = [np.arange(1.0, 8.0), np.arange(10.0, 15.0)]
    waveforms, lengths = pad_waveforms(clips, dtype=torch.float64)
    padded = centered_signal(waveforms, lengths, 6, 3, 2)
    assert padded.shape == (2, 2 * 2 + 6)
    for row, clip in enumerate(clips):
        expected = np.pad(clip, 3, mode="reflect")
        written = min(len(expected), padded.shape[1])
        np.testing.assert_array_equal(padded[row, :written].numpy(), expected[:written])
        # Past the clip's own reflected end: zeros.
        np.testing.assert_array_equal(padded[row, written:].numpy(), 0.0)


@pytest.mark.parametrize("padding_value", [0.0, 0.25])
def test_centered_signal_pads_the_content_and_writes_only_what_the_frames_read(padding_value):
    # Clip i: its first content[i] samples, then padding_value up to signal[i]; one frame to all of them.
    clips = [np.arange(1.0, 21.0), np.arange(30.0, 42.0), np.arange(50.0, 54.0)]
    content, signal = [20, 9, 4], [20, 16, 13]
    waveforms, _ = pad_waveforms(clips, dtype=torch.float64)
    for frames in (1, 3, 7):
        padded = centered_signal(
            waveforms,
            torch.tensor(signal),
            8,
            frames,
            3,
            content_lengths=torch.tensor(content),
            padding_value=padding_value,
        )
        assert padded.shape == (3, (frames - 1) * 3 + 8)
        for row, clip in enumerate(clips):
            expected = np.pad(_signal(clip, content[row], signal[row], padding_value), 4, mode="reflect")
            written = min(len(expected), padded.shape[1])
            np.testing.assert_array_equal(padded[row, :written].numpy(), expected[:written])


def test_centered_signal_repeats_content_periods():
    # Clip i's content: its first period[i] samples tiled (the last tile cut) to content[i], then zeros.
    clips = [np.arange(1.0, 6.0), np.arange(10.0, 14.0), np.arange(20.0, 40.0)]
    period, content, signal = [5, 3, 20], [23, 13, 20], [30, 13, 24]
    waveforms, _ = pad_waveforms(clips, dtype=torch.float64)
    padded = centered_signal(
        waveforms,
        torch.tensor(signal),
        8,
        7,
        4,
        content_lengths=torch.tensor(content),
        content_periods=torch.tensor(period),
    )
    for row, clip in enumerate(clips):
        tiled = np.resize(clip[: period[row]], content[row])
        expected = np.pad(_signal(tiled, content[row], signal[row], 0.0), 4, mode="reflect")
        written = min(len(expected), padded.shape[1])
        np.testing.assert_array_equal(padded[row, :written].numpy(), expected[:written])


def test_centered_signal_names_clips_too_short():
    waveforms, lengths = pad_waveforms([np.ones(8), np.ones(3)])
    with pytest.raises(ValueError, match="clips longer than 3 samples, got 3"):
        centered_signal(waveforms, lengths, 6, 2, 2)


@pytest.mark.parametrize(("frame_length", "hop_length"), [(8, 3), (400, 160), (9, 4)])
def test_audible_frame_counts_end_where_frames_hold_only_padding(frame_length, hop_length):
    # Brute force: the first frame from which every frame of the reflect-padded signal is padding only.
    rng = np.random.default_rng(0)
    padding = frame_length // 2
    cases = [(content, signal) for signal in (padding + 1, 50, 1200) for content in (1, 7, 33, signal)]
    cases = [(content, signal) for content, signal in cases if content <= signal]
    counts = audible_frame_counts(
        torch.tensor([c for c, _ in cases]), torch.tensor([s for _, s in cases]), frame_length, hop_length
    )
    for (content, signal), count in zip(cases, counts.tolist()):
        padded = np.pad(_signal(1 + rng.random(content), content, signal, 0.0), padding, mode="reflect")
        starts = range(0, len(padded) - frame_length + 1, hop_length)
        frames = [padded[start : start + frame_length] for start in starts]
        holds_content = [bool(np.any(frame != 0.0)) for frame in frames]
        last_audible = max(t for t, audible in enumerate(holds_content) if audible)
        if count < len(frames):
            assert count == last_audible + 1, (content, signal)
        else:
            # No frame skipped: the reflected end reaches content, or the last frame holds some.
            assert content + padding >= signal or last_audible == len(frames) - 1, (content, signal)


def test_centered_frame_power_of_a_padded_batch_equals_each_clip_alone():
    # Reference: transformers' NumPy STFT (centre, reflect padding, periodic Hann), one clip at a time.
    lengths = [4000, 2500, 3333]
    clips = synthetic_clips(lengths, 16000)
    waveforms, lengths_tensor = pad_waveforms(clips, dtype=torch.float64)
    window = window_function(512, "hann")
    counts = centered_frame_counts(lengths_tensor, 512, 160)
    signal = centered_signal(waveforms, lengths_tensor, 512, int(counts.max()), 160)
    power = torch.fft.rfft(signal.unfold(1, 512, 160) * torch.from_numpy(window)).abs().square()
    assert power.shape == (3, int(counts.max()), 257)
    for row, clip in enumerate(clips):
        expected = spectrogram(clip, window, frame_length=512, hop_length=160, power=2.0, dtype=np.float64)
        assert expected.shape[1] == counts[row]
        np.testing.assert_allclose(power[row, : counts[row]].numpy(), expected.T, rtol=1e-5, atol=1e-9)


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


def test_mel_power_projects_the_squared_magnitudes():
    filters = ClapFeatureExtractor().mel_filters
    bands = filter_bands(filters)
    spectrum = torch.fft.rfft(torch.randn(3, 5, 1024, dtype=torch.float64))
    expected = spectrum.abs().square() @ torch.from_numpy(filters)
    interleaved = torch.from_numpy(interleave_bins(filters))
    torch.testing.assert_close(mel_power_(spectrum.clone(), interleaved, bands), expected)
    # A float64 spectrum with float32 filters: the parts are cast, the result is float32.
    single = mel_power_(spectrum.clone(), interleaved.float(), bands)
    assert single.dtype == torch.float32
    torch.testing.assert_close(single, expected.float())
