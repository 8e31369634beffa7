"""Push a dual encoder with its processor and model card to the Hub in one commit: the one implementation.

transformers' own ``push_to_hub`` replaces ``README.md`` with a generic card fetched from the Hub;
:func:`push_model_files` writes ours instead, through the files registered beside the weights
(:mod:`hf_atr.model_files`), whose card writer gets the repository id, evaluation and :class:`SharingTerms` given
here; this module imports no card. Every ``push_to_hub`` of hf-atr calls it and takes the same options,
:class:`HubUpload`, by the same names: ``AtrDualEncoderModel.push_to_hub(repo_id, ...)``,
:func:`hf_atr.pipelines.sharing.push_to_hub` (``hf_atr.push_to_hub(model, repo_id, index_dir=..., ...)``, the one
module-level ``push_to_hub``), :func:`~hf_atr.pipelines.sharing.push_pipeline_to_hub` and
:meth:`~hf_atr.pipelines.retrieval_pipeline.AudioTextRetrievalPipeline.push_to_hub`; :func:`push_options` gathers
the licence and base models of those options into one :class:`SharingTerms`. What else goes into the repository is
written by its owner through ``stage_extra``: the retrieval pipeline adds its index.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypedDict

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi

from .deprecation import moved_names
from .model_files import MODEL_CARD_FILE, write_model_files


class HubUpload(TypedDict, total=False):
    """The options every public ``push_to_hub`` of hf-atr takes, by the names of transformers' ``push_to_hub``
    where it has them; :func:`push_model_files` documents them (the licence and base models as
    :class:`SharingTerms`) and holds their defaults."""

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


@dataclass(frozen=True)
class SharingTerms:
    """What a model is shared under and built on, for its card's metadata: the licence and the base models.

    Attributes:
        license: the Hub's licence id (``apache-2.0``, ``cc-by-nc-4.0``, ...) or ``other``; ``None`` takes the
            one recorded on the model (:func:`~hf_atr.model_card.facts.record_sharing_terms`), or claims none.
        license_name, license_link: the id and link of a licence ``other``.
        base_model: Hub ids of the checkpoints the model starts from (empty: random initialisation); ``None``
            takes the recorded ones or the towers' own.

    The card checks them as :func:`~hf_atr.model_card.write_model_card` describes.
    """

    license: str | None = None
    license_name: str | None = None
    license_link: str | None = None
    base_model: tuple[str, ...] | None = None

    def card_fields(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~hf_atr.model_card.write_model_card` these terms fill."""
        return {
            "license": self.license,
            "license_name": self.license_name,
            "license_link": self.license_link,
            "base_model": None if self.base_model is None else list(self.base_model),
        }


SHARING_TERM_OPTIONS = tuple(field.name for field in fields(SharingTerms))
"""The options of :class:`HubUpload` that :func:`push_options` gathers into :class:`SharingTerms`."""


def push_options(upload: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :func:`push_model_files` for the options of a public ``push_to_hub``
    (:class:`HubUpload`): the same, with ``license``, ``license_name``, ``license_link`` and ``base_model``
    gathered into ``terms``."""
    options = {name: value for name, value in upload.items() if name not in SHARING_TERM_OPTIONS}
    terms = {name: upload[name] for name in SHARING_TERM_OPTIONS if name in upload}
    if terms.get("base_model") is not None:
        terms["base_model"] = tuple(terms["base_model"])
    return {**options, "terms": SharingTerms(**terms)}


def push_model_files(
    model: Any,
    repo_id: str,
    *,
    processor: Any = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    terms: SharingTerms | None = None,
    commit_message: str = "Upload hf-atr audio-text retrieval model",
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: str | int = "5GB",
    stage_extra: Callable[[Path], object] | None = None,
) -> CommitInfo:
    """Upload ``model`` (+ ``processor``) and its card in one commit.

    ``commit_message``, ``private``, ``token``, ``revision``, ``create_pr`` and ``max_shard_size`` are those of
    transformers' ``push_to_hub``.

    Files in the repository: the model's ``config.json`` and weights, the processor's files, and
    ``README.md`` (the card of :func:`~hf_atr.model_card.write_model_card`, whose usage snippet names
    ``repo_id``), plus what ``stage_extra(staging_directory)`` writes; it runs before anything is uploaded,
    so an error there uploads nothing. ``terms`` (:class:`SharingTerms`, default: none given) go into the card's metadata as
    :func:`~hf_atr.model_card.write_model_card` describes: without a licence (given here or recorded on the
    model) the card claims none.

    Returns:
        huggingface_hub's ``CommitInfo`` of the upload.
    """
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as work_dir:
        files = stage_model_files(
            model,
            work_dir,
            repo_id=repo_id,
            processor=processor,
            eval_results=eval_results,
            training_data=training_data,
            terms=terms,
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


def stage_model_files(
    model: Any,
    directory: str | os.PathLike,
    *,
    repo_id: str | None = None,
    processor: Any = None,
    eval_results: Mapping[str, float] | None = None,
    training_data: str | None = None,
    terms: SharingTerms | None = None,
    max_shard_size: str | int = "5GB",
    stage_extra: Callable[[Path], object] | None = None,
) -> list[Path]:
    """Write into ``directory`` exactly the files :func:`push_model_files` uploads; returns them, sorted.

    Useful on its own to inspect a repository before pushing it (``examples/push_to_hub.py --dry-run``, through
    :func:`hf_atr.pipelines.sharing.stage_upload`).
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
        **(terms or SharingTerms()).card_fields(),
    }
    write_model_files(model, directory, {MODEL_CARD_FILE: card})
    return sorted(path for path in directory.rglob("*") if path.is_file())


MOVED_NAMES = {"push_to_hub": "hf_atr.pipelines.sharing", "stage_upload": "hf_atr.pipelines.sharing"}
"""The public names of this module before :func:`push_model_files` and :func:`stage_model_files`: they take the
options of :class:`HubUpload` (and ``index_dir``) from :mod:`hf_atr.pipelines.sharing` now, and warn here."""
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "SHARING_TERM_OPTIONS",
    "HubUpload",
    "SharingTerms",
    "push_model_files",
    "push_options",
    "stage_model_files",
]
