"""The graphs of an ONNX export run by ONNX Runtime behind the dual encoder's own methods.

:class:`OnnxDualEncoder` has what hf-atr's encoding reads of a model: ``get_text_features`` / ``get_audio_features``
(the processor's outputs in, ``(batch, projection_dim)`` float32 torch tensors out), ``config``, ``scoring_head``
(rebuilt from the export's values, so scores, logits and the Mahalanobis map are the torch model's), ``fingerprint``
(the torch model's, which a retrieval index checks) and the ``eval`` / ``train`` / ``parameters`` of an ``nn.Module``.
So :func:`hf_atr.encoding.encode_text` and :func:`~hf_atr.audio_encoding.encode_audio` encode through ONNX Runtime
unchanged. Torch remains imported: the processor's tensors and the scoring head are torch's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..configuration_atr import AtrConfig
from ..scoring_head import AtrScoringHead

EXPORT_FILE = "onnx_export.json"
"""Written by :func:`hf_atr.export.onnx_graphs.export_onnx` beside the graphs."""
PRECISIONS = ("float32", "int8")
ONNX_INPUT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}
"""The NumPy dtype of each ONNX input type the graphs take (PE-Audio's padding mask is int32)."""


class OnnxExportError(RuntimeError):
    """An export that cannot be written, or whose graph does not reproduce the torch model in ONNX Runtime."""


class OnnxDualEncoder(nn.Module):
    """The text and audio graphs of an ONNX export (ONNX Runtime, CPU) with the torch model's scoring head.

    Args:
        directory: what ``hf-atr export --format onnx`` wrote.
        precision: ``"float32"`` (the exported graphs) or ``"int8"`` (those of ``--quantize int8``).
        threads: ONNX Runtime's intra-op threads (default: its own choice).
    """

    def __init__(
        self, directory: str | os.PathLike, *, precision: str = "float32", threads: int | None = None
    ) -> None:
        super().__init__()
        directory = Path(directory)
        export_path = directory / EXPORT_FILE
        if not export_path.is_file():
            raise FileNotFoundError(
                f"{directory} holds no {EXPORT_FILE}: give the folder `hf-atr export --format onnx` wrote."
            )
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
        self.directory = directory
        self.export_info = json.loads(export_path.read_text())
        self.config = AtrConfig.from_pretrained(directory)
        self.precision = precision
        self.threads = threads
        self.fingerprint: str = self.export_info["fingerprint"]
        self.scoring_head = scoring_head_from_export(self.export_info)
        self.name_or_path = str(directory)
        self._sessions: dict[str, Any] = {}

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        *,
        precision: str = "float32",
        threads: int | None = None,
        **loading_options: Any,
    ) -> OnnxDualEncoder:
        """The export in ``directory``; ``loading_options`` of torch models that ``transformers.pipeline`` passes
        (``dtype``, ``revision``, ...) do not apply to ONNX graphs and are not read."""
        return cls(directory, precision=precision, threads=threads)

    @property
    def dtype(self) -> torch.dtype:
        """The graphs take and give float32 (an int8 graph quantises inside it), so indexes record float32."""
        return torch.float32

    @property
    def device(self) -> torch.device:
        """ONNX Runtime runs on the CPU; embeddings come back as CPU tensors."""
        return torch.device("cpu")

    def graph_path(self, modality: str) -> Path:
        """The file of the ``"text"`` or ``"audio"`` graph at this encoder's precision."""
        if self.precision == "float32":
            return self.directory / self.export_info["graphs"][modality]["file"]
        quantized = self.export_info.get("quantized", {})
        if modality not in quantized:
            raise FileNotFoundError(
                f"{self.directory} holds no int8 {modality} graph: export with `--quantize int8`."
            )
        return self.directory / quantized[modality]

    def _session(self, modality: str) -> Any:
        if modality not in self._sessions:
            try:
                import onnxruntime
            except ImportError as error:
                raise ImportError(
                    "Running an ONNX export needs onnxruntime: pip install 'hf-atr[onnx]'."
                ) from error

            options = onnxruntime.SessionOptions()
            if self.threads is not None:
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
            self._sessions[modality] = onnxruntime.InferenceSession(
                str(self.graph_path(modality)), options, providers=["CPUExecutionProvider"]
            )
        return self._sessions[modality]

    def _run(self, modality: str, inputs: dict[str, Any]) -> torch.Tensor:
        session = self._session(modality)
        return torch.from_numpy(session.run(None, onnx_feed(session, inputs))[0])

    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(batch, projection_dim)`` caption embeddings from the tokenizer's outputs, as the torch model's."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if attention_mask is None:
            inputs["attention_mask"] = torch.ones_like(input_ids)
        return self._run("text", {name: value for name, value in inputs.items() if value is not None})

    def get_audio_features(
        self,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        audio_attention_mask: torch.Tensor | None = None,
        is_longer: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(batch, projection_dim)`` audio embeddings from the processor's outputs, as the torch model's
        (``is_longer`` is accepted and unused: fused CLAP is never exported)."""
        inputs = {
            "input_values": input_values,
            "input_features": input_features,
            "audio_attention_mask": audio_attention_mask,
        }
        return self._run("audio", {name: value for name, value in inputs.items() if value is not None})


def onnx_feed(session: Any, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """``inputs`` (tensors or arrays by name) as the arrays an ONNX Runtime ``session`` takes: its inputs only, each
    in the dtype the graph declares (:data:`ONNX_INPUT_TYPES`).

    Raises:
        ValueError: an input the graph takes is missing.
    """
    feed = {}
    for graph_input in session.get_inputs():
        if graph_input.name not in inputs:
            raise ValueError(
                f"The graph takes {graph_input.name!r}, which the inputs lack ({sorted(inputs)})."
            )
        value = inputs[graph_input.name]
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if graph_input.type not in ONNX_INPUT_TYPES:
            raise ValueError(
                f"The graph's input {graph_input.name!r} is of type {graph_input.type}, not one of {sorted(ONNX_INPUT_TYPES)}."
            )
        feed[graph_input.name] = array.astype(ONNX_INPUT_TYPES[graph_input.type], copy=False)
    return feed


def scoring_head_from_export(export_info: dict[str, Any]) -> AtrScoringHead:
    """The torch model's :class:`~hf_atr.scoring_head.AtrScoringHead`, rebuilt from its stored parameters."""
    stored = {
        name: torch.tensor(value, dtype=torch.float32) for name, value in export_info["scoring_head"].items()
    }
    head = AtrScoringHead(
        export_info["scoring"],
        export_info["projection_dim"],
        0.0,
        "audio_logit_scale" in stored,
        scale_form=export_info["logit_scale_form"],
        bias_init=0.0 if "logit_bias" in stored else None,
    )
    head.load_state_dict(stored)
    return head.requires_grad_(False)


__all__ = [
    "EXPORT_FILE",
    "OnnxExportError",
    "PRECISIONS",
    "OnnxDualEncoder",
    "onnx_feed",
    "scoring_head_from_export",
]
