"""``--model`` for the sub-commands that load a saved model: a directory or a Hub id checked before anything is
loaded, and the retrieval pipeline that ``hf-atr index``, ``search`` and ``serve`` build from it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hf_atr.pipelines.index import IndexMismatchError

HUB_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""``owner/name``: what ``--model`` may name on the Hub when no local directory of that name exists."""


def checked_model(model: str) -> str:
    """``--model`` as a local directory (``~`` expanded) holding a saved model, or a Hub repository id.

    Raises:
        SystemExit: no such directory (and not of the form ``owner/name``), or a directory without a
            ``config.json``.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SystemExit(
                f"--model {model}: the directory holds no saved model (no config.json); give the folder that "
                "`save_pretrained` (or `hf-atr demo`) wrote."
            )
        return str(path)
    if path.exists():
        raise SystemExit(f"--model {model} is a file; give the directory of a saved model.")
    if not HUB_REPO_ID.match(model):
        raise SystemExit(f"--model {model}: no such directory.")
    return model


def load_retrieval_pipeline(model: str, **pipeline_kwargs: Any) -> Any:
    """The retrieval pipeline of ``--model``; a missing model or an unreadable index ends the command with
    a message naming it."""
    from transformers import pipeline  # importing hf_atr arranged the task's registration (auto_registration)

    from hf_atr.pipelines.index import IndexFormatError, IndexMismatchError

    model_path = checked_model(model)
    try:
        return pipeline("audio-text-retrieval", model=model_path, **pipeline_kwargs)
    except IndexMismatchError as error:
        raise SystemExit(f"hf-atr: {rebuild_advice(error, model)}") from error
    except (IndexFormatError, FileNotFoundError) as error:
        raise SystemExit(f"hf-atr: {error}") from error
    except OSError as error:
        if model_path != model or Path(model_path).is_dir():
            raise
        raise SystemExit(
            f"--model {model}: no such directory, and no model of that name could be loaded from the Hub "
            f"({str(error).splitlines()[0]})."
        ) from error


def rebuild_advice(error: IndexMismatchError, model: str) -> str:
    """What differs between an index and ``--model`` (an ``IndexMismatchError``), with the ``hf-atr index``
    command that rebuilds the index for that model (the error's own message names the Python call)."""
    from hf_atr.pipelines.persistence import AUDIO_INDEX_NAME

    source = "--audio-dir DIR" if error.name == AUDIO_INDEX_NAME else "--captions FILE"
    return (
        f"{error.problem} Rebuild it for this model with `hf-atr index --model {shlex.quote(model)} {source} --out "
        f"{shlex.quote(str(error.directory))} --overwrite`, or use the model that built it."
    )


__all__ = ["HUB_REPO_ID", "checked_model", "load_retrieval_pipeline", "rebuild_advice"]
