"""``--dtype`` of hf-atr index, search, serve and evaluate: the model loaded and run in that precision, the index
recording it, search showing it, and the combinations refused with a message."""

from __future__ import annotations

import json

import pytest
import torch
from cli_runner import run_cli
from safetensors import safe_open

from hf_atr.cli import main
from hf_atr.commands import common
from hf_atr.commands.common import MODEL_DTYPES, probe_dtype


def embedding_dtype(index_dir) -> str:
    with safe_open(index_dir / "audio_index.safetensors", framework="pt") as handle:
        return handle.metadata()["embedding_dtype"]


@pytest.fixture(scope="module")
def bfloat16_index(model_dir, audio_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "bf16"
    argv = [
        "index",
        "--model",
        str(model_dir),
        "--audio-dir",
        str(audio_dir),
        "--out",
        str(out),
        "--dtype",
        "bfloat16",
    ]
    assert run_cli(argv) == 0
    return out


def test_index_records_the_dtype_and_search_shows_it(model_dir, bfloat16_index, capsys, caplog):
    assert embedding_dtype(bfloat16_index) == "bfloat16"
    capsys.readouterr()
    assert run_cli(["search", "--model", str(model_dir), "--index", str(bfloat16_index), "a dog barks"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == (
        "Query: 'a dog barks'  (index embeddings computed in bfloat16, the query in float32)"
    )
    assert caplog.text.count("The index's embeddings were computed in bfloat16") == 1
    caplog.clear()
    argv = ["search", "--model", str(model_dir), "--index", str(bfloat16_index), "--dtype", "bfloat16", "dog"]
    assert run_cli(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == "Query: 'dog'  (index embeddings computed in bfloat16)"
    assert "computed in bfloat16 and" not in caplog.text
    argv = [
        "search",
        "--model",
        str(model_dir),
        "--index",
        str(bfloat16_index),
        "--dtype",
        "float16",
        "--json",
        "dog",
    ]
    assert run_cli(argv) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3


def test_appending_in_another_dtype_is_refused(model_dir, audio_dir, bfloat16_index):
    argv = ["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(bfloat16_index),
            "--append", "--dtype", "float16"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"^hf-atr index --append: The index holds embeddings computed in bfloat16, "
                                         r"and this model computes in float16: load the model in bfloat16"):  # fmt: skip
        run_cli(argv)
    assert run_cli([*argv[:-1], "bfloat16"]) == 0  # the same precision appends (nothing new: all indexed)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_evaluate_runs_in_half_precision(model_dir, saved_split, tmp_path, dtype):
    output = tmp_path / "metrics.json"
    argv = ["evaluate", "--model", str(model_dir), "--dataset", str(saved_split), "--split", "validation",
            "--output", str(output), "--dtype", dtype]  # fmt: skip
    assert run_cli(argv) == 0
    metrics = json.loads(output.read_text())["metrics"]
    assert metrics["a2t_R@5"] == 1.0 and 0.0 <= metrics["t2a_R@1"] <= 1.0  # tied captions: see test_evaluate


def test_serve_loads_the_model_in_the_dtype(model_dir, bfloat16_index, monkeypatch):
    pytest.importorskip("gradio")
    loaded = {}

    def stop_after_loading(model, **kwargs):
        loaded.update(kwargs)
        raise SystemExit("loaded")

    monkeypatch.setattr("hf_atr.commands.serve.load_retrieval_pipeline", stop_after_loading)
    with pytest.raises(SystemExit, match="^loaded$"):
        main(["serve", "--model", str(model_dir), "--index", str(bfloat16_index), "--dtype", "bfloat16"])
    assert loaded["dtype"] is torch.bfloat16


@pytest.mark.parametrize("dtype", MODEL_DTYPES)
def test_every_dtype_runs_on_this_cpu(dtype):
    probe_dtype(getattr(torch, dtype), torch.device("cpu"))


def test_a_dtype_torch_cannot_run_here_is_refused_with_what_to_use(model_dir, saved_split, monkeypatch):
    def unsupported(dtype, device):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")

    monkeypatch.setattr(common, "probe_dtype", unsupported)
    argv = ["evaluate", "--model", str(model_dir), "--dataset", str(saved_split), "--split", "validation",
            "--dtype", "float16"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"^--dtype float16: torch .* cannot run a model in float16 on cpu "
                                         r"\(\"addmm_impl_cpu_\" not implemented for 'Half'\); use bfloat16 there\.$"):  # fmt: skip
        run_cli(argv)
