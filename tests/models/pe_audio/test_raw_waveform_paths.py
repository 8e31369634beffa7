"""A converted tiny PE-Audio model on every path raw audio takes: the on-device features and the waveform
collator, training on the device, windowed encoding, evaluation, indexing and search, and the search page's answers.

PE-Audio reads 48-kHz waveforms that its extractor reflect-pads to a multiple of 1920 samples (counted valid) with a
``padding_mask`` its audio encoder takes (not ``attention_mask``). Clips here are a few seconds long: the waveform
encoder runs at the full 48 kHz.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from pe_audio_planting import plant_caption_embeddings, plant_tone_window_caption
from ranking_margin import clear_argmax, clear_rank_of
from synthetic_audio import recording_with_event, synthetic_clip
from tiny_models import PE_AUDIO_HOP, PE_AUDIO_SAMPLING_RATE, save_converted_pe_audio, training_args

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer, RetrievalEvaluator
from hf_atr.app.results import search_text
from hf_atr.audio_encoding import encode_audio_clips, encode_audio_windows
from hf_atr.cli import main
from hf_atr.commands.common import load_retrieval_pipeline
from hf_atr.data.audio import decode_audio, encode_wav
from hf_atr.data.schema import atr_features, finalize_audio_column
from hf_atr.features import PeAudioWaveformFeatures
from hf_atr.objectives.batch import METADATA_KEYS
from hf_atr.training.collator import CaptionPairDataset
from hf_atr.training.device_features import featurize_waveforms
from hf_atr.training.waveform_collator import WaveformCollator
from hf_atr.windowing import Windowing, extractor_window

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

RATE = PE_AUDIO_SAMPLING_RATE
CLIP_SECONDS = (0.7, 1.3, 2.25, 0.9)
"""None of these is a multiple of the 40-ms hop: every clip is reflect-padded."""
CAPTIONS = ("a dog barks", "birds sing", "a siren wails", "rain on a roof")


@pytest.fixture(scope="module")
def pe_dir(tmp_path_factory):
    return save_converted_pe_audio(tmp_path_factory.mktemp("pe"))


@pytest.fixture(scope="module")
def converted(pe_dir):
    return AtrDualEncoderModel.from_pretrained(pe_dir).eval(), AtrProcessor.from_pretrained(pe_dir)


def _waveforms() -> list[np.ndarray]:
    return [synthetic_clip(int(seconds * RATE), RATE, seed=row) for row, seconds in enumerate(CLIP_SECONDS)]


def _dataset(subtype: str = "PCM_16") -> Dataset:
    """The clips as 48-kHz WAV files in the shared schema (16-bit PCM: read as int16 by the collator)."""
    rows = {
        "audio": [{"bytes": encode_wav(w, RATE, subtype=subtype), "path": None} for w in _waveforms()],
        "audio_id": [f"clip{row}" for row in range(len(CLIP_SECONDS))],
        "captions": [[caption] for caption in CAPTIONS],
    }
    return finalize_audio_column(Dataset.from_dict(rows, features=atr_features()))


def test_the_extractor_reads_whole_clips_and_windowed_search_cuts_hop_aligned_windows(converted):
    _, processor = converted
    window = extractor_window(processor.feature_extractor)
    assert not window.cuts_long_clips and window.samples == 480_000 and window.samples % PE_AUDIO_HOP == 0
    assert Windowing().samples(processor.feature_extractor) == (480_000, 240_000)
    assert not Windowing().splits_clips(processor.feature_extractor)  # its own embedding of a whole clip


def test_collator_batches_featurised_on_the_device_equal_the_processor_bit_for_bit(converted):
    model, processor = converted
    dataset = _dataset()
    collator = WaveformCollator(processor, crop="start", int16_batches=True)
    assert isinstance(collator.features, PeAudioWaveformFeatures)
    assert collator.crop_description().startswith("read whole: the feature extractor has no window")
    loader = torch.utils.data.DataLoader(
        CaptionPairDataset(dataset), batch_size=4, collate_fn=collator, num_workers=2
    )
    (batch,) = list(loader)
    assert batch["waveforms"].dtype == torch.int16 and not batch["waveform_cropped"].any()
    inputs = featurize_waveforms(batch, collator.features, device="cpu")
    decoded = processor.decode([row["audio"] for row in dataset])
    expected = processor(audio=decoded, return_tensors="pt")
    assert set(expected) == {"input_values", "audio_attention_mask"}
    for name in expected:
        assert torch.equal(inputs[name], expected[name]), name
    valid = [-(-round(seconds * RATE) // PE_AUDIO_HOP) * PE_AUDIO_HOP for seconds in CLIP_SECONDS]
    assert inputs["audio_attention_mask"].sum(dim=1).tolist() == valid
    with torch.no_grad():
        on_device = model(**{name: value for name, value in inputs.items() if name not in METADATA_KEYS})
        reference = model(**processor(audio=decoded, text=list(CAPTIONS), return_tensors="pt"))
    torch.testing.assert_close(on_device.logits_per_audio, reference.logits_per_audio, rtol=0, atol=0)


def test_the_processor_s_torch_backend_gives_the_extractor_s_inputs(converted):
    _, processor = converted
    waveforms = _waveforms()
    by_torch = processor(audio=waveforms, feature_backend="torch")
    by_extractor = processor(audio=waveforms)
    for name in by_extractor:
        assert torch.equal(by_torch[name], by_extractor[name]), name


@pytest.mark.slow
def test_trains_on_the_device_from_waveforms_with_the_sigmoid_objective(converted, tmp_path):
    model, processor = converted
    trained = AtrDualEncoderModel.from_pretrained(model.name_or_path)
    before = trained.audio_projection.proj.weight.detach().clone()
    trainer = AtrTrainer(
        model=trained,
        args=training_args(tmp_path, per_device_train_batch_size=4, max_steps=2, logging_steps=1),
        train_dataset=CaptionPairDataset(_dataset()),
        processing_class=processor,
        audio_features="device",
    )
    assert isinstance(trainer.data_collator, WaveformCollator)
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(np.isfinite(losses)) and np.isfinite(result.training_loss)
    assert not torch.equal(trained.audio_projection.proj.weight, before)


def test_windowed_encoding_pools_dot_product_embeddings_without_normalising_them(converted):
    model, processor = converted
    rows = [
        {"audio": {"array": w, "sampling_rate": RATE}, "audio_id": f"clip{i}"}
        for i, w in enumerate(_waveforms())
    ]
    windowing = Windowing(window_seconds=1.0, hop_seconds=0.5)
    windows = encode_audio_windows(model, processor, rows, windowing=windowing)
    assert windows.clip_indices.tolist() == [0, 1, 1, 2, 2, 2, 2, 3]
    assert windows.ends[2].item() == pytest.approx(1.3) and windows.starts[2].item() == pytest.approx(0.3)
    clips = encode_audio_clips(model, processor, rows, windowing=windowing)
    torch.testing.assert_close(clips.embeddings[2], windows.embeddings[3:7].mean(dim=0))
    assert abs(clips.embeddings.norm(dim=-1) - 1).max() > 0.1  # PE-Audio's embeddings are not unit vectors
    # Each window is the clip's span as the extractor prepares it alone (reflect-padded, own padding mask).
    span = _waveforms()[2][round(0.5 * RATE) : round(1.5 * RATE)]
    with torch.no_grad():
        alone = model.get_audio_features(**processor(audio=[span]))
    torch.testing.assert_close(windows.embeddings[4:5], alone, rtol=1e-5, atol=1e-6)


def test_the_evaluator_ranks_by_pe_audio_s_scores(converted):
    _, processor = converted
    model = AtrDualEncoderModel.from_pretrained(converted[0].name_or_path).eval()
    dataset = _dataset(subtype="FLOAT")
    decoded = processor.decode([row["audio"] for row in dataset])
    # Hand-set, so that every rank below is clear of rounding (random weights put the logits within 1e-5 of each
    # other): without the class token the embeddings read the clips; captions 0-2 point to clips 0-2 (centred),
    # caption 3 to clip 0 at half the length, so that its own clip ranks lower.
    with torch.no_grad():
        model.audio_model.patch_embedder.class_embedding.zero_()
        clips = model.get_audio_features(**processor(audio=decoded))
    centred = clips - clips.mean(dim=0)
    plant_caption_embeddings(model, processor, list(CAPTIONS), torch.stack([*centred[:3], 0.5 * centred[0]]))
    metrics = RetrievalEvaluator(dataset, processor, ks=(1,))(model)
    with torch.no_grad():
        logits = model(**processor(audio=decoded, text=list(CAPTIONS))).logits_per_text
    relevant = np.arange(len(CAPTIONS))  # caption i describes clip i
    text_to_audio_rank = clear_rank_of(logits, relevant)
    audio_to_text_rank = clear_rank_of(logits.T, relevant)
    assert text_to_audio_rank.tolist()[:3] == [1, 1, 1] and text_to_audio_rank[3] > 1
    assert metrics["t2a_mean_rank"] == pytest.approx(text_to_audio_rank.mean())
    assert metrics["a2t_mean_rank"] == pytest.approx(audio_to_text_rank.mean())
    assert metrics["t2a_R@1"] == pytest.approx((text_to_audio_rank == 1).mean())


EVENT_AT = 1.5
"""The long take's tone (:func:`recording_with_event`, 0.5 s) lies in its second window (1.0-2.5 s) and overlaps
the third (1.8-3.3 s) by 0.2 s only."""


@pytest.fixture(scope="module")
def planted_dir(converted, tmp_path_factory):
    """The converted model planted to find the tone (:func:`plant_tone_window_caption`), saved with its processor."""
    model, processor = converted
    planted = AtrDualEncoderModel.from_pretrained(model.name_or_path).eval()
    _, query = recording_with_event(1, None, RATE, seed=1)
    quiet, _ = recording_with_event(1, None, RATE, seed=2)
    plant_tone_window_caption(planted, processor, query, quiet, "a tone")
    directory = tmp_path_factory.mktemp("planted")
    planted.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def test_index_search_and_the_search_page_on_long_recordings(converted, planted_dir, tmp_path, capsys):
    _, processor = converted
    model = AtrDualEncoderModel.from_pretrained(planted_dir).eval()
    library = tmp_path / "library"
    library.mkdir()
    recording, _ = recording_with_event(3.3, EVENT_AT, RATE)
    (library / "long take.wav").write_bytes(encode_wav(recording, RATE, subtype="PCM_16"))
    long_take = decode_audio(str(library / "long take.wav"))  # as the index reads it: rounded to 16 bits
    (library / "short.wav").write_bytes(encode_wav(_waveforms()[0], RATE, subtype="PCM_16"))
    index_dir = tmp_path / "index"
    argv = ["--model", str(planted_dir), "--window-seconds", "1.5", "--hop-seconds", "1.0"]
    assert main(["index", *argv, "--audio-dir", str(library), "--out", str(index_dir)]) == 0
    capsys.readouterr()
    search = [
        "search",
        "--model",
        str(planted_dir),
        "--index",
        str(index_dir),
        "--json",
        "--top-k",
        "2",
        "a tone",
    ]
    assert main(search) == 0
    hits = json.loads(capsys.readouterr().out)
    assert sorted(hit["id"] for hit in hits) == ["long take.wav", "short.wav"]
    # The long take's best window: the one whose dot product with the caption (PE-Audio's score) is highest, by a
    # wide margin: the window that holds the tone.
    starts = [0.0, 1.0, 1.8]
    spans = [long_take[round(start * RATE) : round((start + 1.5) * RATE)] for start in starts]
    with torch.no_grad():
        window_embeds = model.get_audio_features(**processor(audio=spans))
        text_embeds = model.get_text_features(**processor(text=["a tone"]))
    best = clear_argmax(window_embeds @ text_embeds[0])
    assert starts[best] == 1.0
    long_hit = next(hit for hit in hits if hit["id"] == "long take.wav")
    assert (long_hit["start"], long_hit["end"]) == pytest.approx((starts[best], starts[best] + 1.5))
    assert long_hit["score"] == pytest.approx(float(window_embeds[best] @ text_embeds[0]), rel=1e-5)
    pipe = load_retrieval_pipeline(str(planted_dir), index_dir=index_dir)
    assert search_text(pipe, "a tone", top_k=2).hits == hits
