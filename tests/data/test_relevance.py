"""Relevance judgements in both CSV layouts, resolved against a shared-schema dataset."""

from __future__ import annotations

import csv
import logging

import pytest
from datasets import Dataset

from hf_atr.data import load_relevance_judgements
from hf_atr.data.corpus_utils import CorpusFormatError


@pytest.fixture
def clips() -> Dataset:
    # Clotho-style: audio_id is the file name as written in the corpus (quotes, entities and all).
    return Dataset.from_dict(
        {
            "audio_id": ["bird_in_rain.wav", "woodsbirds.wav", "Scops owl&#39;s call.wav", "bridge.wav"],
            "captions": [
                ["Birds sing in the rain.", "Rain falls, birds chirp."],
                ["Birds chirp in the woods, then a bicycle passes."],
                ["An owl calls in the silent night."],
                ["Cars drive over a bridge."],
            ],
        }
    )


def write_csv(path, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)


def test_graded_pairs_with_threshold(tmp_path, clips):
    path = tmp_path / "judgements.csv"
    write_csv(
        path,
        [
            ["caption", "file_name", "relevance"],
            ["Birds sing in the rain.", "bird_in_rain.wav", "96"],
            ["Birds sing in the rain.", "woodsbirds.wav", "61"],
            ["Birds sing in the rain.", "bridge.wav", "3"],
            ["Cars drive over a bridge.", "bridge.wav", "55.5"],
            ["An owl calls in the silent night.", "bird_in_rain.wav", "12"],
        ],
    )
    assert load_relevance_judgements(path, clips, threshold=50) == {
        "Birds sing in the rain.": [0, 1],
        "Cars drive over a bridge.": [3],
    }
    assert load_relevance_judgements(path, clips, threshold=90) == {"Birds sing in the rain.": [0]}


def test_binary_pairs_need_no_threshold_and_graded_ones_do(tmp_path, clips):
    path = tmp_path / "binary.csv"
    write_csv(
        path,
        [
            ["caption", "file_name", "relevance"],
            ["An owl calls in the silent night.", "Scops owl&#39;s call.wav", "1"],
            ["An owl calls in the silent night.", "bird_in_rain.wav", "0"],
        ],
    )
    assert load_relevance_judgements(path, clips) == {"An owl calls in the silent night.": [2]}
    write_csv(
        path, [["caption", "file_name", "relevance"], ["Cars drive over a bridge.", "bridge.wav", "0.7"]]
    )
    with pytest.raises(
        CorpusFormatError, match=r"binary\.csv, line 2: field 'relevance' = '0\.7' is graded; pass threshold="
    ):
        load_relevance_judgements(path, clips)


def test_dcase2025_list_layout_and_home_expansion(tmp_path, clips, monkeypatch):
    # The layout of the DCASE 2025 task 6 baseline's resources/metadata_eval.csv: query, then a Python list
    # literal of the relevant file names (quoted when it holds commas).
    monkeypatch.setenv("HOME", str(tmp_path))
    write_csv(
        tmp_path / "metadata_eval.csv",
        [
            ["query", "audio_filenames"],
            ["Birds chirp in the woods, then a bicycle passes.", "['bird_in_rain.wav', 'woodsbirds.wav']"],
            ["An owl calls in the silent night.", "['Scops owl&#39;s call.wav']"],
            ["Cars drive over a bridge.", "[]"],
        ],
    )
    assert load_relevance_judgements("~/metadata_eval.csv", clips) == {
        "Birds chirp in the woods, then a bicycle passes.": [0, 1],
        "An owl calls in the silent night.": [2],
    }
    with pytest.raises(ValueError, match="threshold applies only to graded judgements"):
        load_relevance_judgements("~/metadata_eval.csv", clips, threshold=0.5)


def test_unknown_captions_and_files_raise_or_are_skipped(tmp_path, clips, caplog):
    path = tmp_path / "judgements.csv"
    write_csv(
        path,
        [
            ["caption", "file_name", "relevance"],
            ["Birds sing in the rain.", "bird_in_rain.wav", "1"],
            ["A dog barks.", "bird_in_rain.wav", "1"],
            ["Cars drive over a bridge.", "missing.wav", "1"],
            ["Cars drive over a bridge.", "bridge.wav", "1"],
        ],
    )
    with pytest.raises(
        ValueError,
        match=r"judgements\.csv, line 3: field 'caption' = 'A dog barks\.' is not an English caption",
    ):
        load_relevance_judgements(path, clips)
    with caplog.at_level(logging.WARNING):
        judged = load_relevance_judgements(path, clips, missing="skip")
    assert judged == {"Birds sing in the rain.": [0], "Cars drive over a bridge.": [3]}
    assert "skipped 2 clip(s)/row(s)" in caplog.text
    assert "line 4: field 'file_name' names 'missing.wav', which is no clip's audio_id" in caplog.text
    lists = tmp_path / "lists.csv"
    write_csv(
        lists, [["query", "audio_filenames"], ["Cars drive over a bridge.", "['bridge.wav', 'gone.wav']"]]
    )
    with pytest.raises(ValueError, match=r"lists\.csv, line 2: field 'audio_filenames' names 'gone\.wav'"):
        load_relevance_judgements(lists, clips)
    assert load_relevance_judgements(lists, clips, missing="skip") == {"Cars drive over a bridge.": [3]}


def test_captions_without_relevant_clip_are_left_out_with_a_warning(tmp_path, clips, caplog):
    path = tmp_path / "judgements.csv"
    write_csv(
        path,
        [["caption", "file_name", "relevance"], ["Cars drive over a bridge.", "bridge.wav", "20"]],
    )
    with caplog.at_level(logging.WARNING):
        assert load_relevance_judgements(path, clips, threshold=50) == {}
    assert "1 judged caption(s) have no relevant clip at threshold 50 and are left out" in caplog.text


@pytest.mark.parametrize(
    ("rows", "kwargs", "error", "message"),
    [
        ([["caption", "clip", "score"]], {}, CorpusFormatError, r"line 1: header .* is neither graded pairs"),
        (
            [["caption", "file_name", "relevance"], ["Cars drive over a bridge.", "bridge.wav", "high"]],
            {"threshold": 1},
            CorpusFormatError,
            r"line 2: field 'relevance' is not a number: 'high'",
        ),
        (
            [["caption", "file_name", "relevance"], ["Cars drive over a bridge.", "", "1"]],
            {},
            CorpusFormatError,
            r"line 2: empty file_name",
        ),
        (
            [
                ["caption", "file_name", "relevance"],
                ["Cars drive over a bridge.", "bridge.wav", "1"],
                ["Cars drive over a bridge.", "bridge.wav", "0"],
            ],
            {},
            CorpusFormatError,
            r"line 3: caption 'Cars drive over a bridge\.' and file_name 'bridge\.wav' are judged again \(first on line 2\)",
        ),
        (
            [["query", "audio_filenames"], ["Cars drive over a bridge.", "bridge.wav"]],
            {},
            CorpusFormatError,
            r"line 2: field 'audio_filenames' is not a list of file names: 'bridge\.wav'",
        ),
        (
            [
                ["query", "audio_filenames"],
                ["Cars drive over a bridge.", "['bridge.wav']"],
                ["Cars drive over a bridge.", "['woodsbirds.wav']"],
            ],
            {},
            CorpusFormatError,
            r"line 3: field 'query' = 'Cars drive over a bridge\.' is listed again \(first on line 2\)",
        ),
        ([["caption", "file_name", "relevance"]], {"threshold": float("nan")}, ValueError, "finite number"),
        ([["caption", "file_name", "relevance"]], {"missing": "ignore"}, ValueError, "missing='ignore'"),
    ],
)
def test_bad_files_name_file_line_field_and_value(tmp_path, clips, rows, kwargs, error, message):
    path = tmp_path / "bad.csv"
    write_csv(path, rows)
    with pytest.raises(error, match=message):
        load_relevance_judgements(path, clips, **kwargs)


def test_missing_file_and_dataset_columns(tmp_path, clips):
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_relevance_judgements(tmp_path / "nowhere.csv", clips)
    path = tmp_path / "judgements.csv"
    write_csv(path, [["caption", "file_name", "relevance"]])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['audio_id'\]"):
        load_relevance_judgements(path, clips.remove_columns("audio_id"))
