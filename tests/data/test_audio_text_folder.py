from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile

from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.audio_text_folder import load_audio_text_folder
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.schema import corpus_provenance


def _audio(path: Path, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, np.random.default_rng(seed).uniform(-0.5, 0.5, 800).astype(np.float32), 16000)


def _csv(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(record, ensure_ascii=False) for record in records), encoding="utf-8")
    return path


def test_top_metadata_csv_one_caption_per_row(tmp_path, monkeypatch, caplog):
    folder = tmp_path / "my sounds"
    _audio(folder / "rain on a tin roof.wav")
    _audio(folder / "birds" / "dawn chorus.flac", 1)
    _audio(folder / "not listed.wav", 2)
    _audio(folder / "._rain on a tin roof.wav", 3)
    _csv(
        folder / "metadata.csv",
        [
            ["file_name", "caption", "label", "source_id"],
            ["rain on a tin roof.wav", "Rain drums on a tin roof.", "rain", "freesound:1"],
            ["birds/dawn chorus.flac", "Birds sing at dawn.", "birds", ""],
            ["rain on a tin roof.wav", "Heavy rain, metal roof.", "rain", "freesound:1"],
        ],
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        loaded = load_audio_text_folder("~/my sounds")
    assert list(loaded) == ["train"]
    train = loaded["train"]
    assert train["audio_id"] == ["rain on a tin roof.wav", "birds/dawn chorus.flac"]
    assert train["captions"] == [
        ["Rain drums on a tin roof.", "Heavy rain, metal roof."],
        ["Birds sing at dawn."],
    ]
    assert train["label"] == ["rain", "birds"] and train["source_id"] == ["freesound:1", None]
    assert Path(train[1]["audio"]["path"]) == folder / "birds" / "dawn chorus.flac"
    assert "1 audio file(s) named by no metadata row: 'not listed.wav'" in caplog.text
    provenance = corpus_provenance(train)
    assert provenance["layout"] == "AudioFolder metadata" and provenance["metadata"] == ["metadata.csv"]
    assert provenance["clips_found"] == 2 and provenance["official_clips"] is None


def test_split_folders_with_jsonl_and_csv(tmp_path):
    _audio(tmp_path / "train" / "a.flac")
    _audio(tmp_path / "val" / "b.wav", 1)
    _audio(tmp_path / "eval" / "c.wav", 2)
    _jsonl(tmp_path / "train" / "metadata.jsonl", [{"file_name": "a.flac", "captions": ["a one", "a two"]}])
    _jsonl(
        tmp_path / "val" / "metadata.jsonl",
        [{"file_name": "b.wav", "caption": "b one", "audio_id": "clip-b"}],
    )
    _csv(
        tmp_path / "eval" / "metadata.csv",
        [["file_name", "caption_1", "caption_2"], ["c.wav", "c one", "c two"]],
    )
    loaded = load_audio_text_folder(tmp_path)
    assert sorted(loaded) == ["test", "train", "validation"]
    assert loaded["train"]["captions"] == [["a one", "a two"]]
    assert loaded["validation"]["audio_id"] == ["clip-b"]
    assert loaded["test"]["captions"] == [["c one", "c two"]]
    assert "label" not in loaded["test"].column_names
    assert list(load_audio_text_folder(tmp_path, splits=["eval"])) == ["test"]


def test_top_metadata_rows_go_to_the_split_of_their_folder(tmp_path):
    _audio(tmp_path / "train" / "a.wav")
    _audio(tmp_path / "test" / "b.wav", 1)
    _audio(tmp_path / "misc" / "c.wav", 2)
    _csv(
        tmp_path / "metadata.csv",
        [
            ["file_name", "captions"],
            ["train/a.wav", '["a", "aa"]'],
            ["test/b.wav", '["b"]'],
            ["misc/c.wav", '["c"]'],
        ],
    )
    loaded = load_audio_text_folder(tmp_path)
    assert loaded["train"]["audio_id"] == ["train/a.wav", "misc/c.wav"]
    assert loaded["train"]["captions"] == [["a", "aa"], ["c"]]
    assert loaded["test"]["audio_id"] == ["test/b.wav"]


@pytest.mark.parametrize(
    ("rows", "error", "message"),
    [
        ([["file_name", "caption"], ["absent.wav", "x"]], FileNotFoundError, r"metadata\.csv, line 3: audio file not found: .*absent\.wav"),
        ([["file_name", "caption"], ["a.wav", " "]], CorpusFormatError, r"metadata\.csv, line 3: empty or non-text caption\(s\) \[1\]"),
        ([["file_name", "captions"], ["a.wav", "just text"]], CorpusFormatError, r"line 3: 'captions' must be a list \(in CSV, a JSON list"),
        ([["file_name", "caption_1"], ["a.wav", "x"], ["a.wav", "y"]], CorpusFormatError, r"line 4: file_name 'a.wav' already at .*line 3"),
        ([["file_name", "caption"], ["bad.wav", "x"]], AudioDecodeError, r"line 3: .*unreadable or corrupt"),
        ([["file_name", "text"], ["a.wav", "x"]], CorpusFormatError, r"line 1: no caption column in \['file_name', 'text'\]"),
    ],
    ids=["missing-audio", "blank-caption", "captions-not-a-list", "duplicate", "corrupt-audio", "no-caption-column"],
)  # fmt: skip
def test_bad_rows_are_named_or_skipped(tmp_path, caplog, rows, error, message):
    _audio(tmp_path / "a.wav")
    _audio(tmp_path / "b.wav", 1)
    (tmp_path / "bad.wav").write_bytes(b"text renamed .wav")
    _csv(
        tmp_path / "metadata.csv",
        [rows[0], ["b.wav", *(["y"] if rows[0][1] != "captions" else ['["y"]'])], *rows[1:]],
    )
    with pytest.raises(error, match=message):
        load_audio_text_folder(tmp_path)
    if error is CorpusFormatError and "no caption column" in message:
        return
    with caplog.at_level(logging.WARNING):
        loaded = load_audio_text_folder(tmp_path, missing="skip")
    assert "b.wav" in loaded["train"]["audio_id"]
    assert "Audio folder split 'train': skipped 1 clip(s)/row(s)" in caplog.text


def test_folder_level_errors(tmp_path, caplog):
    with pytest.raises(
        FileNotFoundError, match=r"No metadata in .*: expected metadata\.csv or metadata\.jsonl"
    ):
        load_audio_text_folder(tmp_path)
    _audio(tmp_path / "a.wav")
    _jsonl(tmp_path / "metadata.jsonl", [{"file_name": "a.wav", "caption": "x"}])
    _csv(tmp_path / "metadata.csv", [["file_name", "caption"], ["a.wav", "x"]])
    with pytest.raises(CorpusFormatError, match="has both metadata.csv and metadata.jsonl; keep one"):
        load_audio_text_folder(tmp_path)
    (tmp_path / "metadata.csv").unlink()
    (tmp_path / "metadata.jsonl").write_text(
        '{"file_name": "a.wav", "caption": "x"}\n{"file_name": ', encoding="utf-8"
    )
    with pytest.raises(CorpusFormatError, match=r"metadata\.jsonl, line 2: not valid JSON"):
        load_audio_text_folder(tmp_path)
    _jsonl(
        tmp_path / "metadata.jsonl",
        [{"file_name": "a.wav", "caption": "x"}, {"file_name": "test/b.wav", "caption": "y"}],
    )
    with pytest.raises(FileNotFoundError, match=r"metadata\.jsonl, line 2: audio file not found: .*b\.wav"):
        load_audio_text_folder(tmp_path)
    with caplog.at_level(logging.WARNING):
        loaded = load_audio_text_folder(tmp_path, missing="skip")
    assert list(loaded) == ["train"] and "Audio folder: dropped empty split(s) 'test'" in caplog.text
    (tmp_path / "metadata.jsonl").rename(tmp_path / "train.jsonl")
    _jsonl(tmp_path / "train" / "metadata.jsonl", [{"file_name": "../a.wav", "caption": "x"}])
    _csv(tmp_path / "test" / "metadata.csv", [["file_name", "caption"]])
    with pytest.raises(
        CorpusFormatError, match=r"Audio folder: split\(s\) 'test' \(.*test/metadata\.csv\) have no records"
    ):
        load_audio_text_folder(tmp_path)
