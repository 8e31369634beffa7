"""A retrieval index on the Hub: pushed with its model, and fetched again with it.

:func:`push_to_hub` pushes a model with an index saved by ``pipe.save_index(dir)``, checked against the model
before anything is uploaded; :func:`push_pipeline_to_hub` (``pipe.push_to_hub(repo_id)``) the index a pipeline
holds. Either lands in the repository's ``retrieval_index/``, which :func:`hub_index_dir` downloads when
``pipeline("audio-text-retrieval", model=repo_id)`` loads the model, so that the index comes with it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import CommitInfo, snapshot_download
from transformers.utils import logging

from .. import hub
from .index import EmbeddingIndex
from .index_storage import model_fingerprints
from .persistence import INDEX_DIRNAME, INDEX_NAMES, save_indexes

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..hub import HubUpload

logger = logging.get_logger(__name__)


def push_to_hub(
    model: Any, repo_id: str, *, index_dir: str | os.PathLike | None = None, **upload: Unpack[HubUpload]
) -> CommitInfo:
    """Upload ``model``, its card and (with ``index_dir``) the saved index in one commit.

    The one module-level ``push_to_hub`` of hf-atr (``hf_atr.push_to_hub``). ``upload`` takes the options of
    :class:`~hf_atr.hub.HubUpload` (``processor``, ``eval_results``, ``training_data``, ``license``, ``private``,
    ...), documented by :func:`hf_atr.hub.push_model_files`. The index lands in ``retrieval_index/`` after it was
    checked: an index built with other weights raises ``IndexFormatError`` and nothing is uploaded.
    """
    return hub.push_model_files(
        model, repo_id, stage_extra=_index_stager(model, index_dir), **hub.push_options(upload)
    )


def push_pipeline_to_hub(pipe: Any, repo_id: str, **upload: Unpack[HubUpload]) -> CommitInfo:
    """Upload the model of ``pipe`` (an :class:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline`),
    its processor, its card and the index it holds in one commit; the list of skipped files stays local.

    ``upload`` takes the options of :func:`push_to_hub` (:class:`~hf_atr.hub.HubUpload`: ``eval_results``,
    ``private``, ...); ``processor`` defaults to the pipeline's.

    Raises:
        ValueError: the pipeline holds no index.
    """
    if pipe.audio_index is None and pipe.text_index is None:
        raise ValueError(
            "This pipeline holds no index to push: build one with `pipe.index(...)`, or push the model "
            "alone with `model.push_to_hub(repo_id)`."
        )
    processor = upload.pop("processor", None)
    return hub.push_model_files(
        pipe.model,
        repo_id,
        processor=pipe.processor if processor is None else processor,
        stage_extra=lambda staging: save_indexes(
            staging / INDEX_DIRNAME, pipe.audio_index, pipe.text_index, [], report_skipped=False
        ),
        **hub.push_options(upload),
    )


def hub_index_dir(model: Any) -> Path | None:
    """The ``retrieval_index`` folder of the Hub repository ``model`` came from, if it has one.

    Downloads only that folder (the push functions put it there); a model that is not from the Hub, a
    repository without an index, or no network (and nothing cached) gives ``None``.
    """
    repo_id = str(getattr(model, "name_or_path", "") or "")
    if not repo_id or os.path.exists(repo_id) or repo_id.count("/") != 1:
        return None
    try:
        snapshot = snapshot_download(repo_id, allow_patterns=[f"{INDEX_DIRNAME}/*"])
    except (
        OSError,
        ValueError,
    ) as error:  # huggingface_hub's HTTP, offline and not-found errors are OSErrors
        logger.info(f"No retrieval index fetched from {repo_id}: {error}")
        return None
    return Path(snapshot) / INDEX_DIRNAME


def stage_upload(
    model: Any, directory: str | os.PathLike, *, index_dir: str | os.PathLike | None = None, **upload: Any
) -> list[Path]:
    """Write into ``directory`` exactly the files :func:`push_to_hub` uploads; returns them, sorted.

    ``upload``: the options of :func:`push_to_hub` that shape the files (``repo_id``, ``processor``,
    ``eval_results``, ``training_data``, the sharing terms, ``max_shard_size``).
    """
    return hub.stage_model_files(
        model, directory, stage_extra=_index_stager(model, index_dir), **hub.push_options(upload)
    )


def _index_stager(model: Any, index_dir: str | os.PathLike | None) -> Callable[[Path], None] | None:
    if index_dir is None:
        return None
    return lambda staging: copy_checked_index(model, Path(index_dir), staging / INDEX_DIRNAME)


def copy_checked_index(model: Any, source: Path, destination: Path) -> None:
    """Copy a saved index after checking that it loads and belongs to ``model`` (never push a stale index)."""
    names = [name for name in INDEX_NAMES if (source / f"{name}.json").is_file()]
    if not names:
        raise FileNotFoundError(
            f"No saved retrieval index in {source}; write one with `pipe.save_index(dir)`."
        )
    fingerprint = model_fingerprints(model)
    destination.mkdir(parents=True, exist_ok=True)
    for name in names:
        EmbeddingIndex.load(
            source, name, expected_dim=model.config.projection_dim, expected_fingerprint=fingerprint
        )
        for suffix in (".safetensors", ".json"):
            shutil.copy2(source / f"{name}{suffix}", destination / f"{name}{suffix}")


__all__ = ["copy_checked_index", "hub_index_dir", "push_pipeline_to_hub", "push_to_hub", "stage_upload"]
