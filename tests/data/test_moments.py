"""load_moments: the Moment-DETR JSON Lines of CASTELLA and Clotho-Moment (as Lighthouse releases them)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import Audio

from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.moments import WINDOW_TOLERANCE_S, load_moment_splits, load_moments, moment_recordings
from hf_atr.data.schema import corpus_provenance

RATE = 8000

# Lines in the layout of line/lighthouse data/castella/castella_val_release.jsonl (whole seconds, windows out of
# order, one ending a second past the duration); the recordings are shortened to keep the test fast.
CASTELLA_LINES = [
    {"qid": "rwb6PSAee5Y_1", "query": "Someone opens and closes a door", "duration": 7, "vid": "rwb6PSAee5Y",
     "relevant_windows": [[2, 3]]},
    {"qid": "rwb6PSAee5Y_2", "query": "A toilet is flushing", "duration": 7, "vid": "rwb6PSAee5Y",
     "relevant_windows": [[5, 7], [3, 4]]},
    {"qid": "sC_i_y7QS1U_1", "query": "A man is talking while a motorcycle engine is running", "duration": 5,
     "vid": "sC_i_y7QS1U", "relevant_windows": [[1, 6]]},
]  # fmt: skip

# The layout of data/clotho_moment/clotho_moment_val_release.jsonl: numeric qids as strings, fg_dB beside.
CLOTHO_MOMENT_LINES = [
    {"qid": "32701", "query": "Various items being moved around.", "duration": 6, "vid": "Singapore_8.0_68.0",
     "relevant_windows": [[0.6, 2.6]], "fg_dB": -0.698513274532198},
    {"qid": "32702", "query": "Water is dripping gurgling.", "duration": 6, "vid": "Singapore_8.0_68.0",
     "relevant_windows": [[3.1, 5.1]], "fg_dB": -2.469317098936675},
]  # fmt: skip


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def _write_recordings(audio_dir: Path, records: list[dict], extension: str = "wav") -> None:
    audio_dir.mkdir(parents=True, exist_ok=True)
    for record in records:
        noise = np.random.default_rng(0).standard_normal(int(record["duration"] * RATE)).astype(np.float32)
        soundfile.write(audio_dir / f"{record['vid']}.{extension}", 0.1 * noise, RATE)


@pytest.fixture
def castella(tmp_path):
    _write_recordings(tmp_path / "audio", CASTELLA_LINES)
    return _write_jsonl(tmp_path / "castella_val_release.jsonl", CASTELLA_LINES)


def test_castella_lines_load_one_row_per_query_with_its_recording(castella, caplog):
    with caplog.at_level(logging.WARNING):
        moments = load_moments(castella)
    assert moments.column_names == ["audio", "recording_id", "duration", "qid", "query", "windows"]
    assert isinstance(moments.features["audio"], Audio) and not moments.features["audio"].decode
    assert moments["qid"] == ["rwb6PSAee5Y_1", "rwb6PSAee5Y_2", "sC_i_y7QS1U_1"]
    assert moments["recording_id"] == ["rwb6PSAee5Y", "rwb6PSAee5Y", "sC_i_y7QS1U"]
    assert moments["duration"] == [7.0, 7.0, 5.0]
    # Windows keep the file's order; the one a second past the 5-s recording is clipped, with a warning.
    assert moments["windows"] == [[[2.0, 3.0]], [[5.0, 7.0], [3.0, 4.0]], [[1.0, 5.0]]]
    assert "clipped 1 window(s)" in caplog.text and "line 3: [1, 6] -> [1, 5]" in caplog.text
    assert moments[0]["audio"]["path"] == str(castella.parent / "audio" / "rwb6PSAee5Y.wav")
    provenance = corpus_provenance(moments)
    assert provenance["split"] == "validation" and provenance["recordings"] == 2


def test_clotho_moment_lines_load_and_their_extra_fields_are_ignored(tmp_path):
    _write_recordings(tmp_path / "wav", CLOTHO_MOMENT_LINES, extension="flac")
    path = _write_jsonl(tmp_path / "clotho_moment_val_release.jsonl", CLOTHO_MOMENT_LINES)
    moments = load_moments(path, audio_dir=tmp_path / "wav")
    assert moments["qid"] == ["32701", "32702"] and "fg_dB" not in moments.column_names
    assert moments["windows"] == [[[0.6, 2.6]], [[3.1, 5.1]]]
    recordings, recording_of = moment_recordings(moments)
    assert recordings["recording_id"] == ["Singapore_8.0_68.0"] and recording_of == [0, 0]


def test_each_recording_is_listed_once_for_any_selection(castella):
    moments = load_moments(castella)
    recordings, recording_of = moment_recordings(moments)
    assert recordings["recording_id"] == ["rwb6PSAee5Y", "sC_i_y7QS1U"] and recording_of == [0, 0, 1]
    assert recordings["duration"] == [7.0, 5.0]
    assert [recordings[index]["audio"] for index in recording_of] == moments["audio"]
    recordings, recording_of = moment_recordings(moments.select([2, 1]))
    assert recordings["recording_id"] == ["sC_i_y7QS1U", "rwb6PSAee5Y"] and recording_of == [0, 1]


def test_an_integer_qid_becomes_its_decimal_string(tmp_path):
    lines = [{**CLOTHO_MOMENT_LINES[0], "qid": 32701}]
    _write_recordings(tmp_path, lines)
    assert load_moments(_write_jsonl(tmp_path / "q.jsonl", lines))["qid"] == ["32701"]


def _error(tmp_path: Path, lines: list[dict], error=CorpusFormatError) -> str:
    _write_recordings(
        tmp_path / "audio", [line for line in lines if "vid" in line and "duration" in line][:1]
    )
    path = _write_jsonl(tmp_path / "moments.jsonl", lines)
    with pytest.raises(error) as raised:
        load_moments(path)
    return str(raised.value)


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ([3, 3], r"line 1: relevant_windows\[0\] \[3, 3\] has start >= end\."),
        ([4, 2], r"line 1: relevant_windows\[0\] \[4, 2\] has start >= end\."),
        (
            [2, 9],
            r"line 1: relevant_windows\[0\] \[2, 9\] lies outside the recording \[0, 7\] by more than 1 s",
        ),
        ([-2, 1], r"line 1: relevant_windows\[0\] \[-2, 1\] lies outside the recording"),
        ([7, 8], r"line 1: relevant_windows\[0\] \[7, 8\] lies outside the recording"),
        ([2], r"line 1: relevant_windows\[0\] \[2\] is not \[start, end\] in seconds\."),
        (["2", 3], r"line 1: relevant_windows\[0\] \['2', 3\] is not \[start, end\] in seconds\."),
    ],
)
def test_a_bad_window_is_an_error_naming_the_file_and_line(tmp_path, window, message):
    text = _error(tmp_path, [{**CASTELLA_LINES[0], "relevant_windows": [window]}])
    assert re.search(message, text) and str(tmp_path / "moments.jsonl") in text
    assert WINDOW_TOLERANCE_S == 1.0


def test_a_window_within_the_rounding_is_clipped(tmp_path):
    lines = [{**CASTELLA_LINES[0], "relevant_windows": [[-0.5, 2], [6, 8]]}]
    _write_recordings(tmp_path, lines)
    assert load_moments(_write_jsonl(tmp_path / "m.jsonl", lines))["windows"] == [[[0.0, 2.0], [6.0, 7.0]]]


def test_a_duplicated_qid_names_both_lines(tmp_path):
    text = _error(tmp_path, [CASTELLA_LINES[0], {**CASTELLA_LINES[1], "qid": "rwb6PSAee5Y_1"}])
    assert text.endswith("moments.jsonl, line 2: qid 'rwb6PSAee5Y_1' is already on line 1.")


def test_two_durations_for_one_recording_are_an_error(tmp_path):
    text = _error(tmp_path, [CASTELLA_LINES[0], {**CASTELLA_LINES[1], "duration": 8}])
    assert text.endswith("line 2: recording 'rwb6PSAee5Y' has duration 8, but 7 on line 1.")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"relevant_windows": None}, "line 1: no field(s) ['relevant_windows']"),
        ({"duration": 0}, "line 1: duration 0 is not a positive number of seconds."),
        ({"query": " "}, "line 1: query ' ' is empty or not a string."),
        ({"qid": True}, "line 1: qid True is not a non-empty string or an integer."),
        ({"vid": "../x"}, "line 1: vid '../x' is not a recording name"),
        ({"relevant_windows": []}, "line 1: relevant_windows [] is not a non-empty list of [start, end]."),
    ],
)
def test_a_malformed_line_is_an_error_naming_it(tmp_path, change, message):
    line = {key: value for key, value in {**CASTELLA_LINES[0], **change}.items() if value is not None}
    assert message in _error(tmp_path, [line])


def test_a_line_that_is_not_json_is_named(tmp_path):
    _write_recordings(tmp_path, CASTELLA_LINES[:1])
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(CASTELLA_LINES[0]) + "\n\n{'qid': 1}\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"m\.jsonl, line 3: not a JSON object"):
        load_moments(path)


def test_a_missing_recording_is_an_error_or_skipped(tmp_path, caplog):
    _write_recordings(tmp_path / "audio", CASTELLA_LINES[:1])
    path = _write_jsonl(tmp_path / "moments.jsonl", CASTELLA_LINES)
    with pytest.raises(
        FileNotFoundError, match=r"moments\.jsonl, line 3: no recording sC_i_y7QS1U\.<ext> in "
    ):
        load_moments(path)
    with caplog.at_level(logging.WARNING):
        moments = load_moments(path, missing="skip")
    assert moments["qid"] == ["rwb6PSAee5Y_1", "rwb6PSAee5Y_2"]
    assert "skipped 1 clip(s)/row(s)" in caplog.text and corpus_provenance(moments)["skipped"] == 1


def test_an_unreadable_or_ambiguous_recording_is_named(tmp_path):
    (tmp_path / "audio").mkdir()
    (tmp_path / "audio" / "rwb6PSAee5Y.wav").write_bytes(b"not audio")
    path = _write_jsonl(tmp_path / "moments.jsonl", CASTELLA_LINES[:1])
    with pytest.raises(ValueError, match=r"moments\.jsonl, line 1: .*rwb6PSAee5Y\.wav"):
        load_moments(path)
    _write_recordings(tmp_path / "audio", CASTELLA_LINES[:1], extension="flac")
    with pytest.raises(
        CorpusFormatError, match=r"recording 'rwb6PSAee5Y' is ambiguous: \['rwb6PSAee5Y\.flac', "
    ):
        load_moments(path)


def test_translated_queries_ride_along(castella, caplog):
    japanese = [{"qid": "rwb6PSAee5Y_1", "query": "誰かがドアを開け閉めする"}]
    with caplog.at_level(logging.WARNING):
        moments = load_moments(
            castella, translations={"ja": _write_jsonl(castella.parent / "ja.jsonl", japanese)}
        )
    assert moments["translations"] == [{"jpn": ["誰かがドアを開け閉めする"]}, {"jpn": None}, {"jpn": None}]
    assert "2 of 3 queries have no translation" in caplog.text
    stray = _write_jsonl(castella.parent / "stray.jsonl", [{"qid": "nope_1", "query": "x"}])
    with pytest.raises(CorpusFormatError, match=r"stray\.jsonl, line 1: qid 'nope_1' is not a query"):
        load_moments(castella, translations={"jpn": stray})


def test_every_release_file_of_a_folder_is_a_split(tmp_path):
    _write_recordings(tmp_path / "audio", CASTELLA_LINES + CLOTHO_MOMENT_LINES)
    _write_jsonl(tmp_path / "castella_train_release.jsonl", CASTELLA_LINES)
    _write_jsonl(tmp_path / "castella_val_release.jsonl", CLOTHO_MOMENT_LINES)
    corpus = load_moment_splits(tmp_path)
    assert list(corpus) == ["train", "validation"] and len(corpus["train"]) == 3
    assert list(load_moment_splits(tmp_path, splits=["val"])) == ["validation"]
    with pytest.raises(FileNotFoundError, match=r"No moment file for split\(s\) \['test'\]"):
        load_moment_splits(tmp_path, splits="test")
    _write_jsonl(tmp_path / "other_valid_release.jsonl", CLOTHO_MOMENT_LINES)
    with pytest.raises(CorpusFormatError, match="two files for split 'validation'"):
        load_moment_splits(tmp_path)
