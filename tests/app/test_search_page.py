"""The search page's behaviour: its functions as the page calls them, and the page served, queried through
gradio's own client (uploads included)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
from sound_library import EVENT_AT, LONG_RECORDING

gradio = pytest.importorskip("gradio")

from hf_atr.app.results import EMPTY_TEXT_QUERY  # noqa: E402
from hf_atr.app.search_page import EXAMPLE_SEARCH_API, TEXT_SEARCH_API, SearchPage  # noqa: E402
from hf_atr.cli import main  # noqa: E402

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

TOP_K = 2


@pytest.fixture(scope="module")
def page(pipe, tmp_path_factory):
    return SearchPage(
        pipe, top_k=TOP_K, heading="test library", excerpt_dir=tmp_path_factory.mktemp("excerpts")
    )


def slots(outputs: list) -> list[tuple[bool, str, str | None]]:
    """``(visible, line, player file)`` of each result slot, from a query's outputs."""
    rows = outputs[2:]
    return [(rows[i].visible, rows[i + 1], rows[i + 2]) for i in range(0, len(rows), 3)]


def cli_json(library, capsys, *query: str) -> str:
    capsys.readouterr()
    argv = ["search", "--model", str(library.model_dir), "--index", str(library.index_dir), "--json"]
    assert main([*argv, "--top-k", str(TOP_K), *query]) == 0
    return capsys.readouterr().out.rstrip("\n")


def test_a_text_query_lists_the_files_hf_atr_search_finds(library, page, capsys):
    status, hits_json, *_ = outputs = page.text_search("a siren wails")
    assert hits_json == cli_json(library, capsys, "a siren wails")  # the same text, byte for byte
    assert status.startswith("2 files for “a siren wails” (")
    hits = json.loads(hits_json)
    for (visible, line, player), hit in zip(slots(outputs), hits):
        shown_id = hit["id"].replace("_", "\\_")
        assert visible and f"<code>{shown_id}</code>" in line
        assert f"score {hit['score']:.4f}" in line and f"{hit['start']:.2f}–{hit['end']:.2f} s" in line
        assert soundfile.info(player).duration == pytest.approx(hit["end"] - hit["start"], abs=1e-3)


def test_an_audio_query_lists_the_long_recording_at_its_span_with_a_player_that_starts_there(
    library, page, capsys
):
    status, hits_json, *_ = outputs = page.example_search(str(library.query))
    assert hits_json == cli_json(library, capsys, "--audio", str(library.query))
    assert status.startswith("2 files for sounds like query.wav (")
    best = json.loads(hits_json)[0]
    visible, line, player = slots(outputs)[0]
    assert best["id"] == LONG_RECORDING and best["start"] <= EVENT_AT <= best["end"]
    assert (
        visible and f"**1.** <code>{LONG_RECORDING}</code> · {best['start']:.2f}–{best['end']:.2f} s" in line
    )
    played, rate = soundfile.read(player, dtype="float32")
    stored, _ = soundfile.read(library.audio_dir / LONG_RECORDING, dtype="float32")
    start = round(best["start"] * rate)
    np.testing.assert_allclose(played, stored[start : start + len(played)], atol=1 / 32768)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (lambda page, _: page.text_search("  "), EMPTY_TEXT_QUERY.replace("(", "\\(").replace(")", "\\)")),
        (
            lambda page, _: page.example_search(None),
            "No audio was given: drop, upload or record an audio file",
        ),
        (
            lambda page, bad: page.example_search(str(bad)),
            "notes.wav cannot be used as a query: the audio is",
        ),
    ],
    ids=["empty text", "no audio", "unreadable upload"],
)
def test_a_query_the_page_cannot_answer_shows_its_message_and_no_results(page, tmp_path, query, message):
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    status, hits_json, *_ = outputs = query(page, bad)
    assert status.startswith("<span class='search-error'>⚠ ") and message in status
    assert hits_json == "" and not any(visible for visible, _, _ in slots(outputs))


class _FixedHits:
    """A pipeline stand-in that returns ``hits`` (or raises ``error``) for any query."""

    def __init__(self, hits=(), error: Exception | None = None) -> None:
        self.hits, self.error = list(hits), error

    def __call__(self, *query, top_k, **by_example):
        if self.error is not None:
            raise self.error
        return self.hits[:top_k]


def test_an_unexpected_failure_is_a_message_on_the_page_not_a_traceback(tmp_path, caplog):
    page = SearchPage(
        _FixedHits(error=RuntimeError("faiss said no")), top_k=1, heading="", excerpt_dir=tmp_path
    )
    status, hits_json, *_ = page.text_search("a dog")
    assert status == (
        "<span class='search-error'>⚠ The search failed: RuntimeError: faiss said no \\(details in the "
        "terminal\\).</span>"
    )
    assert hits_json == ""


def test_names_are_shown_as_they_are_and_a_result_that_cannot_play_says_why(tmp_path):
    hits = [
        {
            "id": "a_b*c <1>.wav",
            "score": 0.5,
            "start": 1.0,
            "end": 2.0,
            "path": str(tmp_path / "a_b*c <1>.wav"),
        },
        {"id": "clip_7", "score": 0.25},
    ]
    page = SearchPage(_FixedHits(hits), top_k=3, heading="", excerpt_dir=tmp_path)
    outputs = page.text_search("a dog")
    (first_visible, first, first_player), (_, second, second_player), (third_visible, _, _) = slots(outputs)
    assert first_visible and not third_visible and first_player is None and second_player is None
    assert first.startswith("**1.** <code>a\\_b\\*c &lt;1&gt;.wav</code> · 1.00–2.00 s · score 0.5000")
    assert "a\\_b\\*c &lt;1&gt;.wav cannot be played: the audio file does not exist." in first
    assert second.startswith("**2.** <code>clip\\_7</code> · score 0.2500\n\n")  # no span, no path
    assert "clip\\_7 cannot be played: the index records no folder for its ids" in second


def test_top_k_must_be_positive(pipe):
    with pytest.raises(ValueError, match="top_k must be a positive integer, got 0"):
        SearchPage(pipe, top_k=0, heading="")


@pytest.mark.slow
def test_the_served_page_answers_gradio_clients_text_and_uploads(library, page, capsys, tmp_path):
    from gradio_client import Client, handle_file

    blocks, url = page.launch("127.0.0.1")
    try:
        assert url.startswith("http://127.0.0.1:")
        client = Client(url, verbose=False, download_files=str(tmp_path))
        status, hits_json, *_ = client.predict("a siren wails", api_name=f"/{TEXT_SEARCH_API}")
        assert hits_json == cli_json(library, capsys, "a siren wails")
        status, hits_json, *rest = client.predict(
            handle_file(library.query), api_name=f"/{EXAMPLE_SEARCH_API}"
        )
        best = json.loads(hits_json)[0]
        assert best["id"] == LONG_RECORDING and status.startswith("2 files for sounds like query.wav")
        player = rest[1]  # slot 1: line, player (a layout's visibility is no client output)
        assert soundfile.info(player).duration == pytest.approx(best["end"] - best["start"], abs=1e-3)
        bad = tmp_path / "notes.wav"
        bad.write_text("not audio")
        status, hits_json, *_ = client.predict(handle_file(bad), api_name=f"/{EXAMPLE_SEARCH_API}")
        assert "notes.wav cannot be used as a query: the audio is unreadable or corrupt" in status
        assert hits_json == ""
    finally:
        blocks.close()
