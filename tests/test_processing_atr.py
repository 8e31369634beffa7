from __future__ import annotations

import logging

import numpy as np
import pytest
import soundfile
import torch
from datasets import Dataset, DatasetDict
from ranking_margin import clear_argmax
from tiny_models import (
    SAMPLING_RATE,
    make_processor,
    random_waveforms,
    save_tiny_clap_checkpoint,
    tiny_clap_feature_extractor,
)
from transformers import AutoProcessor, ClapFeatureExtractor, Wav2Vec2FeatureExtractor

import hf_atr  # noqa: F401  (registers AutoProcessor)
from hf_atr import AtrConfig, AtrProcessor
from hf_atr.audio_batches import model_audio_inputs
from hf_atr.data.audio import encode_wav
from hf_atr.data.audio_arrays import AudioDecodeError

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


def test_audio_and_text_in_one_call():
    processor = make_processor()
    batch = processor(audio=random_waveforms(2), text=["a dog barks", "a siren wails loudly"])
    assert batch["input_values"].shape == (2, 100, 32)
    assert batch["input_ids"].shape[0] == 2


def test_whisper_extractor_gives_input_features():
    processor = make_processor("whisper")
    assert processor.audio_input_name == "input_features"
    assert processor(audio=random_waveforms(1))["input_features"].shape == (1, 32, 100)


def test_audio_at_another_rate_is_resampled_to_the_extractor_rate():
    processor = make_processor()
    t = np.arange(8000) / 8000
    tone_8k = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    tone_16k = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
    resampled = processor(audio=[tone_8k], sampling_rate=8000)["input_values"]
    native = processor(audio=[tone_16k])["input_values"]
    # Same spectral peak in every frame: the 8 kHz tone was resampled, not read as a 880 Hz tone.
    assert resampled.shape == native.shape
    np.testing.assert_array_equal(clear_argmax(resampled[0, :90]), clear_argmax(native[0, :90]))


def test_schema_values_paths_and_bytes_decode_alike(tmp_path):
    processor = make_processor()
    waveform = random_waveforms(1)[0]
    path = tmp_path / "clip.wav"
    soundfile.write(path, waveform, SAMPLING_RATE, subtype="FLOAT")
    from_path = processor(audio=[str(path)])["input_values"]
    from_bytes = processor(
        audio=[{"bytes": encode_wav(waveform, SAMPLING_RATE, subtype="FLOAT"), "path": None}]
    )
    np.testing.assert_allclose(from_bytes["input_values"].numpy(), from_path.numpy(), atol=1e-5)


def test_a_stereo_array_is_one_clip_featurised_as_its_file(tmp_path):
    processor = make_processor()
    path = tmp_path / "stereo.wav"
    left, right = random_waveforms(2, seed=4)
    soundfile.write(path, np.stack([left, right], axis=1), 22050, subtype="PCM_16")
    frames, rate = soundfile.read(path)  # (samples, 2)
    from_file = processor(audio=str(path))["input_values"]
    assert from_file.shape[0] == 1
    for audio in (frames, frames.T, {"raw": frames, "sampling_rate": rate}):
        features = processor(audio=audio, sampling_rate=None if isinstance(audio, dict) else rate)
        torch.testing.assert_close(features["input_values"], from_file, rtol=0, atol=0)
    assert processor(audio=[frames, frames.T], sampling_rate=rate)["input_values"].shape[0] == 2


def test_missing_audio_file_is_named(tmp_path):
    with pytest.raises(AudioDecodeError, match="nowhere.wav"):
        make_processor()(audio=[str(tmp_path / "nowhere.wav")])


@pytest.mark.parametrize("caption", ["", "   ", None])
def test_empty_caption_is_rejected(caption):
    with pytest.raises(ValueError, match="Caption 1 is empty or not a string"):
        make_processor()(text=["fine", caption])


def test_nothing_to_process_is_an_error():
    with pytest.raises(ValueError, match="needs `audio`, `text`, or both"):
        make_processor()()


def test_tokenizer_knows_real_words():
    tokenizer = make_processor().tokenizer
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("a siren wails loudly")["input_ids"])
    assert "[UNK]" not in tokens and "siren" in tokens


def test_extract_audio_features_runs_once_with_dataset_map():
    processor = make_processor()
    dataset = Dataset.from_dict(
        {
            "audio_id": ["a", "b", "c"],
            "audio": [{"array": w, "sampling_rate": SAMPLING_RATE} for w in random_waveforms(3)],
        }
    )
    features = processor.extract_audio_features(dataset, batch_size=2)
    assert "audio" not in features.column_names
    assert np.asarray(features[0]["input_values"]).shape == (100, 32)
    direct = processor(audio=random_waveforms(3))["input_values"][2].numpy()
    np.testing.assert_allclose(np.asarray(features[2]["input_values"]), direct, atol=1e-5)


def test_extract_audio_features_into_a_cache_file_reuses_it(tmp_path):
    processor = make_processor()
    dataset = Dataset.from_dict(
        {
            "audio_id": ["a", "b"],
            "audio": [{"array": w, "sampling_rate": SAMPLING_RATE} for w in random_waveforms(2)],
        }
    )
    cache = tmp_path / "features.arrow"
    features = processor.extract_audio_features(dataset, cache_file_name=str(cache))
    assert cache.is_file() and features.cache_files[0]["filename"] == str(cache)  # memory-mapped, not in RAM
    other = Dataset.from_dict({"audio_id": ["x"], "audio": [{"array": random_waveforms(1, seed=5)[0],
                                                               "sampling_rate": SAMPLING_RATE}]})  # fmt: skip
    reused = processor.extract_audio_features(other, cache_file_name=str(cache))
    assert reused["audio_id"] == ["a", "b"]  # the file is read as it is: its name must say what it holds
    with pytest.raises(ValueError, match="map each split of a DatasetDict"):
        processor.extract_audio_features(DatasetDict({"train": dataset}), cache_file_name=str(cache))


def test_save_and_load_through_autoprocessor(tmp_path):
    processor = make_processor()
    processor.save_pretrained(tmp_path)
    AtrConfig(text_config={"model_type": "bert", "vocab_size": len(processor.tokenizer)}).save_pretrained(
        tmp_path
    )
    loaded = AutoProcessor.from_pretrained(tmp_path)
    assert isinstance(loaded, AtrProcessor)
    caption = "a dog barks then a beep"
    assert loaded(text=[caption])["input_ids"].tolist() == processor(text=[caption])["input_ids"].tolist()
    waveforms = random_waveforms(1)
    np.testing.assert_allclose(
        loaded(audio=waveforms)["input_values"], processor(audio=waveforms)["input_values"]
    )


@pytest.mark.parametrize("audio_family", ["ast", "whisper"])
def test_torch_feature_backend_equals_the_transformers_extractor(audio_family):
    processor = make_processor(audio_family)
    clips = [random_waveforms(1, seed=1, seconds=0.7)[0], random_waveforms(1, seed=2, seconds=1.4)[0]]
    reference = processor(audio=clips)
    batched = processor(audio=clips, feature_backend="torch", device="cpu")
    name = processor.audio_input_name
    assert batched[name].dtype == torch.float32 and batched[name].shape == reference[name].shape
    torch.testing.assert_close(batched[name], reference[name], atol=2e-4, rtol=0)
    as_numpy = processor(audio=clips, feature_backend="torch", return_tensors="np")[name]
    np.testing.assert_allclose(as_numpy, batched[name].numpy())


def test_torch_feature_backend_falls_back_for_unsupported_extractors(caplog):
    class UnlistedExtractor(Wav2Vec2FeatureExtractor):
        """A class of its own, so that its one-time log line was not printed by another test."""

    processor = AtrProcessor(UnlistedExtractor(), make_processor().tokenizer)
    clips = random_waveforms(2)
    with caplog.at_level(logging.INFO):
        batched = processor(audio=clips, feature_backend="torch")
        processor(audio=clips, feature_backend="torch")
    torch.testing.assert_close(batched["input_values"], processor(audio=clips)["input_values"])
    logged = [
        r for r in caplog.records if "No batched torch features for UnlistedExtractor" in r.getMessage()
    ]
    assert len(logged) == 1


def test_torch_feature_backend_rejects_bad_options():
    processor = make_processor()
    with pytest.raises(ValueError, match="feature_backend must be one of"):
        processor(audio=random_waveforms(1), feature_backend="numpy")
    with pytest.raises(ValueError, match=r"takes no call options, got \['do_normalize'\]"):
        processor(audio=random_waveforms(1), feature_backend="torch", do_normalize=False)


def test_extract_audio_features_with_the_torch_backend():
    processor = make_processor()
    dataset = Dataset.from_dict(
        {
            "audio_id": ["a", "b"],
            "audio": [{"array": w, "sampling_rate": SAMPLING_RATE} for w in random_waveforms(2)],
        }
    )
    features = processor.extract_audio_features(dataset, feature_backend="torch")
    reference = processor(audio=random_waveforms(2))["input_values"].numpy()
    np.testing.assert_allclose(np.asarray(features["input_values"]), reference, atol=2e-4)


def test_model_audio_inputs_renames_the_extractors_attention_mask():
    inputs = model_audio_inputs({"input_features": 1, "attention_mask": 2, "is_longer": 3})
    assert inputs == {"input_features": 1, "audio_attention_mask": 2, "is_longer": 3}


def test_from_audio_text_pretrained_pairs_an_extractor_and_a_tokenizer(tmp_path, processor):
    processor.feature_extractor.save_pretrained(tmp_path / "audio")
    processor.tokenizer.save_pretrained(tmp_path / "text")
    paired = AtrProcessor.from_audio_text_pretrained(tmp_path / "audio", tmp_path / "text")
    assert type(paired.feature_extractor) is type(processor.feature_extractor)
    assert paired.tokenizer("a dog barks")["input_ids"] == processor.tokenizer("a dog barks")["input_ids"]
    with pytest.raises(TypeError, match=r"prefixed 'audio_' or 'text_'; got \['revision'\]"):
        AtrProcessor.from_audio_text_pretrained(tmp_path / "audio", tmp_path / "text", revision="main")


def test_clap_processor_round_trip_keeps_is_longer(tmp_path):
    save_tiny_clap_checkpoint(tmp_path / "clap", fused=True)
    AtrProcessor.from_clap(tmp_path / "clap").save_pretrained(tmp_path / "atr")
    loaded = AutoProcessor.from_pretrained(tmp_path / "atr")
    features = loaded(audio=random_waveforms(2), text=["a dog"], return_tensors="pt")
    assert isinstance(loaded, AtrProcessor) and isinstance(loaded.feature_extractor, ClapFeatureExtractor)
    assert features["input_features"].shape[:2] == (2, 4) and features["is_longer"].shape == (2, 1)


def _dataset_with_bad_clips() -> Dataset:
    good = [{"bytes": encode_wav(w, SAMPLING_RATE), "path": None} for w in random_waveforms(3)]
    return Dataset.from_dict(
        {
            "audio_id": ["good0", "empty", "good1", "text", "good2"],
            "audio": [
                good[0],
                {"bytes": b"", "path": "empty.wav"},
                good[1],
                {"bytes": b"hello", "path": "text.wav"},
                good[2],
            ],  # fmt: skip
        }
    )


def test_extract_audio_features_leaves_out_undecodable_clips_and_names_them(caplog):
    processor = make_processor()
    dataset = DatasetDict({"test": _dataset_with_bad_clips()})
    with caplog.at_level(logging.WARNING):
        features = processor.extract_audio_features(dataset, batch_size=2)
    assert features["test"]["audio_id"] == ["good0", "good1", "good2"]
    assert "_audio_decode_error" not in features["test"].column_names
    assert (
        "extract_audio_features: 2 of 5 clip(s) of split 'test' cannot be decoded and are left out: empty (the "
        "audio file is empty (0 bytes).); text (the audio is unreadable or corrupt (Format not recognised).). Pass "
        "strict=True to stop at the first instead." in caplog.text
    )
    direct = processor(audio=random_waveforms(3))["input_values"][1].numpy()
    np.testing.assert_allclose(np.asarray(features["test"][1]["input_values"]), direct, atol=1e-4)
    with pytest.raises(AudioDecodeError, match=r"empty: the audio file is empty \(0 bytes\)"):
        processor.extract_audio_features(_dataset_with_bad_clips(), strict=True)


def test_extract_audio_features_names_the_clips_it_cuts_once_per_split(caplog):
    processor = make_processor()
    long_clips = random_waveforms(3, seconds=2.5)
    dataset = Dataset.from_dict(
        {
            "audio_id": ["take1", "take2", "take3", "short"],
            "audio": [
                {"array": w, "sampling_rate": SAMPLING_RATE} for w in [*long_clips, random_waveforms(1)[0]]
            ],
        }
    )
    expected = (
        "extract_audio_features on split 'train': 3 clip(s) longer than the feature extractor's 1.01-s window are "
        "cut to the first 1.01 s (their head, the same on every call): take1 (2.5 s), take2 (2.5 s), take3 (2.5 s)."
    )
    with caplog.at_level(logging.WARNING):
        processor.extract_audio_features(DatasetDict({"train": dataset}), batch_size=1)
    assert caplog.text.count("clip(s) longer than") == 1 and expected in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # one Dataset, named by split= as a DatasetDict names its splits
        processor.extract_audio_features(dataset, batch_size=1, split="train")
    assert caplog.text.count("clip(s) longer than") == 1 and expected in caplog.text


@pytest.mark.parametrize("feature_backend", ["transformers", "torch"])
def test_extract_audio_features_stores_fixed_shape_arrays(feature_backend):
    from datasets import Array2D, Array3D, List, Value

    clips = Dataset.from_dict(
        {
            "audio_id": ["a", "b", "c"],
            "audio": [{"array": w, "sampling_rate": SAMPLING_RATE} for w in random_waveforms(3)],
        }
    )
    ast = make_processor().extract_audio_features(clips, batch_size=2, feature_backend=feature_backend)
    assert ast.features["input_values"] == Array2D((100, 32), "float32")
    assert ast.features["audio_id"] == Value("string") and "_audio_decode_error" not in ast.features
    clap_processor = AtrProcessor(tiny_clap_feature_extractor(), make_processor().tokenizer)
    assert clap_processor.feature_storage_types() == {
        "input_features": Array3D((1, 101, 64), "float32"),
        "is_longer": List(Value("bool"), length=1),
    }
    assert clap_processor.varying_frame_inputs() == frozenset()
    kept = clap_processor.extract_audio_features(clips, keep_audio=True, feature_backend=feature_backend)
    assert kept.features["input_features"] == Array3D((1, 101, 64), "float32")
    assert kept.features["audio"] == clips.features["audio"]
    direct = clap_processor(audio=random_waveforms(3))
    stored = kept.with_format("numpy")[:]
    np.testing.assert_allclose(stored["input_features"], direct["input_features"].numpy(), atol=2e-4)
    assert stored["is_longer"].tolist() == direct["is_longer"].tolist()


def test_per_modality_kwargs_resample_and_reach_only_their_modality():
    """transformers 5's call (as sentence-transformers 6 makes it): the audio rate resamples, text options reach
    the tokenizer only (the PANNs extractor takes no such keyword)."""
    processor = make_processor("panns")
    clip_8k = random_waveforms(1)[0][:8000]
    expected = processor(audio=[clip_8k], sampling_rate=8000, text=["a dog barks"], max_length=4)
    got = processor(
        audio=[clip_8k],
        text=["a dog barks"],
        text_kwargs={"padding": True, "truncation": "longest_first", "max_length": 4},
        audio_kwargs={"padding": True, "sampling_rate": 8000},
        images_kwargs={},
        videos_kwargs={},
        common_kwargs={"return_tensors": "np"},
    )
    assert isinstance(got["input_features"], np.ndarray) and got["input_ids"].shape == (1, 4)
    np.testing.assert_array_equal(got["input_features"], expected["input_features"].numpy())
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
    at_own_rate = processor(audio=[clip_8k])["input_features"].numpy()
    assert np.abs(got["input_features"] - at_own_rate).max() > 1e-2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"audio_kwargs": {"padding": False}}, r"padding=False cannot be honoured"),
        ({"audio_kwargs": {"sampling_rate": 8000}, "sampling_rate": 22050}, r"Two sampling rates"),
        ({"images_kwargs": {"size": 3}}, r"audio and text only; got images_kwargs"),
        ({"common_kwargs": {"device": "cpu"}}, r"take only 'return_tensors', got \['device'\]"),
    ],
)
def test_per_modality_kwargs_it_cannot_honour_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        make_processor()(audio=random_waveforms(1), **options)
