from __future__ import annotations

import csv
import re
import runpy
from pathlib import Path

import pytest
from tiny_models import make_model, make_processor

from hf_atr.data.synthcaps import write_esc50_layout
from hf_atr.data.synthcaps_audio import SOUND_EVENTS

SCRIPT = Path(__file__).parents[2] / "examples" / "zero_shot_esc50.py"


def test_counts_per_fold_and_no_metrics_for_a_fold_too_small(tmp_path, capsys):
    esc50 = write_esc50_layout(tmp_path / "esc50", clips_per_class=5, sampling_rate=16000, duration=0.5)
    with (esc50 / "meta" / "esc50.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    fold2 = [row["filename"] for row in rows if row["fold"] == "2"]
    for name in fold2[3:] + [row["filename"] for row in rows if row["fold"] == "3"]:
        (esc50 / "audio" / name).unlink()
    processor = make_processor("ast")
    model = make_model("ast", "bert", processor=processor)
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    main = runpy.run_path(str(SCRIPT))["main"]
    argv = [
        "--model",
        str(tmp_path / "model"),
        "--esc50-dir",
        str(esc50),
        "--missing",
        "skip",
        "--device",
        "cpu",
    ]
    results = main(argv)
    output = capsys.readouterr().out
    classes = len(SOUND_EVENTS)
    assert f"Zero-shot ESC-50, {classes} classes (chance accuracy 7.69 %)" in output
    assert re.search(r"^ +chance +7\.69 +7\.69 +22\.53 +—$", output, re.MULTILINE)  # 1/13, H_10/13
    assert f"fold1: {classes} clip(s)\n" in output
    assert f"fold2: 3 clip(s) < {classes} (--min-clips): no metrics" in output
    assert "fold3" not in output  # every clip skipped: the loader dropped the fold
    assert list(results) == ["fold1", "fold4", "fold5", "all"]
    assert results["all"]["clips"] == 3 * classes
    assert 0.0 <= results["fold1"]["accuracy"] <= 1.0
    assert list(main([*argv, "--min-clips", "3", "--folds", "2"])) == ["fold2"]
    with pytest.raises(SystemExit, match=r"No fold has at least 100 clips \(\{'fold2': 3\}\): no metrics"):
        main([*argv, "--min-clips", "100", "--folds", "2"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*argv[:3], str(tmp_path / "ESC-50-master"), *argv[4:]])
    error = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in error
    assert (
        f"error: Corpus metadata file not found: {tmp_path / 'ESC-50-master' / 'meta' / 'esc50.csv'}" in error
    )
