"""hf-atr demo's command line: its options and their checks (the demo itself: tests/test_demo.py)."""

from __future__ import annotations

import pytest

from hf_atr.cli import main
from hf_atr.demo import run_demo


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
