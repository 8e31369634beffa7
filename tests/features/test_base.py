from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from synthetic_audio import synthetic_clips
from transformers import ASTFeatureExtractor, ClapFeatureExtractor, WhisperFeatureExtractor
from transformers.audio_utils import power_to_db as numpy_power_to_db

from hf_atr.features import base, batched_features_for
from hf_atr.features.spectrogram import pad_waveforms, power_to_db_

EXTRACTORS = {
    "ast": ASTFeatureExtractor(max_length=120),
    "whisper": WhisperFeatureExtractor(feature_size=40, chunk_length=1),
    "clap": ClapFeatureExtractor(max_length_s=1),
}


@pytest.mark.parametrize("name", EXTRACTORS)
def test_chunked_cpu_batches_equal_one_whole_batch(name, monkeypatch):
    # Accelerators featurise the batch whole; the CPU goes a few clips at a time. Same numbers either way.
    extractor = EXTRACTORS[name]
    features = batched_features_for(extractor)
    rate = extractor.sampling_rate
    clips = synthetic_clips([rate // 2, 2 * rate, rate, 3 * rate // 2], rate)
    choices = features.draw_random_choices(
        torch.tensor([len(clip) for clip in clips]), torch.Generator().manual_seed(0)
    )
    waveforms, lengths = pad_waveforms(clips, dtype=torch.float64)
    monkeypatch.setattr(base, "CPU_FRAMES_PER_CHUNK", 1)
    one_by_one = features(waveforms, lengths, random_choices=choices)
    monkeypatch.setattr(
        base.BatchedFeatureExtractor, "chunks", staticmethod(lambda batch, frames, device: [slice(0, batch)])
    )
    whole = features(waveforms, lengths, random_choices=choices)
    torch.testing.assert_close(one_by_one, whole, rtol=0, atol=1e-12)


def test_chunks_cover_the_batch_in_cache_sized_groups():
    chunks = base.BatchedFeatureExtractor.chunks(10, base.CPU_FRAMES_PER_CHUNK // 3, torch.device("cpu"))
    assert chunks == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10)]
    assert base.BatchedFeatureExtractor.chunks(10, 10**6, torch.device("cpu"))[0] == slice(0, 1)


def test_pickled_features_carry_their_arrays_not_device_copies():
    features = batched_features_for(EXTRACTORS["ast"])
    clips = synthetic_clips([8000], 16000)
    before = features.featurize_arrays(clips)
    assert features._constants
    restored = pickle.loads(pickle.dumps(features))
    assert restored._constants == {}
    torch.testing.assert_close(restored.featurize_arrays(clips), before)


def test_power_to_db_in_place_equals_transformers():
    power = np.array([[0.0, 1e-12, 1e-10, 3.7e-4, 1.0, 42.0]])
    np.testing.assert_allclose(
        power_to_db_(torch.from_numpy(power.copy()), 1e-10).numpy(),
        numpy_power_to_db(power, 1.0, 1e-10),
        rtol=1e-12,
    )


@pytest.mark.parametrize("name", EXTRACTORS)
def test_every_family_keeps_its_extractors_filterbank_and_window(name):
    # register_mel_filterbank: the filterbank as given, its bands covering every non-zero bin, the window.
    extractor = EXTRACTORS[name]
    features = batched_features_for(extractor)
    filters = np.asarray(extractor.mel_filters, dtype=np.float64)
    like = torch.zeros((), dtype=torch.float64)
    np.testing.assert_array_equal(features.constant("mel_filters", like).numpy(), filters)
    assert features.num_mel_bins == filters.shape[1]
    covered = np.zeros(filters.shape, dtype=bool)
    for first_filter, end_filter, first_bin, end_bin in features.bands:
        covered[first_bin:end_bin, first_filter:end_filter] = True
    assert not (filters[~covered] != 0).any()
    window = features.constant("window", like).numpy()
    frame_length = {
        "ast": 400,
        "whisper": EXTRACTORS["whisper"].n_fft,
        "clap": EXTRACTORS["clap"].fft_window_size,
    }
    assert window.shape == (frame_length[name],) and window.max() == pytest.approx(1.0, abs=1e-3)
