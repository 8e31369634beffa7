from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms

from hf_atr.data.audio import encode_wav

SCRIPT = Path(__file__).parents[2] / "examples" / "zero_shot_folder.py"


def test_labels_from_file_names_skipped_files_and_report(tmp_path, capsys):
    audio = tmp_path / "audio"
    audio.mkdir()
    names = ["dog.wav", "birds1.wav", "birds2.wav", "car-horn.wav"]
    for name, waveform in zip(names, random_waveforms(4)):
        (audio / name).write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype="FLOAT"))
    (audio / "broken.wav").write_bytes(b"not a wav file")
    (audio / "notes.txt").write_text("not audio")
    processor = make_processor()
    make_model(processor=processor).save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    script = runpy.run_path(str(SCRIPT))
    assert [script["label_of"](Path(name)) for name in names] == ["dog", "birds", "birds", "car_horn"]
    argv = ["--model", str(tmp_path / "model"), "--audio-dir", str(audio), "--report", str(tmp_path / "report"),
            "--output-json", str(tmp_path / "out.json")]  # fmt: skip
    metrics = script["main"](argv)
    output = capsys.readouterr().out
    assert "Skipped 1 unreadable file(s): broken.wav" in output
    assert "4 clips, 3 classes" in output and "birds2.wav" in output
    assert set(metrics) == {"accuracy", "balanced_accuracy", "mAP@10", "class_to_audio_mAP@10"}
    written = json.loads((tmp_path / "out.json").read_text())
    assert set(written["predictions"]) == set(names) and written["metrics"] == metrics
    assert (tmp_path / "report" / "report.html").is_file()
    (audio / "broken.wav").unlink()
    for name in names:
        (audio / name).unlink()
    with pytest.raises(SystemExit, match="No readable audio files"):
        script["main"](argv)
