"""Push a dual encoder with its processor, model card and (optionally) its retrieval index to the Hub.

transformers' own ``push_to_hub`` replaces ``README.md`` with a generic card fetched from the Hub;
:func:`push_to_hub` writes ours instead and uploads everything in one commit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi

from hf_atr.model_card import write_model_card
from hf_atr.pipelines.index import EmbeddingIndex, model_fingerprint
from hf_atr.pipelines.retrieval_pipeline import INDEX_DIRNAME, INDEX_NAMES


def push_to_hub(
    model: Any,
    repo_id: str,
    *,
    processor: Any = None,
    index_dir: str | os.PathLike | None = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    license: str | None = None,
    commit_message: str = "Upload hf-atr audio-text retrieval model",
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: str | int = "5GB",
) -> CommitInfo:
    """Upload ``model`` (+ ``processor``, + the index saved in ``index_dir``) and its card in one commit.

    Files in the repository: the model's ``config.json`` and weights, the processor's files,
    ``README.md`` (the card of :func:`~hf_atr.model_card.write_model_card`, whose usage snippet names
    ``repo_id``), and ``retrieval_index/{audio,text}_index.{safetensors,json}`` when ``index_dir`` is given
    (checked first: an index built with other weights raises ``IndexFormatError`` and nothing is uploaded).
    ``pipeline("audio-text-retrieval", model=repo_id)`` then loads the index with the model.

    Returns:
        huggingface_hub's ``CommitInfo`` of the upload.
    """
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as work_dir:
        files = stage_upload(
            model,
            work_dir,
            repo_id=repo_id,
            processor=processor,
            index_dir=index_dir,
            eval_results=eval_results,
            training_data=training_data,
            license=license,
            max_shard_size=max_shard_size,
        )
        operations = [
            CommitOperationAdd(path_in_repo=path.relative_to(work_dir).as_posix(), path_or_fileobj=str(path))
            for path in files
        ]
        return api.create_commit(
            repo_id,
            operations,
            commit_message=commit_message,
            revision=revision,
            create_pr=create_pr,
        )


def stage_upload(
    model: Any,
    directory: str | os.PathLike,
    *,
    repo_id: str | None = None,
    processor: Any = None,
    index_dir: str | os.PathLike | None = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    license: str | None = None,
    max_shard_size: str | int = "5GB",
) -> list[Path]:
    """Write into ``directory`` exactly the files :func:`push_to_hub` uploads; returns them, sorted.

    Useful on its own to inspect a repository before pushing it (``examples/push_to_hub.py --dry-run``).
    """
    directory = Path(directory)
    model.save_pretrained(directory, max_shard_size=max_shard_size)
    if processor is not None:
        processor.save_pretrained(directory)
    if index_dir is not None:
        _copy_index(model, Path(index_dir), directory / INDEX_DIRNAME)
    write_model_card(
        model,
        directory,
        model_id=repo_id,
        eval_results=eval_results,
        training_data=training_data,
        license=license,
    )
    return sorted(path for path in directory.rglob("*") if path.is_file())


def _copy_index(model: Any, source: Path, destination: Path) -> None:
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


__all__ = ["push_to_hub", "stage_upload"]
