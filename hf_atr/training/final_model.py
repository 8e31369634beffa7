"""The end of a training run: evaluate the test split, then save the model, processor, card and metrics.

``hf-atr demo`` and ``hf-atr train`` end with :func:`evaluate_and_save`, so both write the same layout::

    OUTPUT_DIR/model/        weights, config, processor, README.md (the card: results table and protocol)
    OUTPUT_DIR/metrics.json  {"metrics": {...}, "protocol": {...}, "training_audio": {...}, ...}

``metrics.json`` has the form ``hf-atr evaluate --output`` writes, plus what the run recorded of its training
clips (``training_audio``: how many were cut to the extractor's window). The protocol carries ``compute``: the
torch version, device, thread count and CPU instruction set the run used, since another thread count or
instruction set sums in another order and gives slightly different figures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..evaluation.evaluator import RetrievalEvaluator
from ..model_card.facts import card_data, record_evaluation
from ..windowing import extractor_window

MODEL_DIRECTORY = "model"
"""Sub-directory of a run's output directory that holds the final model, processor and card."""
METRICS_FILE = "metrics.json"
"""File of a run's output directory with the test metrics and their protocol."""
TRAINING_AUDIO = "training_audio"
"""Key of the card's data and of ``metrics.json`` for the training clips' record (:func:`training_audio_record`)."""


@dataclass
class FinalModel:
    """What :func:`evaluate_and_save` wrote."""

    metrics: dict[str, float]
    protocol: dict[str, Any]
    model_dir: Path
    metrics_file: Path


def evaluate_and_save(
    model: Any,
    processor: Any,
    evaluator: RetrievalEvaluator,
    output_dir: str | os.PathLike,
    *,
    eval_dataset: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> FinalModel:
    """Evaluate ``model`` with ``evaluator``, then save it with its processor and a card showing the result.

    The evaluation and its protocol are recorded for the card (:func:`~hf_atr.model_card.record_evaluation`),
    so the card in ``output_dir/model`` (and any later ``push_to_hub``) carries the results table, the protocol
    behind it and a warning when the test set is smaller than its official split.

    The protocol gets ``compute`` (:func:`compute_record`); ``metrics.json`` gets the training clips' record
    (``training_audio``, :func:`training_audio_record`) when the run stored one in the card's data.

    Args:
        evaluator: a :class:`~hf_atr.evaluation.RetrievalEvaluator` over the test split.
        eval_dataset: the evaluated data's name in the card (e.g. ``"Clotho test"``).
        extra: more JSON-ready entries for ``metrics.json`` (e.g. ``{"training": {...}}``).

    Returns:
        The metrics, the protocol and where they were written.
    """
    metrics = evaluator(model)
    protocol = {**evaluator.protocol, "compute": compute_record(model)}
    record_evaluation(model, metrics, protocol, eval_dataset=eval_dataset)
    training_audio = card_data(model).get(TRAINING_AUDIO)
    output_dir = Path(output_dir)
    model_dir = output_dir / MODEL_DIRECTORY
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    metrics_file = output_dir / METRICS_FILE
    metrics_file.write_text(
        json.dumps(
            {
                "metrics": metrics,
                "protocol": protocol,
                **({TRAINING_AUDIO: training_audio} if training_audio is not None else {}),
                **(extra or {}),
            },
            indent=2,
            sort_keys=True,
        )
    )
    return FinalModel(metrics=metrics, protocol=protocol, model_dir=model_dir, metrics_file=metrics_file)


def compute_record(model: Any) -> dict[str, Any]:
    """What the figures were computed with: ``{"torch", "device", "threads", "cpu_capability"}``.

    ``threads`` is torch's intra-op thread count and ``cpu_capability`` the instruction set its CPU kernels use
    (``torch.backends.cpu.get_cpu_capability()``: ``AVX2``, ``AVX512``, ...): either changes the order in which
    sums are taken, so training and evaluation give slightly different figures with another count or on another
    CPU (the demo's English T2A R@1: 61.6 % with AVX2 kernels, 61.0 % with the scalar ones, at one thread).
    """
    device = next(model.parameters()).device.type
    return {
        "torch": torch.__version__,
        "device": device,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def training_audio_record(
    clips: int | None, clips_cut: int | None, feature_extractor: Any, kept: str | None = None
) -> dict[str, Any]:
    """The record of how the training clips met the feature extractor's window, for the card and ``metrics.json``.

    Args:
        clips: training clips (``None`` for a stream).
        clips_cut: how many were longer than the window and cut to it; ``None`` when not counted (streamed
            clips, or features read from a cache that did not record it).
        kept: what of a cut clip is kept, in words (default: ``the first 2.00 s of each``, what the processor's
            features hold; :meth:`WaveformCollator.crop_description` says what its crops are).

    Returns:
        ``{"clips", "clips_cut_to_window", "window_seconds", "kept"}``; an extractor without a window cuts
        nothing (``window_seconds`` ``None``, 0 clips cut).
    """
    window = extractor_window(feature_extractor)
    if not window.cuts_long_clips or window.seconds is None:
        return {"clips": clips, "clips_cut_to_window": 0, "window_seconds": None, "kept": None}
    if kept is None:
        kept = f"the first {window.seconds:.2f} s of each"
    return {"clips": clips, "clips_cut_to_window": clips_cut, "window_seconds": window.seconds, "kept": kept}


__all__ = [
    "METRICS_FILE",
    "MODEL_DIRECTORY",
    "TRAINING_AUDIO",
    "FinalModel",
    "compute_record",
    "evaluate_and_save",
    "training_audio_record",
]
