"""hf-atr demo's command line: its options and their checks (the demo itself: tests/test_demo.py)."""

from __future__ import annotations

import shlex

import pytest

from hf_atr import demo
from hf_atr.cli import main
from hf_atr.data.synthcaps_audio import SOUND_EVENTS
from hf_atr.data.synthcaps_grammar import event_phrase
from hf_atr.demo import DemoResult, run_demo


def test_cli_demo_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for option in ("--output-dir", "--objective", "--max-steps", "--epochs", "--threads"):
        assert option in help_text


def test_a_thread_count_below_one_is_refused():
    with pytest.raises(SystemExit, match=r"^hf-atr demo: --threads must be at least 1, got 0\.$"):
        main(["demo", "--threads", "0"])
    with pytest.raises(ValueError, match=r"^threads must be at least 1, got 0\.$"):
        run_demo("unused", threads=0)


def test_the_closing_search_suggestion_is_a_synthcaps_event(tmp_path, monkeypatch, capsys):
    """The demo ends by suggesting an ``hf-atr search`` whose query names a sound of synthcaps (what the demo model
    was trained on), read off the printed command line."""
    result = DemoResult(
        metrics={},
        chance_r1=0.01,
        model_dir=tmp_path / "model",
        index_dir=tmp_path / "index",
        audio_dir=tmp_path,
    )
    monkeypatch.setattr(demo, "run_demo", lambda *args, **kwargs: result)
    monkeypatch.setattr(demo, "format_results_table", lambda result: "")
    assert main(["demo", "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    suggested = [shlex.split(line) for line in printed if line.strip().startswith("hf-atr search")]
    assert len(suggested) == 1
    *command, query = suggested[0]
    assert command == ["hf-atr", "search", "--model", str(result.model_dir), "--index", str(result.index_dir)]
    sounds = {event_phrase(event) for event in SOUND_EVENTS if event != "silence"}
    assert query in sounds, (query, sorted(sounds))
