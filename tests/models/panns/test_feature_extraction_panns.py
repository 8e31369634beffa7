from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from panns_reference import torchlibrosa_front_end
from tiny_models import tiny_panns_feature_extractor

from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor

PANNS_32K = dict(sampling_rate=32000, n_fft=1024, hop=320, mel_bins=64, fmin=50.0, fmax=14000.0)


def waveforms(count: int, samples: int, seed: int = 0) -> np.ndarray:
    return 0.1 * np.random.default_rng(seed).standard_normal((count, samples))


def test_log_mel_equals_torchlibrosa_front_end_in_float64():
    extractor = PannsFeatureExtractor()
    spectrogram, logmel = torchlibrosa_front_end(**PANNS_32K)
    clips = waveforms(2, 32000 + 123)
    with torch.no_grad():
        reference = logmel.double()(spectrogram.double()(torch.from_numpy(clips)))[:, 0].numpy()
    ours = extractor.log_mel_spectrogram(list(clips))
    assert ours.dtype == np.float64 and ours.shape == reference.shape == (2, 1 + (32000 + 123) // 320, 64)
    assert np.abs(ours - reference).max() < 1e-4


def test_stft_kernels_and_mel_filters_equal_torchlibrosa_weights():
    extractor = tiny_panns_feature_extractor()
    spectrogram, logmel = torchlibrosa_front_end(16000, 512, 160, 32, 50.0, 8000.0)
    real, imag = extractor.stft_kernels()
    np.testing.assert_allclose(real, spectrogram.stft.conv_real.weight.numpy(), atol=1e-6)
    np.testing.assert_allclose(imag, spectrogram.stft.conv_imag.weight.numpy(), atol=1e-6)
    np.testing.assert_allclose(extractor.mel_filters, logmel.melW.numpy(), rtol=1e-5, atol=1e-8)


def test_call_pads_to_max_length_with_silence_and_returns_float32():
    extractor = tiny_panns_feature_extractor()  # 1 s at 16 kHz, hop 160
    short, long = waveforms(1, 8000)[0], waveforms(1, 20000, seed=1)[0]
    features = extractor([short, long], sampling_rate=16000, return_tensors="pt")["input_features"]
    assert features.dtype == torch.float32 and features.shape == (2, 101, 32)
    np.testing.assert_allclose(
        features[1].numpy(), extractor.log_mel_spectrogram([long[:16000]])[0], rtol=0, atol=1e-4
    )
    # Frames whose window lies wholly in the zero padding are digital silence: 10·log10(1e-10) = −100 dB.
    assert torch.all(features[0, 8000 // 160 + 4 :] == -100.0)
    np.testing.assert_allclose(
        features[0].numpy(), extractor.log_mel_spectrogram([np.pad(short, (0, 8000))])[0], atol=1e-4
    )


def test_padding_longest_and_single_clip():
    extractor = tiny_panns_feature_extractor()
    batch = extractor(
        [waveforms(1, 4000)[0], waveforms(1, 6400)[0]],
        sampling_rate=16000,
        padding="longest",
        return_tensors="np",
    )
    assert batch["input_features"].shape == (2, 1 + 6400 // 160, 32)
    single = extractor(waveforms(1, 3200)[0], sampling_rate=16000, padding="longest", return_tensors="np")
    assert single["input_features"].shape == (1, 21, 32)


@pytest.mark.parametrize(
    ("audio", "sampling_rate", "message"),
    [
        (np.zeros(16000), 32000, "expects 16000 Hz audio, got 32000 Hz"),
        ([np.zeros(16000), np.zeros((2, 16000))], 16000, r"Clip 1 has shape \(2, 16000\)"),
        ([np.zeros(16000), np.zeros(0)], 16000, "Clip 1 is empty"),
        ([], 16000, "no audio"),
    ],
)
def test_bad_audio_is_named(audio, sampling_rate, message):
    with pytest.raises(ValueError, match=message):
        tiny_panns_feature_extractor()(audio, sampling_rate=sampling_rate)


def test_unknown_options_are_refused_and_a_missing_rate_is_assumed():
    extractor = tiny_panns_feature_extractor()
    with pytest.raises(TypeError, match="return_attention_mask"):
        extractor(np.zeros(16000), sampling_rate=16000, return_attention_mask=True)
    assert extractor(np.zeros(16000), return_tensors="np")["input_features"].shape == (1, 101, 32)


def test_frequency_max_above_nyquist_is_refused():
    with pytest.raises(ValueError, match="above the Nyquist frequency of 16000 Hz"):
        PannsFeatureExtractor(sampling_rate=16000, frequency_max=14000.0)


def test_save_and_load_round_trip(tmp_path):
    extractor = tiny_panns_feature_extractor()
    extractor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert "mel_filters" not in saved and "window" not in saved
    reloaded = PannsFeatureExtractor.from_pretrained(tmp_path)
    clip = waveforms(1, 16000)[0]
    np.testing.assert_array_equal(
        reloaded(clip, sampling_rate=16000)["input_features"],
        extractor(clip, sampling_rate=16000)["input_features"],
    )
    np.testing.assert_array_equal(reloaded.mel_filters, extractor.mel_filters)
