"""What the search page answers, without gradio: the hits of ``hf-atr search``, the messages for queries it cannot
answer, and excerpts that start where the match starts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
from sound_library import EVENT_AT, LONG_RECORDING

from hf_atr.app import results
from hf_atr.app.results import (
    EMPTY_TEXT_QUERY,
    NO_AUDIO_QUERY,
    ExcerptWriter,
    QueryError,
    SearchResult,
    search_example,
    search_text,
)
from hf_atr.cli import main

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""


def cli_hits(library, capsys, *query: str, top_k: int = 3) -> list[dict]:
    capsys.readouterr()
    argv = ["search", "--model", str(library.model_dir), "--index", str(library.index_dir), "--json"]
    assert main([*argv, "--top-k", str(top_k), *query]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_text_query_gives_the_hits_of_hf_atr_search(library, pipe, capsys):
    answer = search_text(pipe, "a dog barks", top_k=3)
    assert answer.hits == cli_hits(library, capsys, "a dog barks")
    assert json.loads(answer.hits_json()) == answer.hits
    assert [result.rank for result in answer.results] == [1, 2, 3]
    assert [(result.id, result.score, result.path) for result in answer.results] == [
        (hit["id"], hit["score"], hit["path"]) for hit in answer.hits
    ]
    assert answer.query == "“a dog barks”"


def test_query_by_example_finds_the_long_recording_at_its_event(library, pipe, capsys):
    answer = search_example(pipe, library.query, top_k=2)
    assert answer.hits == cli_hits(library, capsys, "--audio", str(library.query), top_k=2)
    best = answer.results[0]
    assert best.id == LONG_RECORDING and best.start <= EVENT_AT and best.end >= EVENT_AT + 0.5
    assert best.span == f"{best.start:.2f}–{best.end:.2f} s"
    assert answer.query == "sounds like query.wav"


@pytest.mark.parametrize("text", [None, "", "   \n"])
def test_an_empty_text_query_is_refused_with_what_to_do(pipe, text):
    with pytest.raises(QueryError) as error:
        search_text(pipe, text, top_k=3)
    assert str(error.value) == EMPTY_TEXT_QUERY


def test_a_missing_audio_query_is_refused(pipe):
    with pytest.raises(QueryError, match=f"^{NO_AUDIO_QUERY}$"):
        search_example(pipe, None, top_k=3)


def test_an_unreadable_upload_is_named_by_its_file_name(pipe, tmp_path):
    upload = tmp_path / "upload-cache" / "notes.wav"
    upload.parent.mkdir()
    upload.write_text("these are notes, not audio")
    with pytest.raises(QueryError) as error:
        search_example(pipe, upload, top_k=3)
    assert str(error.value) == (
        "notes.wav cannot be used as a query: the audio is unreadable or corrupt (Format not recognised). Give "
        "an audio file (WAV, FLAC, OGG, MP3, ...)."
    )


def test_a_text_query_naming_a_missing_audio_file_says_so(pipe):
    with pytest.raises(
        QueryError, match="The query 'take 3.wav' looks like an audio file path, but there is no"
    ):
        search_text(pipe, "take 3.wav", top_k=3)


def stored_samples(path, start: float, end: float) -> np.ndarray:
    samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return samples[round(start * rate) : round(end * rate)]


def test_the_excerpt_of_a_windowed_hit_starts_at_its_span(library, pipe, tmp_path):
    best = search_example(pipe, library.query, top_k=1).results[0]
    writer = ExcerptWriter(tmp_path / "excerpts")
    excerpt = writer.excerpt(best)
    played, rate = soundfile.read(excerpt, dtype="float32", always_2d=True)
    assert rate == 16000 and soundfile.info(excerpt).subtype == "PCM_16"
    expected = stored_samples(library.audio_dir / LONG_RECORDING, best.start, best.end)
    assert played.shape == expected.shape
    np.testing.assert_allclose(played, expected, atol=1 / 32768)  # 16-bit PCM of the stored float samples
    tone_at = round((EVENT_AT - best.start) * rate)  # the loud tone is where it is in the recording
    assert np.abs(played[tone_at : tone_at + 800]).max() > 0.4 > np.abs(played[: max(tone_at - 160, 0)]).max()
    modified = excerpt.stat().st_mtime_ns
    assert writer.excerpt(best) == excerpt and excerpt.stat().st_mtime_ns == modified  # written once


def test_a_hit_without_a_span_plays_from_the_start_of_its_file_at_most_the_cap(
    library, tmp_path, monkeypatch
):
    monkeypatch.setattr(results, "MAX_EXCERPT_SECONDS", 4.0)
    path = library.audio_dir / LONG_RECORDING
    whole_file = SearchResult(1, LONG_RECORDING, 0.5, path=str(path))
    played, _ = soundfile.read(ExcerptWriter(tmp_path).excerpt(whole_file), dtype="float32", always_2d=True)
    np.testing.assert_allclose(played, stored_samples(path, 0.0, 4.0), atol=1 / 32768)
    long_span = SearchResult(1, LONG_RECORDING, 0.5, path=str(path), start=10.0, end=30.0)
    played, _ = soundfile.read(ExcerptWriter(tmp_path).excerpt(long_span), dtype="float32", always_2d=True)
    np.testing.assert_allclose(played, stored_samples(path, 10.0, 14.0), atol=1 / 32768)


def test_a_hit_that_cannot_be_played_says_why(tmp_path):
    writer = ExcerptWriter(tmp_path)
    with pytest.raises(QueryError, match="clip_7 cannot be played: the index records no folder for its ids"):
        writer.excerpt(SearchResult(1, "clip_7", 0.5))
    gone = SearchResult(1, "gone.wav", 0.5, path=str(tmp_path / "gone.wav"), start=0.0, end=1.0)
    with pytest.raises(QueryError, match=r"^gone\.wav cannot be played: the audio file does not exist\.$"):
        writer.excerpt(gone)
