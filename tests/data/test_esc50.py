from __future__ import annotations

import csv
import logging
import re
from pathlib import Path

import pytest
from datasets import Audio, concatenate_datasets, load_from_disk
from esc50_release import ESC50_CATEGORIES, esc50_rows, write_esc50_release

from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.esc50 import class_prompts, esc50_fold, load_esc50
from hf_atr.data.schema import class_list, corpus_provenance
from hf_atr.data.synthcaps import write_esc50_layout
from hf_atr.data.synthcaps_audio import SOUND_EVENTS


@pytest.fixture(scope="module")
def esc50_dir(tmp_path_factory):
    return write_esc50_layout(
        tmp_path_factory.mktemp("esc50"), clips_per_class=5, sampling_rate=16000, duration=0.5
    )


def _metadata(esc50_dir: Path) -> list[dict[str, str]]:
    with (esc50_dir / "meta" / "esc50.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _copy_corpus(esc50_dir: Path, tmp_path: Path) -> Path:
    """A writable copy (meta copied, audio files linked) so a test can damage it."""
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "esc50.csv").write_bytes((esc50_dir / "meta" / "esc50.csv").read_bytes())
    (tmp_path / "audio").mkdir()
    for path in (esc50_dir / "audio").iterdir():
        (tmp_path / "audio" / path.name).write_bytes(path.read_bytes())
    return tmp_path


def test_class_prompts():
    assert class_prompts("chirping_birds") == ["This is a sound of chirping birds."]
    assert class_prompts("dog", ["A {class}.", "{class} barking"]) == ["A dog.", "dog barking"]
    with pytest.raises(ValueError, match=r"must be a string containing '\{class\}'"):
        class_prompts("dog", ["A sound of {label}."])
    with pytest.raises(ValueError, match="may use only the field"):
        class_prompts("dog", ["{class} at {time}"])
    with pytest.raises(ValueError, match="templates is empty"):
        class_prompts("dog", [])


def test_all_folds_labels_and_captions(esc50_dir):
    loaded = load_esc50(esc50_dir)
    metadata = {row["filename"]: row for row in _metadata(esc50_dir)}
    assert list(loaded) == ["fold1", "fold2", "fold3", "fold4", "fold5"]
    everything = concatenate_datasets(list(loaded.values()))
    assert len(everything) == 5 * len(SOUND_EVENTS) == len(metadata)
    assert everything.features["audio"] == Audio(decode=False)
    for split, dataset in loaded.items():
        for row in dataset:
            expected = metadata[row["audio_id"]]
            assert split == f"fold{expected['fold']}"
            assert row["label"] == expected["category"]
            assert row["captions"] == [f"This is a sound of {expected['category'].replace('_', ' ')}."]
            assert Path(row["audio"]["path"]) == (esc50_dir / "audio" / row["audio_id"]).resolve()
    assert set(everything["label"]) == set(SOUND_EVENTS)


def test_fold_selection_and_templates(esc50_dir):
    templates = ["A recording of {class}.", "The sound of {class}."]
    loaded = load_esc50(esc50_dir, folds=[4, 2], templates=templates)
    assert list(loaded) == ["fold2", "fold4"]
    row = loaded["fold4"][0]
    assert row["captions"] == class_prompts(row["label"], templates)
    assert len(load_esc50(esc50_dir, folds=3)["fold3"]) == len(SOUND_EVENTS)
    for bad in ([0], [6], [], ["1"]):
        with pytest.raises(ValueError, match="choose fold numbers from"):
            load_esc50(esc50_dir, folds=bad)


@pytest.mark.parametrize(
    ("bad_fold", "message"),
    [("7", "fold '7' is not one of"), ("one", "fold 'one' is not one of"), ("", "empty fold")],
)
def test_bad_fold_number(esc50_dir, tmp_path, caplog, bad_fold, message):
    corpus = _copy_corpus(esc50_dir, tmp_path)
    csv_path = corpus / "meta" / "esc50.csv"
    rows = _metadata(esc50_dir)
    rows[2]["fold"] = bad_fold
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(CorpusFormatError, match=rf"esc50\.csv, line 4: {message}"):
        load_esc50(corpus)
    with caplog.at_level(logging.WARNING):
        loaded = load_esc50(corpus, missing="skip")
    assert sum(map(len, loaded.values())) == len(rows) - 1
    assert "skipped 1 clip(s)/row(s)" in caplog.text


def test_bad_rows_and_audio(esc50_dir, tmp_path, caplog):
    corpus = _copy_corpus(esc50_dir, tmp_path)
    csv_path = corpus / "meta" / "esc50.csv"
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    lines.insert(1, "1-1-A.wav,1,0,dog")
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"esc50\.csv, line 2: expected 7 fields"):
        load_esc50(corpus)
    rows = _metadata(esc50_dir)
    (corpus / "audio" / rows[0]["filename"]).unlink()
    (corpus / "audio" / rows[1]["filename"]).write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        loaded = load_esc50(corpus, missing="skip")
    assert sum(map(len, loaded.values())) == len(rows) - 2
    assert "skipped 3 clip(s)/row(s)" in caplog.text
    csv_path.write_text("\n".join(lines[:1] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=rf"line 2: audio file not found: .*{rows[0]['filename']}"):
        load_esc50(corpus)
    (corpus / "audio" / rows[0]["filename"]).write_bytes(
        (esc50_dir / "audio" / rows[0]["filename"]).read_bytes()
    )
    with pytest.raises(AudioDecodeError, match=rf"line 3: .*{rows[1]['filename']}.*corrupt"):
        load_esc50(corpus)
    with pytest.raises(FileNotFoundError, match="Corpus metadata file not found"):
        load_esc50(tmp_path / "nowhere")


def test_source_ids_provenance_and_a_fold_left_empty(esc50_dir, tmp_path, caplog):
    (tmp_path / "esc50").mkdir()
    corpus = _copy_corpus(esc50_dir, tmp_path / "esc50")
    metadata = {row["filename"]: row for row in _metadata(corpus)}
    loaded = load_esc50(corpus, folds=[1, 2])
    assert loaded["fold1"]["source_id"] == [
        f"freesound:{metadata[name]['src_file']}" for name in loaded["fold1"]["audio_id"]
    ]
    provenance = corpus_provenance(loaded["fold2"])
    assert provenance["official_clips"] == 400 and provenance["clips_found"] == len(loaded["fold2"])
    for name, row in metadata.items():
        if row["fold"] == "2":
            (corpus / "audio" / name).unlink()
    with caplog.at_level(logging.WARNING):
        assert list(load_esc50(corpus, folds=[1, 2], missing="skip")) == ["fold1"]
    assert "ESC-50: dropped empty split(s) 'fold2'" in caplog.text


def test_every_fold_records_the_class_list_of_the_release(tmp_path, caplog):
    """A partial copy of ESC-50 (its whole esc50.csv, audio for 1 clip of fold 3 and 4 of fold 2): each fold's
    provenance lists the 50 classes in the order of their target, and keeps them through save_to_disk."""
    written = write_esc50_release(tmp_path / "ESC-50-master", {3: 1, 2: 4})
    with caplog.at_level(logging.WARNING):
        loaded = load_esc50(tmp_path / "ESC-50-master", folds=[2, 3], missing="skip")
    assert "classes where the release has" not in caplog.text
    assert [len(loaded["fold2"]), len(loaded["fold3"])] == [4, 1]
    assert loaded["fold3"]["label"] == ["dog"] and len(set(loaded["fold2"]["label"])) == 4
    assert [row["category"] for row in written][:2] == ["dog", "dog"]
    for fold in loaded.values():
        assert class_list(corpus_provenance(fold)) == list(ESC50_CATEGORIES)
    loaded.save_to_disk(str(tmp_path / "saved"))
    reloaded = load_from_disk(str(tmp_path / "saved"))
    assert class_list(corpus_provenance(reloaded["fold3"])) == list(ESC50_CATEGORIES)
    both = concatenate_datasets([reloaded["fold2"], reloaded["fold3"]])
    assert class_list(corpus_provenance(both)) == list(ESC50_CATEGORIES)


def test_a_file_with_other_classes_or_no_target_column(esc50_dir, tmp_path, caplog):
    """The class list is whatever esc50.csv names (here 13), said in a warning; without targets, sorted."""
    with caplog.at_level(logging.WARNING):
        loaded = load_esc50(esc50_dir, folds=1)
    assert f"esc50.csv names {len(SOUND_EVENTS)} classes where the release has 50" in caplog.text
    assert class_list(corpus_provenance(loaded["fold1"])) == list(SOUND_EVENTS)  # target order
    corpus = _copy_corpus(esc50_dir, tmp_path)
    rows = _metadata(esc50_dir)
    with (corpus / "meta" / "esc50.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[name for name in rows[0] if name != "target"])
        writer.writeheader()
        writer.writerows({name: value for name, value in row.items() if name != "target"} for row in rows)
    assert class_list(corpus_provenance(load_esc50(corpus, folds=1)["fold1"])) == sorted(SOUND_EVENTS)


@pytest.mark.parametrize(
    ("row", "changes", "message"),
    [
        (3, {"target": "x"}, r"line 5: target 'x' is not a whole number\."),
        (3, {"target": ""}, r"line 5: target '' is not a whole number\."),
        (3, {"target": "1"}, r"line 5: category 'dog' has target 1 here but 0 on line 2\."),
        (20, {"target": "1"}, r"line 22: target 1 is 'pig' here but 'rooster' on line 10\."),
        (3, {"category": "puppy"}, r"line 5: target 0 is 'puppy' here but 'dog' on line 2\."),
        (300, {"category": "dog"}, r"line 302: target 37 is 'dog' here but 'clock_alarm' on line 298\."),
    ],
)
def test_target_numbers_that_disagree_are_malformed_rows(tmp_path, caplog, row, changes, message):
    """ESC-50's rows number each category by its target; a row of any fold that breaks the numbering is named
    (fold 5 is loaded: its audio is absent, but the rows of fold 1 come first)."""
    corpus = tmp_path / "ESC-50-master"
    write_esc50_release(corpus, {1: 2})
    rows = esc50_rows()
    for name, value in changes.items():
        rows[row][name] = value
    with (corpus / "meta" / "esc50.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(CorpusFormatError, match=message):
        load_esc50(corpus, folds=5)
    with caplog.at_level(logging.INFO):  # every skipped row is listed at INFO
        loaded = load_esc50(corpus, folds=1, missing="skip")
    assert re.search(message, caplog.text)
    assert class_list(corpus_provenance(loaded["fold1"])) == list(ESC50_CATEGORIES)


def test_esc50_fold_reads_split_names():
    assert [esc50_fold(f"fold{fold}") for fold in range(1, 6)] == [1, 2, 3, 4, 5]
    for name in ("test", "fold6", "3"):
        with pytest.raises(
            ValueError, match=rf"^'{name}' is not an ESC-50 split; its splits are \['fold1', "
        ):
            esc50_fold(name)
