"""The lines of a moment annotation file, read and checked one by one (hf_atr.data.moment_annotations)."""

from __future__ import annotations

import json

import pytest

from hf_atr.data.corpus_utils import CorpusFormatError, CorpusProblems
from hf_atr.data.moment_annotations import MomentQuery, read_queries, read_translations

LINES = [
    {"qid": 7, "query": " A dog barks", "duration": 10, "vid": "park", "relevant_windows": [[1, 2.5]]},
    {"qid": "8", "query": "Rain", "duration": 10, "vid": "park", "relevant_windows": [[3, 3]]},
    {"qid": "9", "query": "A bell", "duration": 6, "vid": "hall", "relevant_windows": [[5, 7]],
     "source_audio_id": "bell_01", "source_id": "clotho:bell_01"},
]  # fmt: skip


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_each_good_line_is_one_query_and_a_bad_one_is_left_out_under_skip(tmp_path):
    path = write_lines(tmp_path / "m.jsonl", LINES)
    queries = read_queries(path, CorpusProblems("skip", "moments", "test"))
    assert queries == [
        MomentQuery(1, "7", " A dog barks", 10.0, "park", [[1.0, 2.5]], None, None),
        MomentQuery(3, "9", "A bell", 6.0, "hall", [[5.0, 7.0]], "bell_01", "clotho:bell_01"),
    ]
    with pytest.raises(CorpusFormatError, match=r"line 2: relevant_windows\[0\] \[3, 3\] has no length"):
        read_queries(path, CorpusProblems("error", "moments", "test"))


def test_translations_are_read_against_the_queries(tmp_path):
    path = write_lines(tmp_path / "m.jsonl", LINES[:1])
    queries = read_queries(path, CorpusProblems("error", "moments", "test"))
    translated = write_lines(tmp_path / "ja.jsonl", [{"qid": "7", "query": "犬が吠える"}])
    assert read_translations(translated, queries) == {"7": ["犬が吠える"]}
    unknown = write_lines(tmp_path / "de.jsonl", [{"qid": "99", "query": "Regen"}])
    with pytest.raises(CorpusFormatError, match="qid '99' is not a query of the annotation file"):
        read_translations(unknown, queries)
