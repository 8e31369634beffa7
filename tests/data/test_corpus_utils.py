from __future__ import annotations

import csv
import logging
import re

import pytest
from datasets import Dataset

from hf_atr.data.corpus_utils import (
    CorpusFormatError,
    MetadataEncodingError,
    assemble_splits,
    check_caption_slots,
    expand_path,
    read_csv_records,
)


def test_expand_path_expands_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand_path("~/corpus/a.csv") == tmp_path / "corpus" / "a.csv"
    (tmp_path / "meta.csv").write_text("file_name,caption\na.wav,a dog\n", encoding="utf-8")
    header, records = read_csv_records("~/meta.csv", ("file_name",))
    assert header == ["file_name", "caption"] and records[0].values["caption"] == "a dog"


@pytest.mark.parametrize(
    ("text", "codec", "line", "reading"),
    [
        (
            "file_name,caption\na.wav,A dog barks\nCafé crème.wav,People talk in a café\n",
            "cp1252",
            3,
            "Café crème.wav,People talk in a café",
        ),
        (
            "file_name,caption\na.wav,개가 짖고 멀리서 자동차 소리가 들린다\n",
            "cp949",
            2,
            "a.wav,개가 짖고 멀리서 자동차 소리가 들린다",
        ),
        # charset-normalizer's first guess is wrong on these: the right encoding must still be offered.
        (
            'file_name,caption\ncafe.wav,"Chatter in a café, a spoon on a saucer — très calme."\n',
            "cp1252",
            2,
            "…Chatter in a café, a spoon on a saucer — très calm…",
        ),
        ("file_name,caption\na.wav,Niño en la calle\n", "latin-1", 2, "a.wav,Niño en la calle"),
        (
            "file_name,caption\na.wav,雨の音と遠くの車が通り過ぎる、静かな夜の住宅街で犬が二回吠える\n",
            "shift_jis",
            2,
            None,
        ),
    ],
    ids=["cp1252", "korean-cp949", "cp1252-ranked-second", "latin-1", "shift-jis"],
)
def test_non_utf8_csv_names_file_line_and_encodings_with_their_readings(tmp_path, text, codec, line, reading):
    path = tmp_path / "captions.csv"
    path.write_bytes(text.encode(codec))
    with pytest.raises(MetadataEncodingError) as error:
        read_csv_records(path, ("file_name",))
    message = str(error.value)
    assert re.match(
        rf".*captions\.csv, line {line}: not valid utf-8 \(byte 0x[0-9a-f]{{2}} at offset \d+\); pass the "
        r"encoding= under which that line reads right: in '.*' it reads '.*', or re-save the file as UTF-8\.$",
        message,
    )
    offered = dict(re.findall(r"in ('[^']+'(?: or '[^']+')*) it reads '(.*?)'(?:;|, or re-save)", message))
    right_line = text.splitlines()[line - 1]
    right = [names for names, text_read in offered.items() if text_read.strip("…") in right_line]
    assert len(right) == 1 and len(offered) > 1  # the right reading is among others to tell it from
    if reading is not None:
        assert offered[right[0]] == reading
    encoding = right[0].split(" or ")[0].strip("'")
    _, records = read_csv_records(path, ("file_name",), encoding=encoding)
    assert list(records[-1].values.values()) == next(csv.reader([right_line]))
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
