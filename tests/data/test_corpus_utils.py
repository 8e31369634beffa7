from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, load_from_disk

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    MetadataEncodingError,
    assemble_splits,
    check_caption_slots,
    expand_path,
    export_dataset_dict,
    read_csv_records,
)


def test_expand_path_expands_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand_path("~/corpus/a.csv") == tmp_path / "corpus" / "a.csv"
    (tmp_path / "meta.csv").write_text("file_name,caption\na.wav,a dog\n", encoding="utf-8")
    header, records = read_csv_records("~/meta.csv", ("file_name",))
    assert header == ["file_name", "caption"] and records[0].values["caption"] == "a dog"


@pytest.mark.parametrize(
    ("text", "codec", "line", "guess"),
    [
        (
            "file_name,caption\na.wav,A dog barks\nCafé crème.wav,People talk in a café\n",
            "cp1252",
            3,
            "cp1252",
        ),
        ("file_name,caption\na.wav,개가 짖고 멀리서 자동차 소리가 들린다\n", "cp949", 2, "cp949"),
    ],
    ids=["cp1252", "korean-cp949"],
)
def test_non_utf8_csv_names_file_line_and_encoding_or_reads_with_encoding(tmp_path, text, codec, line, guess):
    path = tmp_path / "captions.csv"
    path.write_bytes(text.encode(codec))
    with pytest.raises(
        MetadataEncodingError,
        match=rf"captions\.csv, line {line}: not valid utf-8 \(byte 0x[0-9a-f]{{2}} at offset \d+\); "
        rf"try encoding='{guess}' \(charset-normalizer's guess\), or re-save the file as UTF-8\.",
    ):
        read_csv_records(path, ("file_name",))
    _, records = read_csv_records(path, ("file_name",), encoding=codec)
    assert records[-1].values == dict(zip(["file_name", "caption"], text.splitlines()[-1].split(",")))
    with pytest.raises(ValueError, match="encoding='no-such-codec' is not a text encoding"):
        read_csv_records(path, ("file_name",), encoding="no-such-codec")


def test_encoding_error_line_is_the_line_of_the_bad_byte(tmp_path):
    path = tmp_path / "captions.csv"
    path.write_bytes(b"file_name,caption\na.wav,fine\nb.wav,\xe9t\xe9\nc.wav,fine\n")
    with pytest.raises(MetadataEncodingError, match=r"captions\.csv, line 3: not valid utf-8 \(byte 0xe9"):
        read_csv_records(path, ())


def test_a_utf8_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("file_name,caption\na.wav,x\n".encode("utf-8-sig"))
    assert read_csv_records(path, ("file_name",))[0] == ["file_name", "caption"]


@pytest.mark.parametrize(
    ("columns", "expected", "message"),
    [
        (
            ["caption_1", "caption_2", "caption_3", "caption_4"],
            5,
            "no column caption_5; each clip gets 4 caption",
        ),
        (["caption_1", "caption_2", "caption_4"], None, "no column caption_3; each clip gets 3 caption"),
    ],
)
def test_check_caption_slots_warns_naming_the_file(caplog, columns, expected, message):
    with caplog.at_level(logging.WARNING):
        check_caption_slots("val.csv", columns, expected)
    assert f"val.csv: {message}" in caplog.text


def test_check_caption_slots_is_quiet_for_complete_columns(caplog):
    with caplog.at_level(logging.WARNING):
        check_caption_slots("val.csv", [f"caption_{k}" for k in range(1, 6)], 5)
        check_caption_slots("train.csv", ["caption"], 5)
    assert caplog.text == ""


def _split(rows: int) -> Dataset:
    return Dataset.from_dict({"audio_id": [str(index) for index in range(rows)]})


def test_assemble_splits_drops_or_refuses_empty_splits(caplog):
    splits = {"train": _split(2), "test": _split(0)}
    sources = {"train": "train.csv", "test": "test.csv"}
    with pytest.raises(CorpusFormatError, match=r"Corpus: split\(s\) 'test' \(test\.csv\) have no records"):
        assemble_splits(splits, "Corpus", "error", sources)
    with caplog.at_level(logging.WARNING):
        assembled = assemble_splits(splits, "Corpus", "skip", sources)
    assert list(assembled) == ["train"]
    assert "Corpus: dropped empty split(s) 'test' (test.csv)" in caplog.text
    with pytest.raises(CorpusFormatError, match="Corpus: no clip could be loaded"):
        assemble_splits({"test": _split(0)}, "Corpus", "skip", sources)


def test_export_never_writes_an_empty_split(tmp_path, caplog):
    args = argparse.Namespace(output_dir=tmp_path / "out", parquet=False, embed_audio=False, push_to_hub=None)
    with caplog.at_level(logging.WARNING):
        export_dataset_dict(DatasetDict({"train": _split(2), "test": _split(0)}), args)
    assert "Not writing empty split(s) ['test']" in caplog.text
    assert list(load_from_disk(str(Path(args.output_dir)))) == ["train"]
    with pytest.raises(ValueError, match="Every split is empty"):
        export_dataset_dict(DatasetDict({"test": _split(0)}), args)
