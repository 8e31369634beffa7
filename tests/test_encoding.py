"""hf_atr.encoding: the caption table, and audio / caption / pair encoding that restores the model's mode."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from tiny_models import feature_dataset, make_model, make_processor
from tiny_models import translated_feature_dataset as _clips

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import (
    DEFAULT_TEMPLATES,
    caption_table,
    check_templates,
    encode_labels,
    encode_pairs,
    encode_text,
    label_prompts,
    pair_audio_ids,
)


@pytest.fixture(scope="module")
def tiny_setup():
    processor = make_processor()
    return make_model(processor=processor), processor, feature_dataset(6)


def test_caption_table_flattens_languages_and_skips_missing_translations():
    table = caption_table(_clips(3), ["eng", "deu"])
    assert table.captions == [
        "a dog barks loudly",
        "a siren wails loudly",
        "ein Hund loudly",
        "eine Sirene loudly",
        "a dog barks quietly",
        "a siren wails quietly",
        "ein Hund quietly",
        "eine Sirene quietly",
        "a dog barks rising",
        "a siren wails rising",
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
