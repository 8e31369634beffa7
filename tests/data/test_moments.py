"""load_moments: the Moment-DETR JSON Lines of CASTELLA and Clotho-Moment (as Lighthouse releases them)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import Audio

from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.moments import (
    load_moment_splits,
    load_moments,
    moment_recordings,
    query_text_for_model,
    windows_inside,
)
from hf_atr.data.schema import corpus_provenance
from hf_atr.metrics.moments import moment_retrieval_metrics
from tests.moment_reference import brute_force_moment_metrics

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


def _write_recordings(audio_dir: Path, records: list[dict], extension: str = "wav", rate: int = RATE) -> None:
    audio_dir.mkdir(parents=True, exist_ok=True)
    for record in records:
        noise = np.random.default_rng(0).standard_normal(int(record["duration"] * rate)).astype(np.float32)
        soundfile.write(audio_dir / f"{record['vid']}.{extension}", 0.1 * noise, rate)


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
    # Windows as released, in the file's order; the one a second past the 5-s recording is kept and counted.
    assert moments["windows"] == [[[2.0, 3.0]], [[5.0, 7.0], [3.0, 4.0]], [[1.0, 6.0]]]
    assert "1 window(s) run outside their recording [0, duration]. They are kept as released" in caplog.text
    assert "line 3: relevant_windows[0] [1, 6] ends 1 s past the end of the 5-s recording" in caplog.text
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


# The windows of released files that run outside their recording (CASTELLA's train, val and test files, a UnAV-100
# subset): each loads with the defaults, kept as released, and is described in the one warning.
OUTSIDE_PATTERNS = {
    "one second past the end": (
        299, [118, 300], "ends 1 s past the end of the 299-s recording"
    ),
    "starting exactly at the end": (
        69, [69, 70], "starts at the end of the 69-s recording and ends 1 s past it: none of it is inside"
    ),
    "starting at the end, ending 3 s past it": (
        298, [298, 301], "starts at the end of the 298-s recording and ends 3 s past it: none of it is inside"
    ),
    "far past the end": (
        299, [299, 4800], "starts at the end of the 299-s recording and ends 4501 s past it: none of it is inside"
    ),
    "two seconds past the end": (
        299, [298, 301], "ends 2 s past the end of the 299-s recording"
    ),
    "wholly past the end": (
        60, [61.5, 63], "starts 1.5 s past the end of the 60-s recording and ends 3 s past it: none of it is inside"
    ),
    "before the start": (
        60, [-0.5, 2], "starts 0.5 s before the start of the 60-s recording"
    ),
    "on both sides": (
        60, [-1, 61], "starts 1 s before the start of the 60-s recording and ends 1 s past the end of the 60-s recording"
    ),
    "wholly before the start": (
        60, [-3, -1], "ends 1 s before the start of the 60-s recording: none of it is inside"
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("duration", "window", "note"), OUTSIDE_PATTERNS.values(), ids=list(OUTSIDE_PATTERNS)
)
def test_a_window_outside_its_recording_is_kept_as_released_and_described(
    tmp_path, caplog, duration, window, note
):
    lines = [
        {"qid": "in_1", "query": "A dog barks", "duration": duration, "vid": "in", "relevant_windows": [[2, 3]]},
        {"qid": "out_1", "query": "A door slams", "duration": duration, "vid": "out",
         "relevant_windows": [[10, 20], window]},
    ]  # fmt: skip
    _write_recordings(tmp_path / "audio", lines, rate=100)
    path = _write_jsonl(tmp_path / "castella_train_release.jsonl", lines)
    with caplog.at_level(logging.WARNING):
        moments = load_moments(path)
    assert moments["qid"] == ["in_1", "out_1"]
    assert moments["windows"] == [[[2.0, 3.0]], [[10.0, 20.0], [float(window[0]), float(window[1])]]]
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning == (
        f"{path}: 1 window(s) run outside their recording [0, duration]. They are kept as released (the metric "
        "reads them); training crops and the timeline figure clip them to the recording and skip those left with "
        f"no length:\n  {path}, line 2: relevant_windows[1] {window!r} {note}"
    )


def test_many_windows_outside_are_counted_in_one_warning_showing_the_first_five(tmp_path, caplog):
    lines = [
        {"qid": f"r{n}_1", "query": "A bell rings", "duration": 69, "vid": f"r{n}", "relevant_windows": [[69, 70]]}
        for n in range(8)
    ]  # fmt: skip
    _write_recordings(tmp_path / "audio", lines, rate=10)
    with caplog.at_level(logging.WARNING):
        assert len(load_moments(_write_jsonl(tmp_path / "m.jsonl", lines))) == 8
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.startswith(f"{tmp_path / 'm.jsonl'}: 8 window(s) run outside their recording")
    assert [line.split(": relevant")[0] for line in warning.splitlines()[1:]] == [
        *(f"  {tmp_path / 'm.jsonl'}, line {n}" for n in range(1, 6)),
        "  ... and 3 more",
    ]


def test_scores_against_a_loaded_set_equal_those_against_the_released_lines(tmp_path):
    lines = [
        {"qid": "a_1", "query": "A dog barks", "duration": 69, "vid": "a", "relevant_windows": [[60, 69], [69, 70]]},
        {"qid": "b_1", "query": "A car passes", "duration": 299, "vid": "b", "relevant_windows": [[299, 4800]]},
        {"qid": "b_2", "query": " Rain falls", "duration": 299, "vid": "b", "relevant_windows": [[298, 301]]},
        {"qid": "c_1", "query": "Birds sing", "duration": 30, "vid": "c", "relevant_windows": [[-1, 4], [10, 12]]},
    ]  # fmt: skip
    predictions = [
        {"qid": "a_1", "pred_relevant_windows": [[68.5, 70.0, 0.9], [60.0, 68.0, 0.8]]},
        {"qid": "b_1", "pred_relevant_windows": [[290.0, 299.0, 0.7], [299.0, 4000.0, 0.5]]},
        {"qid": "b_2", "pred_relevant_windows": [[298.0, 300.5, 0.6]]},
        {"qid": "c_1", "pred_relevant_windows": [[0.0, 4.0, 0.4], [10.0, 12.5, 0.3]]},
    ]
    _write_recordings(tmp_path / "audio", lines, rate=10)
    moments = load_moments(_write_jsonl(tmp_path / "m.jsonl", lines))
    loaded = [{"qid": q, "relevant_windows": w} for q, w in zip(moments["qid"], moments["windows"])]
    metrics = moment_retrieval_metrics(predictions, loaded)
    assert metrics == moment_retrieval_metrics(predictions, lines)
    reference = brute_force_moment_metrics(predictions, lines)
    assert metrics == pytest.approx(reference, abs=1e-12)
    # Clipped to the recordings, the same predictions would score otherwise: windows must stay as released.
    clipped = [
        {**line, "relevant_windows": windows_inside(line["relevant_windows"], line["duration"])}
        for line in lines
    ]
    assert (
        brute_force_moment_metrics(predictions, [line for line in clipped if line["relevant_windows"]])
        != reference
    )


def test_windows_inside_clips_to_the_recording_and_leaves_out_those_with_no_length():
    assert windows_inside([[1, 6], [69, 70], [-0.5, 2], [2, 3], [-3, -1], [-1, 61]], 5) == [
        [1.0, 5.0],
        [0.0, 2.0],
        [2.0, 3.0],
        [0.0, 5.0],
    ]
    assert windows_inside([[299, 4800], [298, 301]], 299) == [[298.0, 299.0]]
    assert windows_inside([[298, 301]], 298) == []


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ([3, 3], "relevant_windows[0] [3, 3] has no length (it starts and ends at 3 s); a window needs start < end."),
        ([4, 2], "relevant_windows[0] [4, 2] ends 2 s before it starts; a window needs start < end."),
        ([301, 298.5], "relevant_windows[0] [301, 298.5] ends 2.5 s before it starts; a window needs start < end."),
        ([2], "relevant_windows[0] [2] is not [start, end]: two finite numbers of seconds."),
        ([1, 2, 3], "relevant_windows[0] [1, 2, 3] is not [start, end]: two finite numbers of seconds."),
        (["2", 3], "relevant_windows[0] ['2', 3] is not [start, end]: two finite numbers of seconds."),
        ([None, 3], "relevant_windows[0] [None, 3] is not [start, end]: two finite numbers of seconds."),
        (2, "relevant_windows[0] 2 is not [start, end]: two finite numbers of seconds."),
    ],
)  # fmt: skip
def test_a_malformed_window_is_refused_or_its_query_skipped_naming_the_file_and_line(
    tmp_path, caplog, window, message
):
    lines = [
        {**CASTELLA_LINES[0], "relevant_windows": [window, [1, 2]]},
        {**CASTELLA_LINES[1], "relevant_windows": [[5, 7]]},
    ]
    _write_recordings(tmp_path / "audio", lines[:1])
    path = _write_jsonl(tmp_path / "moments.jsonl", lines)
    with pytest.raises(CorpusFormatError) as raised:
        load_moments(path)
    assert str(raised.value) == f"{path}, line 1: {message}"
    with caplog.at_level(logging.WARNING):
        moments = load_moments(path, missing="skip")
    assert moments["qid"] == ["rwb6PSAee5Y_2"] and corpus_provenance(moments)["skipped"] == 1
    assert f"skipped 1 clip(s)/row(s) (missing='skip'):\n  {path}, line 1: {message}" in caplog.text


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


def test_query_text_is_kept_as_released_and_the_model_reads_it_stripped(tmp_path):
    # Lighthouse's ActivityNet queries mostly start with a space; some Clotho-Moment and TACoS ones too.
    queries = [" A man plays a guitar.", "Water drips \n", "\u3000A bell rings", "Rain falls"]
    lines = [
        {"qid": f"v_{n}", "query": query, "duration": 7, "vid": "v", "relevant_windows": [[1, 2]]}
        for n, query in enumerate(queries)
    ]
    _write_recordings(tmp_path, lines[:1])
    path = _write_jsonl(tmp_path / "m.jsonl", lines)
    moments = load_moments(path)
    assert moments["query"] == queries
    # Written back, the loaded set is the file's text.
    released = [json.loads(line)["query"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert moments["query"] == released
    assert [query_text_for_model(query) for query in moments["query"]] == [
        "A man plays a guitar.",
        "Water drips",
        "A bell rings",
        "Rain falls",
    ]


def test_translated_queries_ride_along_as_released(castella, caplog):
    japanese = [{"qid": "rwb6PSAee5Y_1", "query": " 誰かがドアを開け閉めする"}]
    with caplog.at_level(logging.WARNING):
        moments = load_moments(
            castella, translations={"ja": _write_jsonl(castella.parent / "ja.jsonl", japanese)}
        )
    assert moments["translations"] == [{"jpn": [" 誰かがドアを開け閉めする"]}, {"jpn": None}, {"jpn": None}]
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
