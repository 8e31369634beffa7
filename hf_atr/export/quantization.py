"""int8 versions of exported graphs: ONNX Runtime's dynamic quantisation (weights int8, activations quantised per
batch at run time), written beside the float32 graphs."""

from __future__ import annotations

import os
from pathlib import Path

QUANTIZATIONS = ("int8",)
GRAPH_FILES = {"text": "text_encoder.onnx", "audio": "audio_encoder.onnx"}


def quantized_name(file: str) -> str:
    """``text_encoder.onnx`` → ``text_encoder.int8.onnx``."""
    stem, suffix = os.path.splitext(file)
    return f"{stem}.int8{suffix}"


def quantize_graphs(directory: str | os.PathLike, quantization: str = "int8") -> dict[str, str]:
    """Quantise the text and audio graphs in ``directory`` (``quantize_dynamic``, int8 weights, MatMul / Gemm /
    Conv-free operator set as ONNX Runtime picks by default); returns the written file of each modality.

    Raises:
        ValueError: a quantisation other than ``"int8"``.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}.")
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    directory = Path(directory)
    written = {}
    for modality, file in GRAPH_FILES.items():
        prepared = directory / f"{Path(file).stem}.preprocessed.onnx"
        quant_pre_process(str(directory / file), str(prepared), skip_symbolic_shape=True)
        try:
            quantize_dynamic(
                str(prepared), str(directory / quantized_name(file)), weight_type=QuantType.QInt8
            )
        finally:
            prepared.unlink(missing_ok=True)
        written[modality] = quantized_name(file)
    return written


__all__ = ["GRAPH_FILES", "QUANTIZATIONS", "quantize_graphs", "quantized_name"]
