"""The retrieval pipeline and ``hf-atr search`` on an ONNX export, against an index built by the torch model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from export_models import CAPTIONS, build_family, clips_within_window
from transformers import pipeline

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hf_atr.cli import main  # noqa: E402
from hf_atr.export.onnx_encoder import OnnxDualEncoder  # noqa: E402
from hf_atr.export.onnx_graphs import export_onnx  # noqa: E402

TASK = "audio-text-retrieval"
SCORE_BOUND = 1e-4
QUERIES = ["a dog barks twice", "birds sing", "rain"]


@pytest.fixture(scope="module")
def torch_and_onnx(tmp_path_factory):
    """The demo model saved, an index of 7 clips and 7 captions built by torch, and the model's ONNX export."""
    directory = tmp_path_factory.mktemp("onnx-pipeline")
    model, processor = build_family("demo", directory / "source")
    model.save_pretrained(directory / "model")
    processor.save_pretrained(directory / "model")
    torch_pipe = pipeline(TASK, model=str(directory / "model"))
    clips = clips_within_window(processor, 7, 0.9)
    for index, clip in enumerate(clips):  # a tone of its own per clip, so the clips score far apart
        clip += 0.3 * np.sin(2 * np.pi * (300 + 450 * index) * np.arange(len(clip)) / processor.sampling_rate)
    torch_pipe.index(clips, ids=[f"clip_{index}" for index in range(7)], show_progress=False)
    torch_pipe.index(CAPTIONS, show_progress=False)
    torch_pipe.save_index(directory / "index")
    export_onnx(model, processor, directory / "onnx")
    return torch_pipe, directory, clips


def _assert_same_hits(torch_hits, onnx_hits):
    torch_scores = [hit["score"] for hit in torch_hits]
    assert min(np.abs(np.diff(torch_scores))) > 4 * SCORE_BOUND  # the margins are wide: the order cannot flip
    assert [hit["id"] for hit in onnx_hits] == [hit["id"] for hit in torch_hits]
    assert np.abs(np.array([hit["score"] for hit in onnx_hits]) - torch_scores).max() < SCORE_BOUND


@pytest.mark.slow
def test_onnx_pipeline_ranks_a_torch_index_as_torch_does(torch_and_onnx):
    torch_pipe, directory, clips = torch_and_onnx
    onnx_pipe = pipeline(TASK, model=str(directory / "onnx"), backend="onnx", index_dir=directory / "index")
    assert isinstance(onnx_pipe.model, OnnxDualEncoder)
    for query in QUERIES:
        _assert_same_hits(torch_pipe(query, top_k=4), onnx_pipe(query, top_k=4))
    _assert_same_hits(torch_pipe(clips[2], top_k=4), onnx_pipe(clips[2], top_k=4))


def test_backend_must_match_the_folder(torch_and_onnx):
    _, directory, _ = torch_and_onnx
    with pytest.raises(
        ValueError, match=r"backend='onnx' needs the folder `hf-atr export --format onnx` wrote"
    ):
        pipeline(TASK, model=str(directory / "model"), backend="onnx")
    with pytest.raises(ValueError, match=r"holds an ONNX export: pass backend='onnx'"):
        pipeline(TASK, model=str(directory / "onnx"))


def test_search_command_on_an_onnx_export(torch_and_onnx, capsys):
    torch_pipe, directory, _ = torch_and_onnx
    argv = ["search", "--model", str(directory / "onnx"), "--index", str(directory / "index"), "--json"]
    assert main([*argv, "--top-k", "4", QUERIES[0]]) == 0
    hits = json.loads(capsys.readouterr().out)
    _assert_same_hits(torch_pipe(QUERIES[0], top_k=4), hits)
