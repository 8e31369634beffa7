"""Moment datasets on the command line: how ``hf-atr train`` and ``hf-atr evaluate --moments`` read them and what
training and testing on them means.

A moment dataset is given as ``--dataset moments`` with the folder of ``<corpus>_<split>_release.jsonl`` files
(Lighthouse's names; recordings in its ``audio/`` or beside the files), one such ``.jsonl`` file, or a
``DatasetDict`` of :func:`~hf_atr.data.moments.load_moments` rows saved with ``save_to_disk``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MOMENTS = "moments"
"""The ``--dataset`` name of a folder of moment annotation files."""


def load_moment_corpus(
    source: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    audio_dir: str | os.PathLike | None = None,
    missing: str | None = None,
) -> Any:
    """The moment dataset ``source`` names, as a ``DatasetDict``: ``moments`` with ``data_dir`` (the folder of
    ``*_release.jsonl`` files, :func:`~hf_atr.data.moments.load_moment_splits`), a ``.jsonl`` file (its split from
    its name, :func:`~hf_atr.data.moments.load_moments`), or a saved dataset (:func:`~hf_atr.data.corpora.load_corpus`).

    Raises:
        FileNotFoundError: a missing file or folder, or no annotation file in ``data_dir``.
        ValueError: ``moments`` without ``data_dir``.
        CorpusFormatError: a bad annotation line (named by file and line).
    """
    from datasets import DatasetDict

    from hf_atr.data.corpora import load_corpus
    from hf_atr.data.moments import load_moment_splits, load_moments

    policy = {"missing": missing} if missing is not None else {}
    if str(source) == MOMENTS:
        if data_dir is None:
            raise ValueError(
                "--dataset moments reads the folder of <corpus>_<split>_release.jsonl files given as the data "
                "directory; give it."
            )
        return load_moment_splits(data_dir, audio_dir, **policy)
    path = Path(source).expanduser()
    if path.suffix == ".jsonl":
        dataset = load_moments(path, audio_dir or data_dir, **policy)
        return DatasetDict({_split_name(dataset): dataset})
    return load_corpus(path)


def _split_name(dataset: Any) -> str:
    """The split recorded in a moment dataset's provenance (``test`` when none)."""
    from hf_atr.data.schema import corpus_provenance

    return (corpus_provenance(dataset) or {}).get("split") or "test"


def is_moment_source(source: str | os.PathLike) -> bool:
    """Whether ``--dataset`` names moment annotations read by :func:`load_moment_corpus` rather than a corpus loader
    (``moments``, or a ``.jsonl`` file); a saved moment dataset is read as any saved dataset."""
    return str(source) == MOMENTS or str(source).endswith(".jsonl")


def moment_evaluator(moments: Any, processor: Any, *, batch_size: int, split: str) -> Any:
    """The moment metrics of the refined proposer on ``moments`` (:class:`~hf_atr.evaluation.moment_evaluator
    .MomentEvaluator`), each recording scored window by window: the test evaluation of ``hf-atr train`` on a
    moment dataset, and its validation during training (``--eval_strategy``)."""
    from hf_atr.evaluation.moment_evaluator import MomentEvaluator

    return MomentEvaluator(moments, processor, batch_size=batch_size, split=split)


def moment_test_evaluator(
    test: Any, processor: Any, *, batch_size: int, split: str, windowing: Any, relevance: Any
) -> Any:
    """The test evaluation of ``hf-atr train`` when the test split is a moment dataset (:func:`moment_evaluator`).

    Raises:
        ValueError: options of clip retrieval (``--eval_window_pooling``, ``--relevance``).
    """
    given = [
        name
        for name, value in (("--eval_window_pooling", windowing), ("--relevance", relevance))
        if value is not None
    ]
    if given:
        raise ValueError(
            f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to clip retrieval; the test split is "
            "moment annotations, evaluated by "
            "the moment metrics (each recording scored window by window, as hf-atr evaluate --moments does)."
        )
    return moment_evaluator(test, processor, batch_size=batch_size, split=split)


def moment_training_audio(moments: Any, processor: Any) -> dict[str, Any]:
    """The card's record of how moment training reads its audio (:func:`~hf_atr.training.final_model
    .training_audio_record`): one crop inside a moment per query and epoch, and one outside."""
    from hf_atr.training.final_model import training_audio_record
    from hf_atr.training.moment_crops import default_crop_seconds

    crop = default_crop_seconds(processor)
    return training_audio_record(
        len(moments),
        None,
        processor.feature_extractor,
        kept=f"per query and epoch a {crop:g}-s crop inside its moment (the whole moment when shorter) and one "
        "outside every moment of its recording",
    )


def is_moment_protocol(protocol: dict[str, Any]) -> bool:
    """Whether an evaluation ``protocol`` is a moment evaluation's (:class:`~hf_atr.evaluation.moment_evaluator
    .MomentEvaluator`)."""
    from hf_atr.metrics.moments import MOMENT_RETRIEVAL_TASK

    return protocol.get("task") == MOMENT_RETRIEVAL_TASK


def moment_results(metrics: dict[str, float], protocol: dict[str, Any]) -> str:
    """The lines that report a moment evaluation: what was evaluated (queries, recordings, audio, windows,
    proposer), then each metric in %."""
    skipped = (
        f", {len(protocol['skipped_recordings'])} recording(s) that could not be decoded left out with their "
        f"{protocol['skipped_queries']} queries"
        if protocol["skipped_recordings"]
        else ""
    )
    lines = [
        f"{protocol['queries']} queries over {protocol['recordings']} recordings, "
        f"{protocol['audio_seconds'] / 3600:.3f} h{skipped}; model {protocol['model']}; windows of "
        f"{protocol['window_seconds']:g} s every {protocol['hop_seconds']:g} s; proposer "
        f"{json.dumps(protocol['proposal'])}; in %:"
    ]
    width = max(len(name) for name in metrics)
    lines += [f"  {name:<{width}}  {100 * value:.2f}" for name, value in metrics.items()]
    return "\n".join(lines)


__all__ = [
    "MOMENTS",
    "is_moment_protocol",
    "is_moment_source",
    "load_moment_corpus",
    "moment_evaluator",
    "moment_results",
    "moment_test_evaluator",
    "moment_training_audio",
]
