from __future__ import annotations

import pytest
from datasets import Dataset, DatasetDict, concatenate_datasets, load_from_disk

from hf_atr.data.schema import (
    all_captions,
    atr_features,
    captions_in_language,
    check_caption,
    class_list,
    corpus_provenance,
    finalize_audio_column,
    record_filter,
    set_corpus_provenance,
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


def test_provenance_survives_save_load_and_dataset_operations(tmp_path):
    dataset = Dataset.from_dict({"audio_id": ["a", "b", "c"]})
    assert corpus_provenance(dataset) is None
    provenance = {
        "corpus": "Clotho",
        "split": "test",
        "official_clips": 1045,
        "clips_found": 3,
        "filters": [],
    }
    set_corpus_provenance(dataset, provenance)
    assert corpus_provenance(dataset) == provenance
    filtered = dataset.select([0, 2])
    record_filter(filtered, {"name": "overlap", "removed": 1, "clips_after": 2})
    assert corpus_provenance(dataset)["filters"] == []  # the source dataset is untouched
    DatasetDict({"test": filtered}).save_to_disk(str(tmp_path / "saved"))
    reloaded = load_from_disk(str(tmp_path / "saved"))["test"]
    expected = {**provenance, "filters": [{"name": "overlap", "removed": 1, "clips_after": 2}]}
    assert corpus_provenance(reloaded) == expected
    assert corpus_provenance(reloaded.map(lambda row: {"x": 1}).remove_columns("x")) == expected
    other = set_corpus_provenance(Dataset.from_dict({"audio_id": ["d"]}), {"corpus": "AudioCaps"})
    both = concatenate_datasets([reloaded, other])
    assert corpus_provenance(both) == {"concatenated": [expected, {"corpus": "AudioCaps"}]}
    record_filter(both, {"name": "overlap", "removed": 0})
    assert corpus_provenance(both)["filters"] == [{"name": "overlap", "removed": 0}]
    dataset.info.description = "a description someone wrote"
    assert corpus_provenance(dataset) is None


def test_class_list_is_the_recorded_list_shared_by_every_part():
    dog_cat = {"corpus": "ESC-50", "split": "fold1", "classes": ["dog", "cat"]}
    assert class_list(dog_cat) == ["dog", "cat"]
    assert class_list({"concatenated": [dog_cat, {**dog_cat, "split": "fold2"}]}) == ["dog", "cat"]
    folds = [set_corpus_provenance(Dataset.from_dict({"label": ["dog"]}), dog_cat) for _ in range(2)]
    assert class_list(corpus_provenance(concatenate_datasets(folds))) == ["dog", "cat"]
    assert class_list({"concatenated": [dog_cat, {"corpus": "Clotho", "split": "test"}]}) is None
    assert class_list({"concatenated": [dog_cat, {**dog_cat, "classes": ["cat", "dog"]}]}) is None
    assert class_list({"corpus": "Clotho"}) is None and class_list({"classes": []}) is None
    assert class_list(None) is None
