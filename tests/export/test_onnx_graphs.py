"""ONNX graphs of each tower family run in ONNX Runtime as the torch model encodes."""

from __future__ import annotations

import json

import pytest
import torch
from export_models import CAPTIONS, build_family, clips_within_window, window_seconds

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import encode_text
from hf_atr.export import onnx_graphs  # noqa: E402
from hf_atr.export.onnx_encoder import (
    OnnxDualEncoder,  # noqa: E402
    OnnxExportError,
)
from hf_atr.export.onnx_graphs import audio_exporter, export_onnx
from hf_atr.pipelines.index_storage import model_fingerprint  # noqa: E402

PARITY_BOUND = 1e-4
ONNX_FAMILIES = ["demo", "clap", "panns", "whisper", "pe-audio", "st-text"]
EXPORTERS = {"pe-audio": "legacy"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each family exported once: ``{family: (model, processor, directory)}``, built on first use. The demo
    family's export carries int8 graphs beside its float32 ones."""
    directory = tmp_path_factory.mktemp("onnx")
    built = {}

    def exported(family: str):
        if family not in built:
            model, processor = build_family(family, directory / family / "source")
            quantize = "int8" if family == "demo" else None
            export_onnx(model, processor, directory / family / "onnx", quantize=quantize)
            built[family] = (model, processor, directory / family / "onnx")
        return built[family]

    return exported


@pytest.mark.slow
@pytest.mark.parametrize("family", ONNX_FAMILIES)
def test_embeddings_match_torch_for_batches_of_1_and_7_and_two_clip_lengths(family, exports):
    model, processor, directory = exports(family)
    encoder = OnnxDualEncoder(directory)
    info = encoder.export_info
    assert info["graphs"]["audio"]["exporter"] == audio_exporter(model) == EXPORTERS.get(family, "dynamo")
    assert info["graphs"]["text"]["exporter"] == "dynamo"
    for batch in (1, 7):
        captions = CAPTIONS[:batch]
        error = (
            (encode_text(encoder, processor, captions) - encode_text(model, processor, captions)).abs().max()
        )
        assert error < PARITY_BOUND
        for seconds in window_seconds(family):
            rows = [{"audio": clip} for clip in clips_within_window(processor, batch, seconds, seed=batch)]
            error = (
                (encode_audio(encoder, processor, rows) - encode_audio(model, processor, rows)).abs().max()
            )
            assert error < PARITY_BOUND, (batch, seconds, float(error))


def test_pe_audio_graph_takes_any_number_of_samples_with_its_mask(exports):
    model, processor, directory = exports("pe-audio")
    info = json.loads((directory / "onnx_export.json").read_text())
    assert info["graphs"]["audio"]["dynamic_axes"]["input_values"] == {"0": "batch", "2": "samples"}
    assert info["graphs"]["audio"]["dynamic_axes"]["audio_attention_mask"] == {"0": "batch", "1": "samples"}
    assert "audio_attention_mask" in info["graphs"]["audio"]["inputs"]
    assert info["audio_time_axis"] == "samples (dynamic)"
    assert not model.training  # the TorchScript exporter's train-mode wrapper leaves the model in eval mode


def test_export_file_carries_scoring_fingerprint_and_scores(exports):
    model, processor, directory = exports("demo")
    encoder = OnnxDualEncoder(directory)
    info = encoder.export_info
    assert info["fingerprint"] == encoder.fingerprint == model_fingerprint(model)
    assert (info["scoring"], info["projection_dim"], info["audio_time_axis"]) == (
        "cosine",
        64,
        "fixed by the feature extractor",
    )
    text_embeds = encode_text(model, processor, CAPTIONS[:3])
    audio_embeds = torch.nn.functional.normalize(
        torch.randn(4, 64, generator=torch.Generator().manual_seed(0)), dim=-1
    )
    with torch.no_grad():
        assert torch.equal(
            encoder.scoring_head(text_embeds, audio_embeds), model.scoring_head(text_embeds, audio_embeds)
        )
    assert (directory / "config.json").is_file() and (directory / "processor_config.json").is_file()


@pytest.mark.slow
def test_mahalanobis_head_and_its_map_travel_with_the_export(tmp_path):
    model, processor = build_family("demo", tmp_path / "source", scoring="mahalanobis")
    with torch.no_grad():
        factor = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
        model.scoring_head.metric_matrix.copy_(factor @ factor.T / 64)
    export_onnx(model, processor, tmp_path / "onnx")
    encoder = OnnxDualEncoder(tmp_path / "onnx")
    embeds = encode_text(model, processor, CAPTIONS[:3])
    assert torch.equal(encoder.scoring_head.transform(embeds), model.scoring_head.transform(embeds))
    square_root = torch.tensor(encoder.export_info["metric_square_root"])
    assert (embeds @ square_root - model.scoring_head.transform(embeds)).abs().max() < 1e-5


def test_fused_clap_is_refused_with_the_reason(tmp_path):
    model, processor = build_family("clap-fused", tmp_path / "source")
    with pytest.raises(
        OnnxExportError, match=r"Fused CLAP cannot be exported to ONNX.*--format sentence-transformers"
    ):
        export_onnx(model, processor, tmp_path / "onnx")


@pytest.mark.slow
def test_a_graph_outside_the_tolerance_fails_the_export(tmp_path, monkeypatch):
    model, processor = build_family("panns", tmp_path / "source")
    monkeypatch.setattr(onnx_graphs, "PARITY_TOLERANCE", -1.0)
    with pytest.raises(
        OnnxExportError, match=r"text graph text_encoder.onnx differs from the torch model by"
    ):
        export_onnx(model, processor, tmp_path / "onnx")


def test_int8_graphs_are_smaller_and_rank_captions_as_float32(exports):
    model, processor, directory = exports("demo")
    info = json.loads((directory / "onnx_export.json").read_text())
    assert info["quantized"] == {"text": "text_encoder.int8.onnx", "audio": "audio_encoder.int8.onnx"}
    for modality, file in info["quantized"].items():
        float_size = (directory / info["graphs"][modality]["file"]).stat().st_size
        assert (directory / file).stat().st_size < float_size
    int8 = OnnxDualEncoder(directory, precision="int8")
    float32 = OnnxDualEncoder(directory)
    quantized, reference = encode_text(int8, processor, CAPTIONS), encode_text(float32, processor, CAPTIONS)
    assert not torch.equal(quantized, reference)
    assert (quantized * reference).sum(
        -1
    ).min() > 0.9  # unit vectors: cosine of each caption to its float32 self
