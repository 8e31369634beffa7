"""hf_atr.encoding: the caption table, and audio / caption / pair encoding that restores the model's mode."""

from __future__ import annotations

import logging
import tempfile

import numpy as np
import pytest
import torch
from datasets import Dataset
from synthetic_audio import recording_with_event, synthetic_clip
from tiny_models import SAMPLING_RATE, feature_dataset, make_model, make_processor, save_tiny_clap_checkpoint
from tiny_models import translated_feature_dataset as _clips

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.data.audio import AudioDecodeError
from hf_atr.encoding import (
    DEFAULT_TEMPLATES,
    caption_table,
    check_templates,
    encode_audio,
    encode_audio_clips,
    encode_audio_windows,
    encode_evaluation_clips,
    encode_labels,
    encode_pairs,
    encode_text,
    label_prompts,
    pair_audio_ids,
)
from hf_atr.windowing import Windowing, pool_window_embeddings, window_bounds


@pytest.fixture(scope="module")
def tiny_setup():
    processor = make_processor()
    return make_model(processor=processor), processor, feature_dataset(6)


def test_caption_table_flattens_languages_and_skips_missing_translations():
    table = caption_table(_clips(3), ["eng", "deu"])
    assert table.captions == [
        "a dog barks 0",
        "a siren wails 0",
        "ein Hund 0",
        "eine Sirene 0",
        "a dog barks 1",
        "a siren wails 1",
        "ein Hund 1",
        "eine Sirene 1",
        "a dog barks 2",
        "a siren wails 2",
    ]
    assert table.text_to_audio.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert table.languages == ["eng", "eng", "deu", "deu"] * 2 + ["eng", "eng"]
    assert table.caption_groups.tolist() == [0, 1, 0, 1, 2, 3, 2, 3, 4, 5]


def test_caption_table_names_missing_columns_and_empty_captions():
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['translations'\]"):
        caption_table(Dataset.from_dict({"captions": [["x"]]}), ["eng", "fra"])
    with pytest.raises(ValueError, match="Clip 0: eng caption 1 is empty"):
        caption_table(Dataset.from_dict({"captions": [["x", " "]]}))


def test_encode_pairs_first_caption(tiny_setup):
    model, processor, dataset = tiny_setup
    audio, text = encode_pairs(model, processor, dataset, captions="first", show_progress=False)
    assert audio.shape == text.shape == (6, 16)
    expected = encode_text(model, processor, [row[0] for row in dataset["captions"]])
    torch.testing.assert_close(text, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="`captions` must be one of"):
        encode_pairs(model, processor, dataset, captions="some")
    with pytest.raises(ValueError, match="dataset is empty"):
        encode_pairs(model, processor, dataset.select([]))


def test_pair_audio_ids_follow_the_pairs_of_encode_pairs(tiny_setup):
    _, _, dataset = tiny_setup
    assert pair_audio_ids(dataset) == [audio_id for audio_id in dataset["audio_id"] for _ in range(2)]
    assert pair_audio_ids(dataset, captions="first") == dataset["audio_id"]
    with pytest.raises(
        ValueError, match=r"pair_audio_ids: the dataset lacks an 'audio_id' column \(\['captions'\]\)"
    ):
        pair_audio_ids(Dataset.from_dict({"captions": [["x"]]}))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_encoding_leaves_the_model_in_its_mode_and_matches_the_forward_pass(tiny_setup, mode):
    model, processor, dataset = tiny_setup
    model.train(mode == "train")
    audio = encode_audio(model, processor, dataset, batch_size=4)
    text = encode_text(model, processor, ["a dog sound", "the siren"], batch_size=1)
    assert model.training == (mode == "train")
    assert audio.shape == (6, 16) and text.shape == (2, 16) and audio.dtype == text.dtype == torch.float32
    model.eval()
    with torch.no_grad():
        expected = model.get_text_features(**processor(text=["a dog sound", "the siren"]))
    torch.testing.assert_close(text, expected, rtol=1e-5, atol=1e-6)


def test_a_model_in_training_mode_encodes_as_in_eval_mode_and_stays_in_training_mode():
    processor = make_processor()
    model = make_model(processor=processor)
    clips = _clips(3)
    captions = caption_table(clips).captions
    expected_audio = encode_audio(model.eval(), processor, clips)
    expected_text = encode_text(model, processor, captions)
    model.train()
    # The tiny BERT's dropout of 0.1 would change the text embeddings if encoding ran in training mode.
    assert torch.equal(encode_audio(model, processor, clips), expected_audio)
    assert torch.equal(encode_text(model, processor, captions), expected_text)
    assert all(module.training for module in model.modules())


@pytest.fixture(scope="module")
def raw_setup():
    processor = make_processor()
    return make_model(processor=processor), processor


def test_a_long_recording_is_encoded_window_by_window_with_spans_and_pooled(raw_setup):
    model, processor = raw_setup
    recording, query = recording_with_event(60, 40.2, SAMPLING_RATE)
    windowing = Windowing()
    window, hop = windowing.samples(processor.feature_extractor)
    encoded = encode_audio_windows(
        model, processor, [{"audio": recording, "audio_id": "field"}], windowing=windowing
    )
    bounds = window_bounds(len(recording), window, hop)
    assert len(encoded.embeddings) == len(bounds) > 100 and encoded.clip_indices.unique().tolist() == [0]
    assert encoded.starts.tolist() == [start / SAMPLING_RATE for start, _ in bounds]
    assert encoded.ends.tolist() == [stop / SAMPLING_RATE for _, stop in bounds]
    # Each window embeds as that stretch of audio alone does (the reference: the processor on the slice).
    with torch.no_grad():
        reference = model.get_audio_features(**processor(audio=[recording[slice(*bounds[80])]]))
    torch.testing.assert_close(encoded.embeddings[80:81], reference, rtol=1e-5, atol=1e-6)
    # The event at 40.2-40.7 s: the best window for the query is the one that holds it.
    query_embed = encode_audio(model, processor, [{"audio": query}])
    best = int((encoded.embeddings @ query_embed.T).argmax())
    assert encoded.starts[best] <= 40.2 and encoded.ends[best] >= 40.7
    # The clip embedding pools every window: not the first window (all the model's own protocol reads).
    pooled = encode_audio(model, processor, [{"audio": recording}], windowing=windowing)
    torch.testing.assert_close(pooled, pool_window_embeddings(encoded.embeddings)[None])
    first_window = encode_audio(model, processor, [{"audio": recording}])
    torch.testing.assert_close(first_window, encoded.embeddings[:1], rtol=1e-5, atol=1e-6)
    assert float(pooled @ first_window.T) < 0.999


def test_clap_fusion_keeps_its_own_embedding_of_a_long_clip_but_windows_for_the_index():
    with tempfile.TemporaryDirectory() as directory:
        save_tiny_clap_checkpoint(directory, fused=True)
        model, processor = AtrDualEncoderModel.from_clap(directory), AtrProcessor.from_clap(directory)
    clip = synthetic_clip(3 * SAMPLING_RATE, SAMPLING_RATE)
    np.random.seed(0)  # fusion's three crops come from np.random
    fused = encode_audio(model, processor, [{"audio": clip}], windowing=Windowing())
    np.random.seed(0)
    own = encode_audio(model, processor, [{"audio": clip}])
    torch.testing.assert_close(fused, own)
    windows = encode_audio_windows(model, processor, [{"audio": clip}], windowing=Windowing())
    assert len(windows.embeddings) == 5  # 1-s chunks every 0.5 s: the index still gets spans


def test_undecodable_clips_are_skipped_and_reported_or_raise_when_strict(raw_setup, tmp_path):
    model, processor = raw_setup
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "notes.wav").write_text("not audio")
    rows = [
        {"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE), "audio_id": "good0"},
        {"audio": str(tmp_path / "empty.wav"), "audio_id": "empty"},
        {"audio": str(tmp_path / "notes.wav"), "audio_id": "notes"},
        {"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE, seed=1), "audio_id": "good3"},
    ]
    encoded = encode_audio_windows(model, processor, rows, windowing=Windowing(), strict=False)
    assert encoded.kept_clips == [0, 3] and encoded.pooled("mean").shape == (2, 16)
    assert [(item.index, item.name, item.reason) for item in encoded.skipped] == [
        (1, "empty", "the audio file is empty (0 bytes)."),
        (2, "notes", "the audio is unreadable or corrupt (Format not recognised)."),
    ]
    with pytest.raises(AudioDecodeError, match=r"^empty: the audio file is empty \(0 bytes\)\.$"):
        encode_audio(model, processor, rows)


def test_windows_need_the_waveform(raw_setup):
    model, processor = raw_setup
    with pytest.raises(
        ValueError, match="clip0: windowed encoding needs the waveform, but the rows hold only"
    ):
        encode_audio_windows(model, processor, feature_dataset(2), windowing=Windowing())
    encoded = encode_audio_windows(model, processor, feature_dataset(2))
    assert encoded.starts is None and encoded.embeddings.shape == (2, 16)


def test_encode_labels_is_the_normalised_mean_of_each_labels_prompts(tiny_setup):
    model, processor, _ = tiny_setup
    embeds = encode_labels(
        model, processor, ["dog", "car_horn"], ["a {} sound", "This is a sound of {class}."]
    )
    prompts = ["a dog sound", "This is a sound of dog.", "a car horn sound", "This is a sound of car horn."]
    assert [
        label_prompts(label, ["a {} sound", "This is a sound of {class}."]) for label in ("dog", "car_horn")
    ] == [
        prompts[:2],
        prompts[2:],
    ]
    expected = torch.nn.functional.normalize(
        encode_text(model, processor, prompts).view(2, 2, -1).mean(1), dim=-1
    )
    torch.testing.assert_close(embeds, expected)
    torch.testing.assert_close(
        encode_labels(model, processor, ["dog"]), encode_labels(model, processor, ["dog"], DEFAULT_TEMPLATES)
    )
    assert check_templates("A {}.") == ("A {}.",) and check_templates(None) == tuple(DEFAULT_TEMPLATES)


@pytest.mark.parametrize(
    ("labels", "templates", "message"),
    [
        ([], None, "labels must be a non-empty list of strings"),
        (["dog", 3], None, "labels must be a non-empty list of strings"),
        (["  "], None, "Label '  ' is empty"),
        (["dog"], [], "templates is empty"),
        (["dog"], ["A sound."], "must be a string containing '{}' or '{class}'"),
    ],
)
def test_encode_labels_refuses_bad_labels_and_templates(tiny_setup, labels, templates, message):
    model, processor, _ = tiny_setup
    with pytest.raises(ValueError, match=message):
        encode_labels(model, processor, labels, templates)


def test_encode_audio_clips_pools_each_clips_windows_into_one_entry_spanning_it(raw_setup, tmp_path):
    model, processor = raw_setup
    windowing = Windowing(pooling="max")
    window, hop = windowing.samples(processor.feature_extractor)
    (tmp_path / "empty.wav").write_bytes(b"")
    long_clip = synthetic_clip(3 * window, SAMPLING_RATE)
    rows = [
        {"audio": long_clip, "audio_id": "long"},
        {"audio": str(tmp_path / "empty.wav"), "audio_id": "empty"},
        {"audio": synthetic_clip(SAMPLING_RATE // 2, SAMPLING_RATE, seed=1), "audio_id": "short"},
    ]
    clips = encode_audio_clips(model, processor, rows, windowing=windowing, strict=False)
    windows = encode_audio_windows(model, processor, rows, windowing=windowing, strict=False)
    assert clips.clip_indices.tolist() == [0, 2] and [item.name for item in clips.skipped] == ["empty"]
    assert clips.starts.tolist() == [0.0, 0.0]
    assert clips.ends.tolist() == [3 * window / SAMPLING_RATE, 0.5]
    long_windows = windows.embeddings[windows.clip_indices == 0]
    assert len(long_windows) == len(window_bounds(len(long_clip), window, hop)) > 1
    torch.testing.assert_close(clips.embeddings[0], pool_window_embeddings(long_windows, "max"))
    # Without windowing: the model's own protocol, one forward pass per clip (as encode_audio_windows).
    own = encode_audio_clips(model, processor, rows, strict=False)
    torch.testing.assert_close(
        own.embeddings, encode_audio_windows(model, processor, rows, strict=False).embeddings
    )


def test_evaluation_clips_name_the_first_undecodable_ones_and_count_the_rest(raw_setup, tmp_path, caplog):
    model, processor = raw_setup
    (tmp_path / "empty.wav").write_bytes(b"")
    rows = [{"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE), "audio_id": "good0"}]
    rows += [{"audio": str(tmp_path / "empty.wav"), "audio_id": f"empty{row}"} for row in range(1, 8)]
    rows += [{"audio": synthetic_clip(SAMPLING_RATE, SAMPLING_RATE, seed=8), "audio_id": "good8"}]
    with caplog.at_level(logging.WARNING):
        clips = encode_evaluation_clips(model, processor, rows, description="Evaluating on split 'test'")
    assert (
        "Evaluating on split 'test': 7 clip(s) cannot be decoded and are left out with their captions or labels: "
        "empty1 (the audio file is empty (0 bytes).); " in caplog.text
    )
    assert (
        "empty5 (the audio file is empty (0 bytes).) and 2 more. The metrics cover the other clips."
        in caplog.text
    )
    assert "empty6" not in caplog.text
    assert clips.kept == [0, 8] and clips.cut_clips == 0
    torch.testing.assert_close(clips.embeddings, encode_audio(model, processor, [rows[0], rows[8]]))
    assert clips.protocol_entries() == {
        "clips": 2,
        "clips_cut_to_window": 0,
        "skipped_clips": [
            {"audio_id": f"empty{row}", "reason": "the audio file is empty (0 bytes)."} for row in range(1, 8)
        ],
    }
    dataset = Dataset.from_dict({"audio_id": [row["audio_id"] for row in rows]})
    assert clips.dataset_rows(dataset)["audio_id"] == ["good0", "good8"]
    with pytest.raises(AudioDecodeError, match=r"^empty1: the audio file is empty \(0 bytes\)\.$"):
        encode_evaluation_clips(model, processor, rows, strict=True)
