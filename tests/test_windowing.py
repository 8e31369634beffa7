"""hf_atr.windowing: each extractor's window (checked against what the extractor itself reads), window
bounds against brute-force coverage, pooling against its definition, short clips padded and cut clips named."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from tiny_models import SAMPLING_RATE, make_processor, tiny_clap_feature_extractor, tiny_feature_extractor
from transformers import PeAudioFeatureExtractor, Wav2Vec2FeatureExtractor, WhisperFeatureExtractor

from hf_atr import windowing
from hf_atr.features.pe_audio_waveform import RAW_WAVEFORM_WINDOW_SECONDS
from hf_atr.windowing import (
    MIN_CLIP_SECONDS,
    ExtractorWindow,
    Windowing,
    collect_cut_clips,
    extractor_window,
    minimum_samples,
    moment_windowing,
    pool_window_embeddings,
    window_bounds,
)


def _features(extractor, waveform):
    name = "input_values" if "input_values" in extractor.model_input_names else "input_features"
    return extractor([waveform], sampling_rate=extractor.sampling_rate, return_tensors="np")[name]


@pytest.mark.parametrize("family", ["ast", "whisper", "panns"])
def test_extractors_that_cut_read_exactly_their_window_from_the_start(family):
    extractor = tiny_feature_extractor(family)
    window = extractor_window(extractor)
    assert window.cuts_long_clips and window.sampling_rate == SAMPLING_RATE
    waveform = np.random.default_rng(0).standard_normal(3 * window.samples).astype(np.float32)
    # What follows the window never reaches the features; the window's last sample does.
    np.testing.assert_array_equal(
        _features(extractor, waveform), _features(extractor, waveform[: window.samples])
    )
    shorter = waveform[: window.samples].copy()
    shorter[-1] = 0.0
    assert not np.array_equal(_features(extractor, shorter), _features(extractor, waveform[: window.samples]))


def test_clap_rand_trunc_cuts_long_clips_and_fusion_handles_long_audio_itself():
    rand_trunc, fusion = (
        extractor_window(tiny_clap_feature_extractor()),
        extractor_window(tiny_clap_feature_extractor(fused=True)),
    )
    assert rand_trunc.samples == fusion.samples == SAMPLING_RATE  # max_length_s = 1
    assert rand_trunc.cuts_long_clips
    assert not fusion.cuts_long_clips
    assert not Windowing().splits_clips(tiny_clap_feature_extractor(fused=True))
    assert Windowing(window_seconds=0.5).splits_clips(tiny_clap_feature_extractor(fused=True))


def test_an_extractor_without_window_reads_the_whole_clip():
    extractor = Wav2Vec2FeatureExtractor(sampling_rate=SAMPLING_RATE)
    window = extractor_window(extractor)
    assert window.samples is None and not window.cuts_long_clips
    assert Windowing().samples(extractor) is None
    assert Windowing(window_seconds=2.0).samples(extractor) == (32000, 16000)


def test_pe_audio_s_window_is_its_hop_aligned_search_window_and_its_old_home_warns():
    extractor = PeAudioFeatureExtractor(sampling_rate=48000, hop_length=1920)
    window = extractor_window(extractor)
    assert window == ExtractorWindow(480000, False, 48000)  # 10 s, a multiple of the hop
    with pytest.deprecated_call(
        match="moved to `hf_atr.features.pe_audio_waveform.RAW_WAVEFORM_WINDOW_SECONDS`"
    ):
        assert windowing.RAW_WAVEFORM_WINDOW_SECONDS == RAW_WAVEFORM_WINDOW_SECONDS == 10.0
    with pytest.raises(AttributeError, match="has no attribute 'WINDOW'"):
        getattr(windowing, "WINDOW")  # noqa: B009


def test_windowing_defaults_to_the_extractor_window_with_half_overlap_and_checks_its_values():
    extractor = tiny_feature_extractor("ast")
    window = extractor_window(extractor).samples
    assert Windowing().samples(extractor) == (window, round(window / 2))
    assert Windowing(window_seconds=0.5, hop_seconds=0.25).samples(extractor) == (8000, 4000)
    assert Windowing(window_seconds=0.5, hop_seconds=0.25, pooling="max").describe(extractor) == {
        "pooling": "max",
        "window_seconds": 0.5,
        "hop_seconds": 0.25,
    }
    with pytest.raises(ValueError, match=r"longer than the 1\.015-s window ASTFeatureExtractor reads"):
        Windowing(window_seconds=2.0).samples(extractor)
    with pytest.raises(ValueError, match="hop_seconds=0.8 must be positive and at most the window"):
        Windowing(window_seconds=0.5, hop_seconds=0.8).samples(extractor)
    with pytest.raises(ValueError, match=r"pooling must be one of \('mean', 'max'\), got 'median'"):
        Windowing(pooling="median")
    with pytest.raises(ValueError, match="window_seconds must be a positive number of seconds, got -1"):
        Windowing(window_seconds=-1)


@pytest.mark.parametrize(
    ("samples", "window", "hop"), [(10, 4, 2), (11, 4, 2), (100, 30, 7), (30, 30, 15), (5, 30, 15)]
)
def test_window_bounds_cover_every_sample_with_full_windows(samples, window, hop):
    bounds = window_bounds(samples, window, hop)
    covered = np.zeros(samples, dtype=bool)
    for start, stop in bounds:
        covered[start:stop] = True
    assert covered.all()
    assert bounds[0][0] == 0 and bounds[-1][1] == samples
    assert all(stop - start == min(window, samples) for start, stop in bounds)
    starts = [start for start, _ in bounds]
    assert starts == sorted(set(starts))
    # Regular starts every hop, plus at most one window aligned to the end.
    assert all(start % hop == 0 for start in starts[:-1])
    assert window_bounds(samples, None, None) == [(0, samples)]


def test_pooling_is_the_normalised_mean_or_max_of_the_normalised_windows():
    embeds = torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    unit = embeds / embeds.norm(dim=1, keepdim=True)
    mean = unit.mean(0)
    torch.testing.assert_close(pool_window_embeddings(embeds, "mean"), (mean / mean.norm()).float())
    maximum = unit.max(0).values
    torch.testing.assert_close(pool_window_embeddings(embeds, "max"), (maximum / maximum.norm()).float())
    with pytest.raises(ValueError, match=r"window_embeds must be \(windows >= 1, dim\), got \(0, 8\)"):
        pool_window_embeddings(torch.zeros(0, 8))


def test_unnormalised_pooling_keeps_dot_product_scores_linear():
    """``normalize=False`` (a ``scoring="dot"`` head): the mean's dot product with a caption is the mean of the
    windows' dot products, and the max is the element-wise max of the rows as they are."""
    generator = torch.Generator().manual_seed(1)
    embeds = torch.randn(4, 6, generator=generator) * 3
    caption = torch.randn(6, generator=generator)
    pooled = pool_window_embeddings(embeds, "mean", normalize=False)
    torch.testing.assert_close(pooled @ caption, (embeds @ caption).mean())
    torch.testing.assert_close(pool_window_embeddings(embeds, "max", normalize=False), embeds.max(0).values)


def test_a_clip_shorter_than_one_frame_is_padded_and_named(caplog):
    processor = make_processor()  # AST: a 10-ms clip used to fail with "negative dimensions are not allowed"
    assert minimum_samples(processor.feature_extractor) == round(MIN_CLIP_SECONDS * SAMPLING_RATE) == 400
    click = np.full(160, 0.5, dtype=np.float32)
    with caplog.at_level(logging.WARNING):
        features = processor(audio=[click], audio_names=["click.wav"])["input_values"]
    assert features.shape == (1, 100, 32) and torch.isfinite(features).all()
    assert (
        "click.wav: the clip is 10.0 ms long, shorter than the 25.0 ms the feature extractor needs for one frame; "
        "it is padded with silence to that length." in caplog.text
    )
    padded = np.concatenate([click, np.zeros(240, np.float32)])
    torch.testing.assert_close(features, processor(audio=[padded])["input_values"])


def test_clips_the_extractor_cuts_are_named_per_call_or_once_per_job(caplog):
    processor = make_processor()
    window = extractor_window(processor.feature_extractor)
    long_clip = np.zeros(3 * SAMPLING_RATE, dtype=np.float32)
    with caplog.at_level(logging.WARNING):
        processor(audio=[long_clip, long_clip[:8000]], audio_names=["field.wav", "short.wav"])
    assert (
        "1 clip(s) longer than the feature extractor's 1.01-s window are cut to the first 1.01 s "
        "(their head, the same on every call): field.wav (3.0 s)" in caplog.text
    )
    assert "short.wav" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING), collect_cut_clips("Encoding split 'test'", window) as collected:
        for name in ("a.wav", "b.wav"):
            processor(audio=[long_clip], audio_names=[name])
        assert caplog.text == ""  # collected, reported once at the end of the job
    assert collected.names == ["a.wav", "b.wav"]
    assert caplog.text.count("Encoding split 'test': 2 clip(s) longer than") == 1
    # A job inside another (the training split's extraction inside `hf-atr train`'s count) hands its clips on;
    # an outer job that only counts logs nothing.
    caplog.clear()
    with caplog.at_level(logging.WARNING), collect_cut_clips("training", window, log=False) as outer:
        with collect_cut_clips("extract_audio_features", window):
            processor(audio=[long_clip], audio_names=["c.wav"])
        processor(audio=[long_clip], audio_names=["d.wav"])
    assert outer.names == ["c.wav", "d.wav"]
    assert (
        caplog.text.count("clip(s) longer than") == 1 and "extract_audio_features: 1 clip(s)" in caplog.text
    )


def test_moment_windowing_keeps_the_window_and_takes_a_fine_hop():
    extractor = WhisperFeatureExtractor(feature_size=32, sampling_rate=SAMPLING_RATE, chunk_length=10)
    assert moment_windowing(Windowing(), extractor) == Windowing(window_seconds=10.0, hop_seconds=1.0)
    coarse_window = Windowing(window_seconds=1.0)  # its own hop, 0.5 s, is finer than the default
    assert moment_windowing(coarse_window, extractor).hop_seconds == 0.5
    with pytest.raises(
        ValueError, match=r"hop_seconds=12.0 must be positive and at most the window \(10.000 s\)"
    ):
        moment_windowing(Windowing(), extractor, 12.0)
    with pytest.raises(ValueError) as error:
        moment_windowing(Windowing(), Wav2Vec2FeatureExtractor())
    assert str(error.value) == (
        "Wav2Vec2FeatureExtractor reads whole clips (it has no window), so a recording would be scored as one piece "
        "with no time inside it; give the pipeline a window, e.g. windowing=Windowing(window_seconds=10.0)."
    )
