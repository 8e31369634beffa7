from __future__ import annotations

import pytest
from datasets import Dataset

from hf_atr.data.schema import (
    all_captions,
    atr_features,
    captions_in_language,
    check_caption,
    finalize_audio_column,
)


def test_all_captions_collects_english_and_present_translations():
    dataset = Dataset.from_dict(
        {"captions": [["a dog"], ["a cat"]], "translations": [{"fra": ["un chien"]}, {"fra": None}]}
    )
    assert all_captions(dataset) == ["a dog", "un chien", "a cat"]
    assert all_captions(Dataset.from_dict({"captions": [["x", "y"]]})) == ["x", "y"]


def test_schema_features_and_audio_cast_need_no_decoding():
    features = atr_features(["fra"], with_label=True)
    dataset = Dataset.from_dict(
        {
            "audio": [{"bytes": None, "path": "/clips/a.wav"}],
            "audio_id": ["a"],
            "captions": [["a dog"]],
            "translations": [{"fra": ["un chien"]}],
            "label": ["dog"],
        },
        features=features,
    )
    row = finalize_audio_column(dataset)[0]
    assert row["audio"] == {"bytes": None, "path": "/clips/a.wav"}
    assert row["translations"] == {"fra": ["un chien"]} and row["label"] == "dog"


def test_captions_in_language_reads_english_or_the_translation():
    row = {"captions": ["a dog"], "translations": {"fra": ["un chien"], "deu": None}}
    assert captions_in_language(row, "eng") == ["a dog"]
    assert captions_in_language(row, "fra") == ["un chien"]
    assert captions_in_language(row, "deu") is None
    assert captions_in_language({"captions": ["x"]}, "jpn") is None
    assert captions_in_language({"text": ["y"]}, "eng", english_column="text") == ["y"]


def test_check_caption_returns_text_and_names_the_clip_of_an_empty_one():
    assert check_caption("a dog barks", 0) == "a dog barks"
    with pytest.raises(ValueError, match=r"^Clip 'c7': fra caption 2 is empty or not a string \(' '\)\.$"):
        check_caption(" ", 2, "c7", "fra")
    with pytest.raises(ValueError, match=r"^Caption 1 is empty or not a string \(None\)\.$"):
        check_caption(None, 1)
