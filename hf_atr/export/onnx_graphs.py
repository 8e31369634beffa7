"""The two encoders of a model as ONNX graphs, each checked in ONNX Runtime before the export reports success.

``export_onnx(model, processor, out)`` writes:

- ``text_encoder.onnx``: the tokenizer's outputs (``input_ids``, ``attention_mask``, and ``token_type_ids`` for a
  tokenizer that makes them) → ``text_embeds: (batch, projection_dim)``, ``get_text_features``; batch and text length
  are dynamic;
- ``audio_encoder.onnx``: the processor's audio outputs → ``audio_embeds: (batch, projection_dim)``,
  ``get_audio_features``; the batch is dynamic, the time axis fixed by the extractor (AST, CLAP, Whisper, PANNs pad or
  cut every clip to their window) or dynamic in samples with its padding mask (PE-Audio);
- the processor's files, the model's ``config.json`` and :data:`~hf_atr.export.onnx_encoder.EXPORT_FILE` (scoring, logit scales and bias,
  embedding size, the Mahalanobis map ``M^{1/2}``, the fingerprint the retrieval index checks, the graphs' inputs,
  exporters and measured parity).

Embeddings are those of the torch model: L2-normalised as the scoring head scores them (not for ``"dot"``). Torch's
dynamo exporter writes every graph but PE-Audio's audio graph, for which it writes a graph ONNX Runtime cannot load
(a float/int64 ``Div`` of transformers' masked GroupNorm): that one comes from the TorchScript exporter
(:data:`LEGACY_EXPORTER_FAMILIES`). Fused CLAP is refused: its ``is_longer`` branch indexes the batch by data.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..deprecation import moved_names
from ..modeling_atr import AtrDualEncoderModel
from ..pipelines.index_storage import model_fingerprint
from ..processing_atr import AtrProcessor
from . import onnx_encoder
from .onnx_encoder import onnx_feed
from .sentence_transformers_format import metric_square_root
from .waveform_graph import WAVEFORM_FAMILIES, WAVEFORM_GRAPH, export_waveform_graph

TEXT_GRAPH = "text_encoder.onnx"
AUDIO_GRAPH = "audio_encoder.onnx"
EXPORT_FORMAT_VERSION = 1
PARITY_TOLERANCE = 1e-4
"""Largest absolute difference between ONNX Runtime's and torch's embeddings that an export accepts."""
LEGACY_EXPORTER_FAMILIES = frozenset({"pe_audio_encoder"})
"""Audio tower types whose graph comes from torch's TorchScript exporter (``dynamo=False``): the dynamo exporter
writes a graph ONNX Runtime rejects for them."""
PROBE_CAPTIONS = ("a dog barks twice", "birds sing in the morning rain", "a siren")


def require_onnx() -> None:
    """Raise an ``ImportError`` naming the extra unless onnx, onnxruntime and onnxscript import."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"ONNX export needs onnx, onnxruntime and onnxscript ({error}): pip install 'hf-atr[onnx]'."
        ) from error


class TextEncoderGraph(nn.Module):
    """``get_text_features`` with the tokenizer's outputs as named arguments, for the exporter."""

    def __init__(self, model: AtrDualEncoderModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model.get_text_features(input_ids, attention_mask, token_type_ids)


class AudioEncoderGraph(nn.Module):
    """``get_audio_features`` with the processor's audio outputs as named arguments, for the exporter."""

    def __init__(self, model: AtrDualEncoderModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model.get_audio_features(input_values, input_features, audio_attention_mask)


@dataclass
class GraphReport:
    """One written graph: its file, inputs, dynamic axes, exporter and the parity measured in ONNX Runtime."""

    file: str
    input_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    exporter: str
    max_abs_error: float


@dataclass
class OnnxExportReport:
    """What :func:`export_onnx` wrote (``graphs`` by modality; ``quantized``: the int8 graphs, when asked)."""

    out: Path
    graphs: dict[str, GraphReport]
    quantized: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"Wrote ONNX graphs to {self.out}:"]
        for modality, graph in self.graphs.items():
            lines.append(
                f"  {graph.file} ({modality}, {graph.exporter} exporter): max |ONNX Runtime - torch| = "
                f"{graph.max_abs_error:.2e} on the probe batch"
            )
        for modality, file in self.quantized.items():
            lines.append(f"  {file} ({modality}, int8 dynamic quantisation)")
        return "\n".join(lines)


def audio_exporter(model: AtrDualEncoderModel) -> str:
    """``"legacy"`` (TorchScript) for the towers of :data:`LEGACY_EXPORTER_FAMILIES`, ``"dynamo"`` otherwise."""
    return "legacy" if model.config.audio_config.model_type in LEGACY_EXPORTER_FAMILIES else "dynamo"


def check_exportable(model: AtrDualEncoderModel) -> None:
    """Refuse what no ONNX graph reproduces: fused CLAP, whose ``is_longer`` branch selects batch rows by data."""
    if getattr(model.config.audio_config, "enable_fusion", False):
        raise onnx_encoder.OnnxExportError(
            "Fused CLAP cannot be exported to ONNX: its fusion branch selects the clips flagged is_longer by data, "
            "which the dynamo exporter cannot trace and a traced graph gets wrong whenever the flags differ from the "
            "trace. Export the sentence-transformers format instead (hf-atr export --format sentence-transformers), "
            "or an unfused CLAP."
        )


def probe_text_inputs(processor: AtrProcessor) -> dict[str, torch.Tensor]:
    """The tokenizer's outputs for :data:`PROBE_CAPTIONS` (padded, so the mask has zeros)."""
    return dict(processor(text=list(PROBE_CAPTIONS), return_tensors="pt"))


def probe_clips(processor: AtrProcessor, seconds: tuple[float, ...] = (0.5, 0.3)) -> list[np.ndarray]:
    """Seeded noise clips of ``seconds`` at the processor's rate (two lengths, within any window)."""
    generator = np.random.default_rng(0)
    return [
        (0.1 * generator.standard_normal(int(length * processor.sampling_rate))).astype(np.float32)
        for length in seconds
    ]


def probe_audio_inputs(
    processor: AtrProcessor, seconds: tuple[float, ...] = (0.5, 0.3)
) -> dict[str, torch.Tensor]:
    """The processor's audio outputs for :func:`probe_clips`."""
    return dict(processor(audio=probe_clips(processor, seconds), return_tensors="pt"))


def graph_audio_inputs(
    model: AtrDualEncoderModel, inputs: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The processor's audio outputs the graph takes: CLAP's ``is_longer`` only reaches a fused model (refused)."""
    return {name: value for name, value in inputs.items() if name != "is_longer"}


def audio_dynamic_axes(model: AtrDualEncoderModel, processor: AtrProcessor) -> dict[str, dict[int, str]]:
    """The dynamic axes of each audio input: the batch, and the axes whose size follows the clip's length (PE-Audio's
    samples), found by featurising clips of two lengths; AST, CLAP, Whisper and PANNs pad or cut to their window."""
    short, long = (
        graph_audio_inputs(model, probe_audio_inputs(processor, (seconds,))) for seconds in (0.3, 0.5)
    )
    return {
        name: {
            0: "batch",
            **{
                axis: "samples"
                for axis in range(1, value.dim())
                if value.shape[axis] != long[name].shape[axis]
            },
        }
        for name, value in short.items()
    }


def _export_graph(
    module: nn.Module,
    inputs: dict[str, torch.Tensor],
    path: Path,
    dynamic_axes: dict[str, dict[int, str]],
    output_name: str,
    exporter: str,
) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notices
        if exporter == "dynamo":
            dims = {
                label: torch.export.Dim(label) for axes in dynamic_axes.values() for label in axes.values()
            }
            shapes = {
                name: {axis: dims[label] for axis, label in axes.items()}
                for name, axes in dynamic_axes.items()
            }
            program = torch.onnx.export(
                module,
                (),
                kwargs=inputs,
                dynamo=True,
                dynamic_shapes=shapes,
                output_names=[output_name],
                verbose=False,
            )
            program.save(str(path))
        else:
            names = list(inputs)
            torch.onnx.export(
                _PositionalGraph(module, names),
                tuple(inputs.values()),
                str(path),
                dynamo=False,
                input_names=names,
                output_names=[output_name],
                dynamic_axes={**dynamic_axes, output_name: {0: "batch"}},
                opset_version=17,
            )


class _PositionalGraph(nn.Module):
    """A graph module called with positional inputs in the order of ``names`` (the TorchScript exporter's way)."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.module = module
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.module(**dict(zip(self.names, inputs)))


def run_graph(path: str | os.PathLike, inputs: Mapping[str, Any], threads: int | None = None) -> np.ndarray:
    """Run one exported graph in ONNX Runtime (CPU) on ``inputs`` (tensors or arrays, by input name)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, onnx_feed(session, inputs))[0]


def _checked_graph(
    path: Path, inputs: dict[str, torch.Tensor], expected: torch.Tensor, modality: str
) -> float:
    try:
        got = run_graph(path, inputs)
    except Exception as error:  # ONNX Runtime raises its own exception types for graphs it cannot load or run
        raise onnx_encoder.OnnxExportError(
            f"ONNX Runtime cannot run the exported {modality} graph {path.name}: {error}"
        ) from error
    error = float(np.abs(got - expected.numpy()).max())
    if not error <= PARITY_TOLERANCE:
        raise onnx_encoder.OnnxExportError(
            f"The exported {modality} graph {path.name} differs from the torch model by {error:.2e} (max abs) on the "
            f"probe batch, above {PARITY_TOLERANCE:.0e}."
        )
    return error


def export_onnx(
    model: AtrDualEncoderModel,
    processor: AtrProcessor,
    out: str | os.PathLike,
    *,
    quantize: str | None = None,
) -> OnnxExportReport:
    """Write the two encoder graphs of ``model`` with ``processor``'s files and :data:`~hf_atr.export.onnx_encoder.EXPORT_FILE` to ``out``.

    Each graph is exported (:func:`audio_exporter` names the audio graph's exporter), loaded in ONNX Runtime (CPU) and
    compared with the torch model on a probe batch (three captions of two lengths; two clips of two lengths): above
    :data:`PARITY_TOLERANCE` the export fails. ``quantize="int8"`` adds ``text_encoder.int8.onnx`` and
    ``audio_encoder.int8.onnx`` (:func:`hf_atr.export.quantization.quantize_graphs`). The model's train/eval mode is
    restored after.

    Raises:
        OnnxExportError: fused CLAP, a graph ONNX Runtime cannot run, or one outside the tolerance.
        ImportError: without the ``[onnx]`` extra.
    """
    require_onnx()
    check_exportable(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    try:
        text_inputs = probe_text_inputs(processor)
        audio_inputs = graph_audio_inputs(model, probe_audio_inputs(processor))
        with torch.no_grad():
            expected_text = model.get_text_features(**text_inputs)
            expected_audio = model.get_audio_features(**audio_inputs)
        text_axes = {name: {0: "batch", 1: "sequence"} for name in text_inputs}
        audio_axes = audio_dynamic_axes(model, processor)
        graphs = {}
        for modality, graph_module, inputs, axes, expected, file, output, exporter in (
            (
                "text",
                TextEncoderGraph,
                text_inputs,
                text_axes,
                expected_text,
                TEXT_GRAPH,
                "text_embeds",
                "dynamo",
            ),
            (
                "audio",
                AudioEncoderGraph,
                audio_inputs,
                audio_axes,
                expected_audio,
                AUDIO_GRAPH,
                "audio_embeds",
                audio_exporter(model),
            ),
        ):
            _export_graph(graph_module(model).eval(), inputs, out / file, axes, output, exporter)
            model.eval()  # the TorchScript exporter puts a module it wrapped back in train mode
            error = _checked_graph(out / file, inputs, expected, modality)
            graphs[modality] = GraphReport(file, list(inputs), axes, exporter, error)
        if model.config.audio_config.model_type in WAVEFORM_FAMILIES:
            error = export_waveform_graph(
                model, processor, out, probe_clips(processor), tolerance=PARITY_TOLERANCE
            )
            graphs["waveform"] = GraphReport(
                WAVEFORM_GRAPH, ["waveforms"], {"waveforms": {0: "batch"}}, "dynamo", error
            )
    finally:
        model.train(was_training)
    report = OnnxExportReport(out, graphs)
    if quantize is not None:
        from .quantization import quantize_graphs

        report.quantized = quantize_graphs(out, quantize)
    processor.save_pretrained(out)
    model.config.save_pretrained(out)
    write_export_file(model, processor, report)
    return report


def write_export_file(model: AtrDualEncoderModel, processor: AtrProcessor, report: OnnxExportReport) -> None:
    """:data:`~hf_atr.export.onnx_encoder.EXPORT_FILE`: what a runtime needs beside the graphs to score and to search an index built by torch."""
    head = model.scoring_head
    square_root = metric_square_root(model)
    content = {
        "format_version": EXPORT_FORMAT_VERSION,
        "scoring": model.config.scoring,
        "normalized_embeddings": head.normalizes_embeddings,
        "projection_dim": model.config.projection_dim,
        "logit_scale": float(head.scale().detach()),
        "audio_logit_scale": float(head.audio_scale().detach()),
        "logit_bias": float(head.bias().detach()),
        "metric_square_root": None if square_root is None else square_root.tolist(),
        "logit_scale_form": head.scale_form,
        "scoring_head": {name: value.tolist() for name, value in head.state_dict().items()},
        "fingerprint": model_fingerprint(model),
        "sampling_rate": processor.sampling_rate,
        "audio_model_type": model.config.audio_config.model_type,
        "text_model_type": model.config.text_config.model_type,
        "audio_time_axis": "samples (dynamic)"
        if any(len(axes) > 1 for axes in report.graphs["audio"].dynamic_axes.values())
        else "fixed by the feature extractor",
        "graphs": {
            modality: {
                "file": graph.file,
                "inputs": graph.input_names,
                "dynamic_axes": {
                    name: {str(axis): label for axis, label in axes.items()}
                    for name, axes in graph.dynamic_axes.items()
                },
                "exporter": graph.exporter,
                "probe_max_abs_error": graph.max_abs_error,
            }
            for modality, graph in report.graphs.items()
        },
        "quantized": report.quantized,
    }
    (report.out / onnx_encoder.EXPORT_FILE).write_text(json.dumps(content, indent=2) + "\n")


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "EXPORT_FILE": "hf_atr.export.onnx_encoder",
    "OnnxExportError": "hf_atr.export.onnx_encoder",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "AUDIO_GRAPH",
    "LEGACY_EXPORTER_FAMILIES",
    "PARITY_TOLERANCE",
    "TEXT_GRAPH",
    "AudioEncoderGraph",
    "GraphReport",
    "OnnxExportReport",
    "TextEncoderGraph",
    "audio_dynamic_axes",
    "audio_exporter",
    "check_exportable",
    "export_onnx",
    "graph_audio_inputs",
    "probe_audio_inputs",
    "probe_clips",
    "probe_text_inputs",
    "require_onnx",
    "run_graph",
    "write_export_file",
]
