from __future__ import annotations

import csv
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import Audio

from hf_atr.data.audio import decode_audio
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.clotho import clotho_captions_file, load_clotho
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.schema import corpus_provenance
from hf_atr.data.synthcaps import load_synthcaps, write_clotho_layout


@pytest.fixture(scope="module")
def synthcaps():
    return load_synthcaps(4, 2, 2, duration=0.5, languages=("eng",))


def _read(csv_path: Path) -> list[list[str]]:
    with csv_path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _write(csv_path: Path, rows: list[list[str]]) -> None:
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)


def test_round_trip_with_awkward_file_names(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    loaded = load_clotho(tmp_path)
    assert list(loaded) == ["train", "validation", "test"]
    names = loaded["train"]["audio_id"]
    assert any("," in name for name in names) and any('"' in name for name in names)
    assert any("'" in name for name in names) and any(" " in name for name in names)
    for split in loaded:
        assert loaded[split].features["audio"] == Audio(decode=False)
        csv_rows = _read(clotho_captions_file(tmp_path, split))[1:]
        assert loaded[split]["audio_id"] == [row[0] for row in csv_rows]
        assert loaded[split]["captions"] == synthcaps[split]["captions"]
        for row, original in zip(loaded[split], synthcaps[split]):
            assert Path(row["audio"]["path"]).name == row["audio_id"]
            np.testing.assert_array_equal(decode_audio(row["audio"]), decode_audio(original["audio"]))


def test_split_names_and_audio_dir(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path / "meta")
    audio = tmp_path / "audio"
    audio.mkdir()
    for folder in ("development", "evaluation"):
        (tmp_path / "meta" / folder).rename(audio / folder)
    loaded = load_clotho(tmp_path / "meta", audio_dir=audio, splits=["development", "test"])
    assert list(loaded) == ["train", "test"]
    assert Path(loaded["test"][0]["audio"]["path"]).parent == (audio / "evaluation").resolve()
    with pytest.raises(ValueError, match="Unknown Clotho split 'dev'"):
        load_clotho(tmp_path / "meta", splits=["dev"])
    with pytest.raises(FileNotFoundError, match="No Clotho captions"):
        load_clotho(audio)


def test_file_name_in_two_splits_stays_in_both(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    development = _read(tmp_path / "clotho_captions_development.csv")
    shared = development[1]
    shutil.copy(tmp_path / "development" / shared[0], tmp_path / "validation" / shared[0])
    validation_csv = tmp_path / "clotho_captions_validation.csv"
    _write(validation_csv, [*_read(validation_csv), [shared[0], *[f"other {k}" for k in range(1, 6)]]])
    loaded = load_clotho(tmp_path)
    assert shared[0] in loaded["train"]["audio_id"] and shared[0] in loaded["validation"]["audio_id"]
    assert loaded["validation"][-1]["captions"] == [f"other {k}" for k in range(1, 6)]
    assert loaded["train"][0]["captions"] == shared[1:]


def _flatten_audio(corpus: Path, folders: tuple[str, ...]) -> None:
    """Move the audio of the split ``folders`` directly into ``corpus`` (the flat-folder fallback)."""
    for folder in folders:
        for audio_file in (corpus / folder).iterdir():
            audio_file.rename(corpus / audio_file.name)
        (corpus / folder).rmdir()


def test_flat_folder_refuses_a_file_name_of_two_splits(tmp_path, synthcaps, caplog):
    # The official layout; real Clotho has 4 file names in two splits, here the development clip of line 3
    # is also listed in evaluation, with its own captions.
    corpus = write_clotho_layout(synthcaps, tmp_path / "clotho")
    shared = _read(corpus / "clotho_captions_development.csv")[2][0]
    evaluation_csv = corpus / "clotho_captions_evaluation.csv"
    evaluation_rows = _read(evaluation_csv)
    _write(evaluation_csv, [*evaluation_rows, [shared, *[f"a pug struggles {k}" for k in range(1, 6)]]])
    evaluation_line = len(evaluation_rows) + 1
    _flatten_audio(corpus, ("development", "validation", "evaluation"))
    expected = (
        rf"clotho_captions_evaluation\.csv, line {evaluation_line}: file_name {re.escape(repr(shared))} is "
        rf"also in split 'train' at {re.escape(str(corpus / 'clotho_captions_development.csv'))}, line 3, and "
        rf"the audio of both splits is in the one folder {re.escape(str(corpus.resolve()))}, so its file "
        r"cannot belong to both; put each split's audio in its own folder"
    )
    with pytest.raises(CorpusFormatError, match=expected):
        load_clotho(corpus, splits="test")
    with pytest.raises(
        CorpusFormatError, match=r"clotho_captions_development\.csv, line 3: .* also in split 'test'"
    ):
        load_clotho(corpus, splits="train")
    with caplog.at_level(logging.WARNING):
        loaded = load_clotho(corpus, missing="skip")
    train_names = [row[0] for row in _read(corpus / "clotho_captions_development.csv")[1:]]
    assert loaded["train"]["audio_id"] == [name for name in train_names if name != shared]
    assert shared not in loaded["test"]["audio_id"]
    assert len(loaded["test"]) == len(evaluation_rows) - 1
    assert "Clotho split 'train': skipped 1 clip(s)/row(s)" in caplog.text
    assert "Clotho split 'test': skipped 1 clip(s)/row(s)" in caplog.text
    provenance = corpus_provenance(loaded["test"])
    assert provenance["skipped"] == 1
    assert provenance["metadata"] == [
        "clotho_captions_evaluation.csv",
        "clotho_captions_development.csv",
        "clotho_captions_validation.csv",
    ]
    # Validation shares no name: it loads whole, and says which other files it read.
    validation = load_clotho(corpus, splits="validation")["validation"]
    assert len(validation) == len(synthcaps["validation"])
    assert corpus_provenance(validation)["metadata"][1:] == [
        "clotho_captions_development.csv",
        "clotho_captions_evaluation.csv",
    ]


def test_flat_folder_for_one_split_beside_per_split_folders(tmp_path, synthcaps):
    corpus = write_clotho_layout(synthcaps, tmp_path / "clotho")
    shared = _read(corpus / "clotho_captions_development.csv")[1][0]
    evaluation_csv = corpus / "clotho_captions_evaluation.csv"
    _write(evaluation_csv, [*_read(evaluation_csv), [shared, *[f"other {k}" for k in range(1, 6)]]])
    shutil.copy(corpus / "development" / shared, corpus / "evaluation" / shared)
    _flatten_audio(corpus, ("evaluation",))
    # development/ is its own folder: the flat folder holds only evaluation's file of that name.
    loaded = load_clotho(corpus, splits=["train", "test"])
    assert loaded["test"][-1]["audio_id"] == shared
    assert loaded["test"][-1]["captions"] == [f"other {k}" for k in range(1, 6)]
    assert Path(loaded["test"][-1]["audio"]["path"]).parent == corpus.resolve()
    assert Path(loaded["train"][0]["audio"]["path"]).parent == (corpus / "development").resolve()
    assert corpus_provenance(loaded["test"])["metadata"] == ["clotho_captions_evaluation.csv"]


def test_missing_and_corrupt_audio(tmp_path, synthcaps, caplog):
    write_clotho_layout(synthcaps, tmp_path)
    names = [row[0] for row in _read(tmp_path / "clotho_captions_development.csv")[1:]]
    (tmp_path / "development" / names[1]).unlink()
    (tmp_path / "development" / names[2]).write_bytes(b"RIFF garbage")
    with pytest.raises(
        FileNotFoundError, match=r"clotho_captions_development\.csv, line 3: audio file not found"
    ):
        load_clotho(tmp_path, splits="train")
    with caplog.at_level(logging.WARNING):
        loaded = load_clotho(tmp_path, splits="train", missing="skip")
    assert loaded["train"]["audio_id"] == [names[0], names[3]]
    assert "skipped 2 clip(s)/row(s)" in caplog.text
    assert names[1] in caplog.text and names[2] in caplog.text
    (tmp_path / "development" / names[1]).write_bytes((tmp_path / "development" / names[0]).read_bytes())
    with pytest.raises(AudioDecodeError, match=r"clotho_captions_development\.csv, line 4: .*corrupt"):
        load_clotho(tmp_path, splits="train")


def test_zero_length_and_multichannel_audio(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    names = [row[0] for row in _read(tmp_path / "clotho_captions_evaluation.csv")[1:]]
    soundfile.write(tmp_path / "evaluation" / names[0], np.zeros((0, 2), dtype=np.float32), 44100)
    with pytest.raises(AudioDecodeError, match="zero length"):
        load_clotho(tmp_path, splits="evaluation")
    soundfile.write(tmp_path / "evaluation" / names[0], np.ones((100, 3), dtype=np.float32) * 0.5, 44100)
    loaded = load_clotho(tmp_path, splits="evaluation")
    assert decode_audio(loaded["test"][0]["audio"]).shape == (100,)


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        (["a.wav", "one", "two"], "expected 6 fields"),
        (["a.wav", "one", "two", "", "four", "five"], "empty caption_3"),
        (["", "one", "two", "three", "four", "five"], "empty file_name"),
    ],
    ids=["column-count", "empty-caption", "empty-file-name"],
)
def test_malformed_rows(tmp_path, synthcaps, caplog, bad_row, message):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    rows = _read(csv_path)
    _write(csv_path, [*rows[:2], bad_row, *rows[2:]])
    with pytest.raises(CorpusFormatError, match=rf"clotho_captions_validation\.csv, line 3: {message}"):
        load_clotho(tmp_path, splits="validation")
    with caplog.at_level(logging.WARNING):
        loaded = load_clotho(tmp_path, splits="validation", missing="skip")
    assert loaded["validation"]["audio_id"] == [row[0] for row in rows[1:]]
    assert "skipped 1 clip(s)/row(s)" in caplog.text


def test_duplicate_file_name_within_a_split_and_bad_header(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    rows = _read(csv_path)
    _write(csv_path, [*rows, rows[1]])
    with pytest.raises(CorpusFormatError, match=r"line 4: file_name .* already on line 2"):
        load_clotho(tmp_path, splits="validation")
    _write(csv_path, [["file_name", "text"], ["a.wav", "x"]])
    with pytest.raises(CorpusFormatError, match="no caption_1..caption_N columns"):
        load_clotho(tmp_path, splits="validation")


def test_line_numbers_count_captions_that_span_lines(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    rows = _read(csv_path)
    rows[1][2] = "a caption\nwritten on\nthree lines"
    _write(csv_path, [*rows, ["only", "two"]])
    assert (
        load_clotho(tmp_path, splits="validation", missing="skip")["validation"][0]["captions"][1]
        == rows[1][2]
    )
    with pytest.raises(
        CorpusFormatError, match=r"clotho_captions_validation\.csv, line 6: expected 6 fields"
    ):
        load_clotho(tmp_path, splits="validation")


def _to_wavcaps_layout(corpus: Path, audio_folders: dict[str, str]) -> None:
    """Rename the official CSVs to WavCaps' train/val/test.csv and the audio folders as given."""
    for official, wavcaps in [("development", "train"), ("validation", "val"), ("evaluation", "test")]:
        (corpus / f"clotho_captions_{official}.csv").rename(corpus / f"{wavcaps}.csv")
        (corpus / official).rename(corpus / audio_folders[official])


@pytest.mark.parametrize(
    "folders",
    [
        {"development": "development", "validation": "validation", "evaluation": "evaluation"},
        {"development": "train", "validation": "val", "evaluation": "test"},
    ],
    ids=["official-folders", "wavcaps-folders"],
)
def test_wavcaps_style_csvs(tmp_path, synthcaps, folders):
    corpus = write_clotho_layout(synthcaps, tmp_path)
    expected = load_clotho(corpus)
    _to_wavcaps_layout(corpus, folders)
    loaded = load_clotho(corpus)
    assert list(loaded) == ["train", "validation", "test"]
    for split in loaded:
        assert loaded[split]["audio_id"] == expected[split]["audio_id"]
        assert loaded[split]["captions"] == expected[split]["captions"]
        assert corpus_provenance(loaded[split])["layout"] == "WavCaps-style CSV"
    assert Path(loaded["validation"][0]["audio"]["path"]).parent.name == folders["validation"]
    assert list(load_clotho(corpus, splits="val")) == ["validation"]


def test_official_csvs_with_train_val_test_audio_folders(tmp_path, synthcaps):
    corpus = write_clotho_layout(synthcaps, tmp_path)
    (corpus / "evaluation").rename(corpus / "test")
    loaded = load_clotho(corpus, splits="test")
    assert Path(loaded["test"][0]["audio"]["path"]).parent == (corpus / "test").resolve()
    (corpus / "clotho_captions_evaluation.csv").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"No captions for Clotho split 'test' .*evaluation\.csv or test\.csv"
    ):
        load_clotho(corpus, splits="test")


def test_provenance_home_directory_and_source_ids_from_latin1_metadata(tmp_path, synthcaps, monkeypatch):
    corpus = write_clotho_layout(synthcaps, tmp_path / "clotho")
    names = [row[0] for row in _read(corpus / "clotho_captions_evaluation.csv")[1:]]
    # Clotho v2.x ships its metadata in ISO-8859-1; the manufacturer column has non-ASCII names.
    metadata = "file_name,keywords,sound_id,sound_link,start_end_samples,manufacturer,license\n"
    for index, name in enumerate(names[:-1]):
        quoted = '"' + name.replace('"', '""') + '"'
        metadata += f"{quoted},rain;city,{1000 + index},https://freesound.org/s/{1000 + index},,Jos\u00e9 M\u00fcller,CC0\n"
    (corpus / "clotho_metadata_evaluation.csv").write_bytes(metadata.encode("iso-8859-1"))
    monkeypatch.setenv("HOME", str(tmp_path))
    loaded = load_clotho("~/clotho", splits="test")["test"]
    assert loaded["source_id"] == [f"freesound:{1000 + index}" for index in range(len(names) - 1)] + [None]
    provenance = corpus_provenance(loaded)
    assert provenance == {
        "corpus": "Clotho",
        "layout": "official CSV",
        "split": "test",
        "corpus_split": "evaluation",
        "metadata": ["clotho_captions_evaluation.csv", "clotho_metadata_evaluation.csv"],
        "official_release": "Clotho v2.1",
        "official_clips": 1045,
        "skipped": 0,
        "source_ids": "freesound (clotho metadata sound_id)",
        "filters": [],
        "clips_found": len(names),
    }
    assert load_clotho(corpus, splits="train")["train"]["source_id"] == [None] * len(synthcaps["train"])


def test_missing_caption_5_column_warns_naming_the_file(tmp_path, synthcaps, caplog):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    _write(csv_path, [row[:5] for row in _read(csv_path)])
    with caplog.at_level(logging.WARNING):
        loaded = load_clotho(tmp_path, splits="validation")
    assert all(len(captions) == 4 for captions in loaded["validation"]["captions"])
    assert (
        "clotho_captions_validation.csv: no column caption_5; each clip gets 4 caption(s) where the corpus has 5"
        in caplog.text
    )


def test_split_left_empty_is_dropped_under_skip_and_refused_under_error(tmp_path, synthcaps, caplog):
    write_clotho_layout(synthcaps, tmp_path / "corpus")
    corpus = tmp_path / "corpus"
    shutil.rmtree(corpus / "validation")
    with caplog.at_level(logging.WARNING):
        loaded = load_clotho(corpus, missing="skip")
    assert list(loaded) == ["train", "test"]
    assert "Clotho: dropped empty split(s) 'validation'" in caplog.text
    csv_path = corpus / "clotho_captions_validation.csv"
    _write(csv_path, _read(csv_path)[:1])
    with pytest.raises(
        CorpusFormatError,
        match=r"Clotho: split\(s\) 'validation' \(.*clotho_captions_validation\.csv\) have no records",
    ):
        load_clotho(corpus)
    with pytest.raises(CorpusFormatError, match="Clotho: no clip could be loaded"):
        load_clotho(corpus, splits="validation", missing="skip")


def test_non_utf8_captions_need_encoding(tmp_path, synthcaps):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    rows = _read(csv_path)
    rows[1][1] = "A caf\u00e9 with people talking"
    csv_path.write_bytes("\n".join(",".join(f'"{v}"' for v in row) for row in rows).encode("cp1252"))
    with pytest.raises(CorpusFormatError, match=r"clotho_captions_validation\.csv, line 2: not valid utf-8"):
        load_clotho(tmp_path, splits="validation")
    loaded = load_clotho(tmp_path, splits="validation", encoding="cp1252")
    assert loaded["validation"][0]["captions"][0] == "A caf\u00e9 with people talking"
