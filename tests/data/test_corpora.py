from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import Dataset, DatasetDict

from hf_atr.data.corpora import (
    CORPUS_LOADERS,
    HELD_OUT_FILTER,
    combine_splits,
    hold_out_test_split,
    load_corpus,
    loader_options,
)
from hf_atr.data.schema import (
    class_list,
    corpus_provenance,
    describe_dataset,
    official_clip_count,
    set_corpus_provenance,
)


def _folder(root: Path, clips: int = 4) -> Path:
    """Clip 0 in ``test/``, the others in ``train/``, listed by one top ``metadata.csv``."""
    rows = [["file_name", "caption"]]
    for index in range(clips):
        name = f"{'test' if index == 0 else 'train'}/c{index}.wav"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(root / name, np.full(800, 0.01 * index, np.float32), 16000)
        rows.append([name, f"clip {index}"])
    with (root / "metadata.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return root


def _clips(count: int, **provenance) -> Dataset:
    dataset = Dataset.from_dict({"audio_id": [f"c{i}" for i in range(count)], "captions": [["x"]] * count})
    return set_corpus_provenance(dataset, provenance) if provenance else dataset


def test_load_corpus_calls_the_named_loader_with_its_options(tmp_path):
    folder = _folder(tmp_path / "sounds")
    corpus = load_corpus("audiofolder", folder, missing="skip", encoding="utf-8", splits=None)
    assert sorted(corpus) == ["test", "train"] and corpus["train"]["audio_id"] == [
        "train/c1.wav",
        "train/c2.wav",
        "train/c3.wav",
    ]
    assert load_corpus("audiofolder", folder, splits=["test"])["test"]["audio_id"] == ["test/c0.wav"]
    assert set(CORPUS_LOADERS) == {"audiocaps", "clotho", "esc50", "wavcaps", "audiofolder"}
    assert loader_options("esc50") == ["folds", "templates", "missing", "encoding"]


def test_load_corpus_passes_loader_options_named_like_its_own_parameters(tmp_path):
    """WavCaps' ``source`` (``hf-atr train --loader_options '{"source": "FreeSound"}'``) reaches the loader."""
    (tmp_path / "my_freesound.json").write_text(
        json.dumps({"data": [{"id": "180913", "caption": "A dog barks.", "audio": "wav_path"}]}),
        encoding="utf-8",
    )
    soundfile.write(tmp_path / "180913.flac", np.full(800, 0.1, np.float32), 16000, format="FLAC")
    corpus = load_corpus("wavcaps", tmp_path / "my_freesound.json", source="FreeSound")
    assert corpus["train"]["source_id"] == ["freesound:180913"]
    provenance = corpus_provenance(corpus["train"])
    assert provenance["source"] == "FreeSound" and provenance["official_release"] == "WavCaps FreeSound"


def test_load_corpus_reads_saved_datasets(tmp_path):
    corpus = DatasetDict({"train": _clips(3), "test": _clips(2)})
    corpus.save_to_disk(tmp_path / "dict")
    assert {split: len(data) for split, data in load_corpus(str(tmp_path / "dict")).items()} == {
        "train": 3,
        "test": 2,
    }
    _clips(5).save_to_disk(tmp_path / "single")
    assert list(load_corpus(tmp_path / "single")) == ["train"]  # a saved Dataset is one split, train


def test_load_corpus_errors_name_the_problem(tmp_path):
    with pytest.raises(
        ValueError, match=r"Loader 'esc50' takes no option\(s\) \['audio_dir'\]; its options: \['folds'"
    ):
        load_corpus("esc50", tmp_path, audio_dir=tmp_path)
    with pytest.raises(
        ValueError, match="Loader 'wavcaps' needs the corpus location \\(its JSON file\\) as data_dir"
    ):
        load_corpus("wavcaps")
    with pytest.raises(
        ValueError, match="'clothoo' is neither a loader \\(audiocaps, clotho, esc50, wavcaps, audiofolder\\)"
    ):
        load_corpus("clothoo", tmp_path)
    _clips(2).save_to_disk(tmp_path / "saved")
    with pytest.raises(
        ValueError, match=r"is a saved dataset; loader options \['data_dir', 'missing'\] do not apply"
    ):
        load_corpus(str(tmp_path / "saved"), tmp_path, missing="skip")
    assert len(load_corpus(str(tmp_path / "saved"), audio_dir=None)["train"]) == 2  # None means "not given"


def test_combine_splits_concatenates_and_names_absent_splits():
    corpus = DatasetDict({
        "fold1": _clips(2, corpus="ESC-50", split="fold1", official_clips=400),
        "fold2": _clips(3, corpus="ESC-50", split="fold2", official_clips=400),
    })  # fmt: skip
    assert combine_splits(corpus, ["fold2"]) is corpus["fold2"]
    joined = combine_splits(corpus, ["fold1", "fold2"])
    assert len(joined) == 5 and official_clip_count(corpus_provenance(joined)) == 800
    assert describe_dataset(joined, "esc50") == "ESC-50 fold1 + ESC-50 fold2"
    with pytest.raises(
        ValueError,
        match=r"--train_splits: the dataset has no split\(s\) \['fold9'\]; its splits: \['fold1', 'fold2'\]",
    ):
        combine_splits(corpus, ["fold1", "fold9"], "--train_splits")
    with pytest.raises(ValueError, match="name at least one split"):
        combine_splits(corpus, [])


@pytest.mark.parametrize(("size", "held_out"), [(0.25, 3), (0.2, 2), (4, 4), (4.0, 4)])
def test_hold_out_test_split_is_seeded_and_recorded(size, held_out):
    source = _clips(10, corpus="Audio folder", split="train", official_clips=None, filters=[])
    train, test = hold_out_test_split(source, size, seed=3)
    assert (len(train), len(test)) == (10 - held_out, held_out)
    assert sorted([*train["audio_id"], *test["audio_id"]]) == sorted(
        source["audio_id"]
    )  # whole clips, no overlap
    again_train, again_test = hold_out_test_split(source, size, seed=3)
    assert list(again_test["audio_id"]) == list(test["audio_id"])
    assert list(again_train["audio_id"]) == list(train["audio_id"])
    assert list(hold_out_test_split(source, size, seed=4)[1]["audio_id"]) != list(test["audio_id"])
    record = {"name": HELD_OUT_FILTER, "held_out": held_out, "clips_before": 10, "seed": 3}
    assert corpus_provenance(train)["filters"] == [{**record, "clips_after": 10 - held_out}]
    test_provenance = corpus_provenance(test)
    assert test_provenance["split"] == "test" and test_provenance["official_clips"] is None
    assert test_provenance["layout"] == "held out at random from `train` (seed 3)"
    assert (
        test_provenance["held_out_from"] == corpus_provenance(source)
        and test_provenance["clips_found"] == held_out
    )
    assert test_provenance["filters"] == [{**record, "clips_after": held_out}]
    assert corpus_provenance(source)["filters"] == []  # the input is untouched
    assert describe_dataset(test, "folder") == "Audio folder: random hold-out of train, seed 3"
    assert test_provenance["classes"] is None  # the source has no class list


def test_a_test_split_held_out_of_labelled_clips_keeps_their_class_list():
    source = _clips(10, corpus="ESC-50", split="fold1", classes=["dog", "rooster", "pig"], filters=[])
    train, test = hold_out_test_split(source, 3)
    assert (
        class_list(corpus_provenance(test))
        == class_list(corpus_provenance(train))
        == ["dog", "rooster", "pig"]
    )


@pytest.mark.parametrize("size", [0, -1, 1.5, 10, 20, 0.999])
def test_hold_out_test_split_refuses_sizes_that_leave_a_side_empty(size):
    with pytest.raises(
        ValueError,
        match=r"must be a fraction in \(0, 1\) or a whole number of clips .* \(the dataset has 10 clips\)",
    ):
        hold_out_test_split(_clips(10), size)


def test_describe_dataset_and_official_clip_count_without_provenance():
    assert describe_dataset(_clips(2), "my data") == "my data"
    assert official_clip_count(None) is None and official_clip_count({"official_clips": 975}) == 975
    assert official_clip_count({"concatenated": [{"official_clips": 400}, {"official_clips": None}]}) is None
