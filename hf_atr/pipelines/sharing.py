"""Push a model with a saved retrieval index: the index is checked against the model before anything is uploaded.

``pipeline("audio-text-retrieval", model=repo_id)`` then loads the index with the model. A pipeline pushes
the index it holds with :meth:`AudioTextRetrievalPipeline.push_to_hub`; these functions push one saved with
``pipe.save_index(dir)``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from huggingface_hub import CommitInfo

from .. import hub
from .index import EmbeddingIndex, model_fingerprint
from .retrieval_pipeline import INDEX_DIRNAME, INDEX_NAMES


def push_to_hub(
    model: Any, repo_id: str, *, index_dir: str | os.PathLike | None = None, **upload: Any
) -> CommitInfo:
    """Upload ``model``, its card and (with ``index_dir``) the saved index in one commit.

    ``upload`` takes the options of :func:`hf_atr.hub.push_to_hub` (``processor``, ``eval_results``,
    ``training_data``, ``license``, ``private``, ...). The index lands in ``retrieval_index/`` after it
    was checked: an index built with other weights raises ``IndexFormatError`` and nothing is uploaded.
    """
    return hub.push_to_hub(model, repo_id, stage_extra=_index_stager(model, index_dir), **upload)


def stage_upload(
    model: Any, directory: str | os.PathLike, *, index_dir: str | os.PathLike | None = None, **upload: Any
) -> list[Path]:
    """Write into ``directory`` exactly the files :func:`push_to_hub` uploads; returns them, sorted."""
    return hub.stage_upload(model, directory, stage_extra=_index_stager(model, index_dir), **upload)


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
    fingerprint = model_fingerprint(model)
    destination.mkdir(parents=True, exist_ok=True)
    for name in names:
        EmbeddingIndex.load(
            source, name, expected_dim=model.config.projection_dim, expected_fingerprint=fingerprint
        )
        for suffix in (".safetensors", ".json"):
            shutil.copy2(source / f"{name}{suffix}", destination / f"{name}{suffix}")


__all__ = ["copy_checked_index", "push_to_hub", "stage_upload"]
