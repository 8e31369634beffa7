"""Push a dual encoder with its processor and model card to the Hub in one commit: the one implementation.

transformers' own ``push_to_hub`` replaces ``README.md`` with a generic card fetched from the Hub;
:func:`push_to_hub` writes ours instead, through the files registered beside the weights (:mod:`hf_atr.model_files`),
whose card writer gets the repository id, licence and evaluation given here; this module imports no card. Every
other ``push_to_hub`` of hf-atr is a thin caller of it that takes the same options, :class:`HubUpload`, by the same
names: ``AtrDualEncoderModel.push_to_hub(repo_id, ...)``, :func:`hf_atr.pipelines.sharing.push_to_hub`
(``hf_atr.push_to_hub(model, repo_id, index_dir=..., ...)``), :func:`~hf_atr.pipelines.sharing.push_pipeline_to_hub`
and :meth:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.push_to_hub`. What else goes into the
repository is written by its owner through ``stage_extra``: the retrieval pipeline adds its index.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi

from .model_files import MODEL_CARD_FILE, write_model_files


class HubUpload(TypedDict, total=False):
    """The options every ``push_to_hub`` of hf-atr takes, by the names of transformers' ``push_to_hub`` where it
    has them; :func:`push_to_hub` documents them and holds their defaults."""

    processor: Any
    eval_results: Mapping[str, float] | None
    training_data: str | None
    license: str | None
    license_name: str | None
    license_link: str | None
    base_model: list[str] | None
    commit_message: str
    private: bool | None
    token: str | None
    revision: str | None
    create_pr: bool
    max_shard_size: str | int


def push_to_hub(
    model: Any,
    repo_id: str,
    *,
    processor: Any = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    license: str | None = None,
    license_name: str | None = None,
    license_link: str | None = None,
    base_model: list[str] | None = None,
    commit_message: str = "Upload hf-atr audio-text retrieval model",
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: str | int = "5GB",
    stage_extra: Callable[[Path], object] | None = None,
) -> CommitInfo:
    """Upload ``model`` (+ ``processor``) and its card in one commit.

    The options but ``stage_extra`` are :class:`HubUpload`, which the other ``push_to_hub`` functions take too;
    ``commit_message``, ``private``, ``token``, ``revision``, ``create_pr`` and ``max_shard_size`` are those of
    transformers' ``push_to_hub``.

    Files in the repository: the model's ``config.json`` and weights, the processor's files, and
    ``README.md`` (the card of :func:`~hf_atr.model_card.write_model_card`, whose usage snippet names
    ``repo_id``), plus what ``stage_extra(staging_directory)`` writes; it runs before anything is uploaded,
    so an error there uploads nothing. ``license`` (with ``license_name`` / ``license_link`` for ``other``) and
    ``base_model`` go into the card's metadata as :func:`~hf_atr.model_card.write_model_card` describes: without
    a licence (given here or recorded on the model) the card claims none.

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
            eval_results=eval_results,
            training_data=training_data,
            license=license,
            license_name=license_name,
            license_link=license_link,
            base_model=base_model,
            max_shard_size=max_shard_size,
            stage_extra=stage_extra,
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
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    license: str | None = None,
    license_name: str | None = None,
    license_link: str | None = None,
    base_model: list[str] | None = None,
    max_shard_size: str | int = "5GB",
    stage_extra: Callable[[Path], object] | None = None,
) -> list[Path]:
    """Write into ``directory`` exactly the files :func:`push_to_hub` uploads; returns them, sorted.

    Useful on its own to inspect a repository before pushing it (``examples/push_to_hub.py --dry-run``).
    """
    directory = Path(directory)
    model.save_pretrained(directory, max_shard_size=max_shard_size)
    if processor is not None:
        processor.save_pretrained(directory)
    if stage_extra is not None:
        stage_extra(directory)
    card = {
        "model_id": repo_id,
        "eval_results": eval_results,
        "training_data": training_data,
        "license": license,
        "license_name": license_name,
        "license_link": license_link,
        "base_model": base_model,
    }
    write_model_files(model, directory, {MODEL_CARD_FILE: card})
    return sorted(path for path in directory.rglob("*") if path.is_file())


__all__ = ["HubUpload", "push_to_hub", "stage_upload"]
