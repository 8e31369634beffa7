"""hf_atr.data.caption_list: caption lists for ``hf-atr index --captions`` in text, CSV and JSON-lines layouts."""

from __future__ import annotations

import pytest

from hf_atr.data.caption_list import read_caption_list
from hf_atr.data.corpus_utils import CorpusFormatError, MetadataEncodingError


def test_text_file_one_caption_per_line(tmp_path):
    path = tmp_path / "sounds.txt"
    path.write_text("a dog barks\n\n  rain on a tin roof \n")
    listed = read_caption_list(path)
    assert listed.ids == ["sounds.txt:1", "sounds.txt:3"] and listed.captions == [
        "a dog barks",
        "rain on a tin roof",
    ]


def test_clotho_and_audiocaps_csv_layouts(tmp_path):
    clotho = tmp_path / "clotho_captions_evaluation.csv"
    clotho.write_text(
        'file_name,caption_1,caption_2\nWind Tunnel.wav,"Wind howls, loudly.",\nrain.wav,Rain falls.,Drops.\n'
    )
    listed = read_caption_list(clotho)
    assert listed.ids == ["Wind Tunnel.wav#0", "rain.wav#0", "rain.wav#1"]
    assert listed.captions == ["Wind howls, loudly.", "Rain falls.", "Drops."]
    audiocaps = tmp_path / "val.csv"
    audiocaps.write_text("audiocap_id,youtube_id,start_time,caption\n97151,vfY_TJq7n_U,130,Rustling occurs\n")
    assert read_caption_list(audiocaps).ids == ["val.csv:2"]
    with_ids = tmp_path / "mine.csv"
    with_ids.write_text("id,caption\nbark,A dog barks\n")
    assert read_caption_list(with_ids).ids == ["bark"]


def test_json_lines(tmp_path):
    path = tmp_path / "captions.jsonl"
    path.write_text('{"caption": "a dog barks", "id": "bark"}\n\n{"caption": "thunder"}\n')
    listed = read_caption_list(path)
    assert listed.ids == ["bark", "captions.jsonl:3"] and listed.captions == ["a dog barks", "thunder"]


@pytest.mark.parametrize(
    ("name", "content", "error", "message"),
    [
        (
            "c.csv",
            "file_name,text\nx.wav,hi\n",
            CorpusFormatError,
            r"c\.csv, line 1: header \['file_name', 'text'\] has no 'caption'",
        ),
        ("c.csv", "id,caption\na,\n", CorpusFormatError, r"c\.csv, line 2: the caption is empty\."),
        (
            "c.jsonl",
            '{"caption": "ok"}\n[1, 2]\n',
            CorpusFormatError,
            r'c\.jsonl, line 2: expected an object with a non-empty "caption"',
        ),
        ("c.jsonl", "{oops\n", CorpusFormatError, r"c\.jsonl, line 1: not JSON"),
        ("c.txt", "\n\n", CorpusFormatError, r"c\.txt holds no caption\."),
        ("c.md", "a dog\n", CorpusFormatError, r"a caption list is one of \['\.txt', '\.csv', '\.jsonl'\]"),
    ],
)
def test_bad_caption_lists_name_the_file_and_line(tmp_path, name, content, error, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(error, match=message):
        read_caption_list(path)


def test_missing_file_and_wrong_encoding(tmp_path):
    with pytest.raises(FileNotFoundError, match="Caption list not found"):
        read_caption_list(tmp_path / "nothing.txt")
    path = tmp_path / "latin.txt"
    path.write_bytes("un chien aboie très fort\n".encode("cp1252"))
    with pytest.raises(MetadataEncodingError, match=r"latin\.txt, line 1: not valid utf-8"):
        read_caption_list(path)
    assert read_caption_list(path, encoding="cp1252").captions == ["un chien aboie très fort"]
