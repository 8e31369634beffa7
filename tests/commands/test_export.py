"""``hf-atr export``: the command line around hf_atr.export."""

from __future__ import annotations

import json

import pytest
from export_models import build_family

from hf_atr.cli import main


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("export-command")
    model, processor = build_family("demo", directory / "build")
    model.save_pretrained(directory / "model")
    processor.save_pretrained(directory / "model")
    return directory / "model"


def test_sentence_transformers_format_writes_a_folder(saved_model, tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    assert (
        main(
            [
                "export",
                "--model",
                str(saved_model),
                "--format",
                "sentence-transformers",
                "--out",
                str(tmp_path / "st"),
            ]
        )
        == 0
    )
    config = json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())
    assert config["similarity_fn_name"] == "cosine"
    assert "sentence-transformers folder" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--format", "sentence-transformers", "--quantize", "int8"],
            "--quantize applies to --format onnx only",
        ),
        (["--format", "onnx"], "exists and is not an empty directory"),
    ],
)
def test_bad_command_lines_are_refused(saved_model, tmp_path, extra, message):
    out = tmp_path / "out"
    if "onnx" in extra:
        out.mkdir()
        (out / "stale.txt").write_text("x")
    with pytest.raises(SystemExit, match=message):
        main(["export", "--model", str(saved_model), "--out", str(out), *extra])


@pytest.mark.slow
def test_onnx_format_with_int8_reports_each_checked_graph(saved_model, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "onnx"
    assert (
        main(
            [
                "export",
                "--model",
                str(saved_model),
                "--format",
                "onnx",
                "--out",
                str(out),
                "--quantize",
                "int8",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "text_encoder.onnx (text, dynamo exporter): max |ONNX Runtime - torch|" in printed
    assert "audio_encoder.int8.onnx (audio, int8 dynamic quantisation)" in printed
    info = json.loads((out / "onnx_export.json").read_text())
    assert info["quantized"] == {"text": "text_encoder.int8.onnx", "audio": "audio_encoder.int8.onnx"}
