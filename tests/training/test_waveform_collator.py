from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from synthetic_audio import synthetic_clip
from tiny_models import make_model, make_processor, tiny_tokenizer
from transformers import ClapFeatureExtractor, Wav2Vec2FeatureExtractor

from hf_atr import AtrProcessor
from hf_atr.data.audio import decode_audio, encode_wav
from hf_atr.data.schema import atr_features, finalize_audio_column
from hf_atr.objectives.batch import METADATA_KEYS
from hf_atr.training.collator import CaptionPairDataset
from hf_atr.training.device_features import featurize_waveforms
from hf_atr.training.multilingual import MultilingualCollator
from hf_atr.training.waveform_collator import WaveformCollator, item_seed

FILE_RATE = 44100


def _clips(seconds: list[float], rate: int = FILE_RATE) -> Dataset:
    """Clips stored as 44.1-kHz WAV bytes in the shared schema, two captions each."""
    rows = {"audio": [], "audio_id": [], "captions": []}
    for index, duration in enumerate(seconds):
        waveform = synthetic_clip(int(duration * rate), rate, seed=index)
        rows["audio"].append(
            {"bytes": encode_wav(waveform, rate, subtype="FLOAT"), "path": f"clip{index}.wav"}
        )
        rows["audio_id"].append(f"clip{index}")
        rows["captions"].append([f"a sound number {index}", f"sound {index} again"])
    return finalize_audio_column(Dataset.from_dict(rows, features=atr_features()))


def _batches(collator, dataset, num_workers, batch_size=3):
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, collate_fn=collator, num_workers=num_workers, shuffle=False
    )
    return list(loader)


def test_worker_waveforms_featurised_on_the_device_equal_the_processor_and_train_the_model():
    processor = make_processor("ast")
    clips = _clips([0.5, 1.5, 2.0])
    pairs = CaptionPairDataset(clips)
    collator = WaveformCollator(processor, crop="start")
    batches = _batches(collator, pairs, num_workers=2)
    assert len(batches) == 2 and batches[0]["waveforms"].dtype == torch.float32
    window = collator.features.window_samples
    assert int(batches[0]["waveform_lengths"].max()) <= window
    model = make_model("ast", processor=processor)
    for batch in batches:
        inputs = featurize_waveforms(batch, collator.features, device="cpu")
        assert "waveforms" not in inputs and "feature_random_choices" not in inputs
        clip_indices = [int(audio_id.removeprefix("clip")) for audio_id in inputs["audio_ids"]]
        reference = processor(audio=[clips[index]["audio"] for index in clip_indices])["input_values"]
        torch.testing.assert_close(inputs["input_values"], reference, atol=2e-4, rtol=0)
        outputs = model(**{name: value for name, value in inputs.items() if name not in METADATA_KEYS})
        assert torch.isfinite(outputs.audio_embeds).all()


def test_random_crops_are_reproducible_whatever_the_workers_and_change_with_the_epoch():
    processor = make_processor("ast")
    pairs = CaptionPairDataset(_clips([0.5, 2.0, 3.0]))
    collator = WaveformCollator(processor, seed=5)
    in_workers = _batches(collator, pairs, num_workers=2)
    in_process = _batches(collator, pairs, num_workers=0)
    for first, second in zip(in_workers, in_process):
        torch.testing.assert_close(first["waveforms"], second["waveforms"], rtol=0, atol=0)
    pairs.set_epoch(1)  # what the Trainer's data loader calls; the items carry their epoch to the workers
    next_epoch = _batches(collator, pairs, num_workers=2)
    waveforms = torch.cat([batch["waveforms"] for batch in in_workers])
    moved = torch.cat([batch["waveforms"] for batch in next_epoch])
    # The 0.5-s clip (items 0 and 1) is shorter than the window and never cut; the longer clips move.
    torch.testing.assert_close(waveforms[:2], moved[:2], rtol=0, atol=0)
    assert all(not torch.equal(waveforms[item], moved[item]) for item in range(2, 6))
    # Each crop is a window of the decoded clip.
    decoded = decode_audio(pairs[2]["audio"], processor.sampling_rate)
    crop = waveforms[2, : collator.features.window_samples].numpy()
    offsets = [
        o for o in range(len(decoded) - len(crop) + 1) if np.array_equal(decoded[o : o + len(crop)], crop)
    ]
    assert len(offsets) == 1 and offsets[0] > 0
    # Rows without an epoch (bare clips) take the collator's own.
    clips = [{key: value for key, value in pairs[item].items() if key != "epoch"} for item in range(2, 4)]
    first = collator(clips)["waveforms"]
    collator.set_epoch(1)
    torch.testing.assert_close(collator(clips)["waveforms"], moved[2:4], rtol=0, atol=0)
    assert not torch.equal(first, moved[2:4])


def _clap_processor(truncation: str) -> AtrProcessor:
    return AtrProcessor(ClapFeatureExtractor(max_length_s=1, truncation=truncation), tiny_tokenizer())


def test_clap_fusion_keeps_whole_clips_and_draws_its_crops_in_the_worker():
    processor = _clap_processor("fusion")
    clips = _clips([0.4, 2.5])
    collator = WaveformCollator(processor)
    (batch,) = _batches(collator, clips, num_workers=2)
    decoded = [decode_audio(row["audio"], 48000) for row in clips]
    assert batch["waveform_lengths"].tolist() == [len(waveform) for waveform in decoded]
    choices = batch["feature_random_choices"]
    assert choices["is_longer"].tolist() == [False, True] and choices["fusion_starts"][1].max() > 0
    inputs = featurize_waveforms(batch, collator.features)
    assert inputs["input_features"].shape == (2, 4, 101, 64) and inputs["is_longer"].tolist() == [
        [False],
        [True],
    ]
    same_choices = collator.features.featurize_arrays(decoded, random_source=None)
    torch.testing.assert_close(inputs["input_features"][0], same_choices["input_features"][0])
    (again,) = _batches(collator, clips, num_workers=0)
    torch.testing.assert_close(again["feature_random_choices"], choices)


def test_clap_rand_trunc_crops_in_the_worker_and_still_marks_the_clip_longer():
    processor = _clap_processor("rand_trunc")
    clips = _clips([0.4, 2.5])
    collator = WaveformCollator(processor, crop="start")
    (batch,) = _batches(collator, clips, num_workers=0)
    assert batch["waveform_lengths"].tolist() == [int(0.4 * 48000), 48000]
    inputs = featurize_waveforms(batch, collator.features)
    assert inputs["is_longer"].tolist() == [[False], [True]]
    reference = processor.feature_extractor(
        [batch["waveforms"][1].numpy()], sampling_rate=48000, return_tensors="pt"
    )["input_features"]
    torch.testing.assert_close(inputs["input_features"][1:], reference, atol=1e-3, rtol=0)


def test_bad_configurations_and_batches_are_named():
    unsupported = AtrProcessor(Wav2Vec2FeatureExtractor(), tiny_tokenizer())
    with pytest.raises(ValueError, match="Wav2Vec2FeatureExtractor has none. Use AtrDataCollator"):
        WaveformCollator(unsupported)
    with pytest.raises(ValueError, match="crop must be one of"):
        WaveformCollator(make_processor("ast"), crop="middle")
    collator = WaveformCollator(make_processor("ast"))
    with pytest.raises(ValueError, match="Clip 'x' has no 'audio' column"):
        collator([{"audio_id": "x", "captions": ["a dog"], "input_values": [0.0]}])


def test_item_seeds_are_stable_and_distinct():
    assert item_seed(0, 1, "clip", "eng", 2) == item_seed(0, 1, "clip", "eng", 2) < 2**63
    seeds = {item_seed(0, epoch, "clip", "eng", index) for epoch in range(3) for index in range(3)}
    assert len(seeds) == 9


def test_multilingual_batches_take_their_audio_from_the_waveform_collator():
    processor = make_processor("ast")
    clips = _clips([0.5, 2.0]).add_column(
        "translations", [{"fra": [f"un son {i}", f"encore {i}"]} for i in range(2)]
    )
    waveforms = WaveformCollator(processor, seed=3)
    collator = MultilingualCollator(processor, languages=["eng", "fra"], waveforms=waveforms)
    assert collator.features is waveforms.features
    (batch,) = _batches(
        collator, [dict(clips[index], caption_index=0) for index in range(2)], 0, batch_size=2
    )
    assert batch["input_ids"].shape[0] == 4 and batch["captions_per_audio"] == 2
    assert batch["waveform_cropped"].tolist() == [False, True]
    inputs = featurize_waveforms(batch, collator.features)
    assert inputs["input_values"].shape[0] == 2


def _pcm16_clips(channels: list[int], rate: int = 16000) -> Dataset:
    """Clips stored as 16-bit WAV at ``rate`` (the tiny AST extractor's rate by default), 0.6-2.2 s long."""
    rows = {"audio": [], "audio_id": [], "captions": []}
    for index, count in enumerate(channels):
        waveform = synthetic_clip(int((0.6 + 0.4 * index) * rate), rate, seed=index)
        stacked = np.stack([waveform, -0.5 * waveform]) if count == 2 else waveform
        rows["audio"].append({"bytes": encode_wav(stacked, rate), "path": f"clip{index}.wav"})
        rows["audio_id"].append(f"clip{index}")
        rows["captions"].append([f"a sound number {index}", f"sound {index} again"])
    return finalize_audio_column(Dataset.from_dict(rows, features=atr_features()))


def _float_path_batches(monkeypatch, collator, dataset, num_workers):
    """The batches the collator made before 16-bit PCM was kept as stored: every clip decoded to float32."""
    from hf_atr.training import waveform_collator

    with monkeypatch.context() as patched:
        patched.setattr(
            waveform_collator,
            "decode_pcm16",
            lambda value, rate, *, source=None: decode_audio(value, rate, source=source),
        )
        return _batches(collator, dataset, num_workers)


def test_mono_16_bit_clips_travel_as_int16_and_featurise_exactly_as_the_float_path(monkeypatch):
    processor = make_processor("ast")
    pairs = CaptionPairDataset(_pcm16_clips([1, 1, 1, 1]))
    collator = WaveformCollator(processor, seed=2)  # random crops: the 1.8-s and 2.2-s clips are cut
    as_stored = _batches(collator, pairs, num_workers=2)
    as_float = _float_path_batches(monkeypatch, collator, pairs, num_workers=0)
    for stored, decoded in zip(as_stored, as_float, strict=True):
        assert stored["waveforms"].dtype == torch.int16 and decoded["waveforms"].dtype == torch.float32
        assert 2 * stored["waveforms"].nbytes == decoded["waveforms"].nbytes
        assert np.array_equal(stored["waveform_lengths"], decoded["waveform_lengths"])
        assert torch.equal(
            stored["waveforms"].float() / 32768, decoded["waveforms"]
        )  # same crops, same samples
        from_int16 = featurize_waveforms(stored, collator.features, device="cpu")
        from_float = featurize_waveforms(decoded, collator.features, device="cpu")
        assert torch.equal(from_int16["input_values"], from_float["input_values"])
    assert any(bool(batch["waveform_cropped"].any()) for batch in as_stored)


def test_a_batch_with_a_clip_that_needs_converting_is_sent_in_float32(monkeypatch):
    processor = make_processor("ast")
    clips = _pcm16_clips([1, 2, 1])  # the stereo clip is mixed down in float
    collator = WaveformCollator(processor, crop="start")
    (mixed,) = _batches(collator, clips, num_workers=0)
    (as_float,) = _float_path_batches(monkeypatch, collator, clips, num_workers=0)
    assert mixed["waveforms"].dtype == torch.float32
    assert torch.equal(mixed["waveforms"], as_float["waveforms"])
    scaled_in_worker = WaveformCollator(processor, crop="start", int16_batches=False)
    (mono,) = _batches(scaled_in_worker, _pcm16_clips([1, 1]), num_workers=0)
    (mono_float,) = _float_path_batches(monkeypatch, scaled_in_worker, _pcm16_clips([1, 1]), num_workers=0)
    assert mono["waveforms"].dtype == torch.float32 and torch.equal(
        mono["waveforms"], mono_float["waveforms"]
    )
    resampled = _pcm16_clips([1], rate=22050)  # another rate: resampled in float
    (batch,) = _batches(collator, resampled, num_workers=0)
    assert batch["waveforms"].dtype == torch.float32
