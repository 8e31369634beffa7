"""The page's moment view: the moments ``hf-atr search --moments`` finds, each with a waveform strip of its file
marking the moment and a player holding it; the strip's envelope against a brute-force reference."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import soundfile

from hf_atr.app import moment_view
from hf_atr.app.moment_view import STRIP_WIDTH, WaveformStrips, search_moments, strip_svg, waveform_envelope
from hf_atr.app.results import EMPTY_TEXT_QUERY, QueryError, SearchResult
from hf_atr.cli import main

TOP_K = 3
SPAN_RECT = re.compile(
    r'<rect class="moment-span" data-start="([\d.]+)" data-end="([\d.]+)" x="([\d.]+)" y="0" width="([\d.]+)"'
)


def cli_moments_json(library, capsys, query: str) -> str:
    capsys.readouterr()
    argv = [
        "search",
        "--model",
        str(library.model_dir),
        "--index",
        str(library.index_dir),
        "--moments",
        "--json",
    ]
    assert main([*argv, "--top-k", str(TOP_K), query]) == 0
    return capsys.readouterr().out.rstrip("\n")


def test_a_moment_query_finds_what_hf_atr_search_moments_prints(library, pipe, capsys):
    answer = search_moments(pipe, "a siren wails", TOP_K)
    assert answer.hits_json() == cli_moments_json(library, capsys, "a siren wails")  # byte for byte
    assert answer.unit == "moment" and answer.query == "“a siren wails”" and len(answer.hits) == TOP_K
    with pytest.raises(QueryError, match=re.escape(EMPTY_TEXT_QUERY)):
        search_moments(pipe, " ", TOP_K)
    with pytest.raises(
        QueryError, match="pipe.moments takes a text query, and 'dog.wav' names an audio file"
    ):
        search_moments(pipe, "dog.wav", TOP_K)


def test_the_page_shows_each_moment_on_its_files_strip_with_a_player_holding_it(library, pipe, tmp_path):
    gradio = pytest.importorskip("gradio")  # noqa: F841
    from hf_atr.app.search_page import SearchPage

    page = SearchPage(pipe, top_k=TOP_K, heading="", excerpt_dir=tmp_path)
    status, hits_json, *slots = page.moment_search("a siren wails")
    assert status.startswith(f"{TOP_K} moments for “a siren wails” (")
    for hit, (row, line, player) in zip(json.loads(hits_json), zip(slots[::3], slots[1::3], slots[2::3])):
        assert row.visible and f"{hit['start']:.2f}–{hit['end']:.2f} s" in line
        start, end, left, width = (float(value) for value in SPAN_RECT.search(line).groups())
        duration = soundfile.info(hit["path"]).duration
        assert (start, end) == pytest.approx((hit["start"], hit["end"]), abs=5.01e-4)  # written to 1 ms
        assert left == pytest.approx(hit["start"] / duration * STRIP_WIDTH, abs=0.01)
        assert width == pytest.approx(
            max((hit["end"] - hit["start"]) / duration * STRIP_WIDTH, 2.0), abs=0.01
        )
        assert soundfile.info(player).duration == pytest.approx(hit["end"] - hit["start"], abs=1e-3)
    assert "waveform-strip" not in page.text_search("a siren wails")[2 + 1]  # file queries keep their lines


def test_the_envelope_is_the_peak_of_each_stretch_read_block_by_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    stereo = (0.1 * rng.standard_normal((10_007, 2))).astype(np.float32)  # peaks far below 0.95
    stereo[5_000, 1] = -0.95  # the loudest sample, in the second channel
    path = tmp_path / "two channels.wav"
    soundfile.write(path, stereo, 8000, subtype="FLOAT")
    monkeypatch.setattr(moment_view, "BLOCK_FRAMES", 999)  # blocks that end inside bins
    peaks, duration = waveform_envelope(path, bins=37)
    loudest = np.abs(stereo).max(axis=1)
    bins = np.arange(len(loudest)) * 37 // len(loudest)
    expected = np.array([loudest[bins == index].max() for index in range(37)])
    np.testing.assert_array_equal(peaks, expected)
    assert duration == 10_007 / 8000 and peaks.max() == np.float32(0.95)


def test_a_strip_marks_its_span_and_stays_visible_for_a_short_moment():
    svg = strip_svg(np.array([0.1, 0.5, 0.2], dtype=np.float32), 3600.0, 1800.0, 1800.5)
    start, end, left, width = (float(value) for value in SPAN_RECT.search(svg).groups())
    assert (start, end, left, width) == (1800.0, 1800.5, 300.0, 2.0)
    assert (
        svg.startswith('<svg class="waveform-strip"')
        and "<title>1800.00–1800.50 s of 3600.00 s</title>" in svg
    )
    assert svg.count("M") == 3  # one bar per peak


def test_no_strip_without_a_readable_file(tmp_path):
    strips = WaveformStrips()
    assert strips.strip(SearchResult(1, "clip_7", 0.5)) == ""  # no path, no span
    missing = SearchResult(1, "gone.wav", 0.5, str(tmp_path / "gone.wav"), 1.0, 2.0)
    assert strips.strip(missing) == ""
    (tmp_path / "notes.wav").write_text("not audio")
    assert strips.strip(SearchResult(1, "notes.wav", 0.5, str(tmp_path / "notes.wav"), 1.0, 2.0)) == ""


@pytest.mark.slow
def test_the_served_page_answers_moment_queries_from_gradio_clients(library, pipe, capsys, tmp_path):
    pytest.importorskip("gradio")
    from gradio_client import Client

    from hf_atr.app.search_page import MOMENT_SEARCH_API, SearchPage

    blocks, url = SearchPage(pipe, top_k=TOP_K, heading="", excerpt_dir=tmp_path).launch("127.0.0.1")
    try:
        client = Client(url, verbose=False, download_files=str(tmp_path))
        status, hits_json, line, player, *_ = client.predict(
            "a siren wails", api_name=f"/{MOMENT_SEARCH_API}"
        )
        assert hits_json == cli_moments_json(library, capsys, "a siren wails")
        best = json.loads(hits_json)[0]
        assert status.startswith(f"{TOP_K} moments for") and 'class="waveform-strip"' in line
        assert soundfile.info(player).duration == pytest.approx(best["end"] - best["start"], abs=1e-3)
    finally:
        blocks.close()
