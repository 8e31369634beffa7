"""What several sub-commands share: ``--model`` (a directory or a Hub id checked before anything is loaded, and the
retrieval pipeline that ``hf-atr index``, ``search`` and ``serve`` build from it), ``--dtype`` (the precision the
model computes in), the windowing flags of ``index`` and ``evaluate``, a dataset saved with ``save_to_disk``, and the
process group of a distributed ``hf-atr index``.

Everything heavy (transformers, datasets, torch, accelerate) is imported inside the functions, so building the
parsers stays light."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hf_atr.pipelines.index_storage import IndexMismatchError

MODEL_DTYPES = ("float32", "bfloat16", "float16")
"""What ``--dtype`` loads a model in."""

HUB_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""``owner/name``: what ``--model`` may name on the Hub when no local directory of that name exists."""


@contextlib.contextmanager
def quiet_datasets_progress_bars() -> Iterator[None]:
    """Within: no ``datasets`` progress bar, for a stage short enough that a bar would only add lines to the log
    (``hf-atr train`` saving its held-out test split). The bars' state before (a user's own switch) is restored."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    shown = not are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if shown:
            enable_progress_bars()


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

    from hf_atr.pipelines.index_storage import IndexFormatError, IndexMismatchError

    model_path = checked_model(model)
    if (Path(model_path) / "onnx_export.json").is_file():  # hf-atr export --format onnx: ONNX Runtime encodes
        pipeline_kwargs = {"backend": "onnx", **pipeline_kwargs}
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


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """``--dtype {float32,bfloat16,float16}``: the precision the model is loaded and run in."""
    parser.add_argument(
        "--dtype",
        choices=MODEL_DTYPES,
        default=None,
        help="load and run the model in this precision (default: the dtype it was saved in); bfloat16 and float16 "
        "halve its memory and run faster on GPUs, at a small cost in rankings (docs/half-precision.md); the "
        "embeddings are float32 either way",
    )


def model_dtype_arguments(args: argparse.Namespace, device: Any = None) -> dict[str, Any]:
    """``{"dtype": torch dtype}`` for ``from_pretrained`` / ``pipeline`` when ``--dtype`` is given (else empty), checked
    on ``device`` (default: the first GPU when there is one, else the CPU): a dtype that torch cannot compute in there
    ends the command with a message naming it and what to use instead."""
    if args.dtype is None:
        return {}
    import torch

    dtype = getattr(torch, args.dtype)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        probe_dtype(dtype, torch.device(device))
    except RuntimeError as error:
        raise SystemExit(
            f"--dtype {args.dtype}: torch {torch.__version__} cannot run a model in {args.dtype} on {device} "
            f"({str(error).splitlines()[0]}); use {'bfloat16' if args.dtype == 'float16' else 'float32'} there."
        ) from error
    return {"dtype": dtype}


def probe_dtype(dtype: Any, device: Any) -> None:
    """Run the operations of every tower family (convolutions, batch and layer norms, attention's matrix products,
    GELU) on a few numbers in ``dtype`` on ``device``; torch's ``RuntimeError`` when it lacks one of them there (float16
    on the CPU before torch 2.1, bfloat16 on GPUs without it)."""
    import torch

    values = torch.ones(1, 2, 8, 8, dtype=dtype, device=device)
    conv2d = torch.nn.functional.conv2d(values, torch.ones(2, 2, 3, 3, dtype=dtype, device=device))
    conv1d = torch.nn.functional.conv1d(values[:, :, 0], torch.ones(2, 2, 3, dtype=dtype, device=device))
    torch.nn.functional.batch_norm(
        conv2d, torch.zeros(2, dtype=dtype, device=device), torch.ones(2, dtype=dtype, device=device)
    )
    normed = torch.nn.functional.layer_norm(conv1d, (conv1d.shape[-1],))
    torch.nn.functional.gelu(normed @ normed.transpose(-1, -2)).softmax(dim=-1)


def checked_device_argument(device: str) -> Any:
    """``--device`` as a ``torch.device`` this machine has; the command stops with a message naming it otherwise."""
    from hf_atr.pipelines.device_search import checked_device

    try:
        return checked_device(device)
    except ValueError as error:
        raise SystemExit(f"--device {device}: {error}") from error


def rebuild_advice(error: IndexMismatchError, model: str) -> str:
    """What differs between an index and ``--model`` (an ``IndexMismatchError``), with the ``hf-atr index``
    command that rebuilds the index for that model (the error's own message names the Python call)."""
    from hf_atr.pipelines.persistence import AUDIO_INDEX_NAME

    source = "--audio-dir DIR" if error.name == AUDIO_INDEX_NAME else "--captions FILE"
    return (
        f"{error.problem} Rebuild it for this model with `hf-atr index --model {shlex.quote(model)} {source} --out "
        f"{shlex.quote(str(error.directory))} --overwrite`, or use the model that built it."
    )


def add_windowing_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--window-seconds`` and ``--hop-seconds``, their help starting with ``what`` (what is windowed)."""
    parser.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help=f"{what}: window length in seconds (default: the feature extractor's window)",
    )
    parser.add_argument(
        "--hop-seconds",
        type=float,
        default=None,
        help=f"{what}: distance between window starts (default: half the window, 50%% overlap)",
    )


def parsed_windowing(args: argparse.Namespace, pooling: str) -> Any:
    """The ``Windowing`` of ``--window-seconds`` / ``--hop-seconds`` (and ``hf-atr index --frame-seconds``) with
    ``pooling``; a bad value ends the command."""
    from hf_atr.windowing import Windowing

    try:
        return Windowing(
            window_seconds=args.window_seconds,
            hop_seconds=args.hop_seconds,
            pooling=pooling,
            frame_seconds=getattr(args, "frame_seconds", None),  # hf-atr index only
        )
    except ValueError as error:
        raise SystemExit(f"hf-atr {args.command}: {error}") from error


@contextlib.contextmanager
def process_group() -> Iterator[Any]:
    """Under ``accelerate launch`` / ``torchrun`` (``WORLD_SIZE`` > 1): join the process group (gloo on
    CPU-only machines, where accelerate's default would start independent processes) and yield this
    process's device; alone, yield ``None`` (the pipeline's default device)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield None
        return
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    try:
        yield state.device
    finally:
        state.destroy_process_group()


def saved_dataset(path: Path) -> Any:
    """The ``DatasetDict`` or ``Dataset`` saved in ``path``."""
    from datasets import load_from_disk

    if not path.is_dir():
        raise SystemExit(
            f"--dataset {path} is neither `synthcaps` nor a directory saved with `save_to_disk`."
        )
    return load_from_disk(str(path))


def saved_split(path: Path, split: str) -> tuple[Any, str | None]:
    """Split ``split`` of a DatasetDict saved in ``path`` (or the saved Dataset itself, split ``None``)."""
    from datasets import DatasetDict

    loaded = saved_dataset(path)
    if isinstance(loaded, DatasetDict):
        if split not in loaded:
            raise SystemExit(f"{path} has no split {split!r}; splits: {sorted(loaded)}.")
        return loaded[split], split
    return loaded, None


def write_evaluation_output(
    args: argparse.Namespace, payload: dict[str, Any], report_path: Path | None
) -> None:
    """Write ``--output`` and say where it and the ``--report`` page are."""
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(payload, indent=2))
        print(f"Metrics and protocol written to {args.output}")
    if report_path is not None:
        print(f"Report written to {report_path} (figures beside it)")


__all__ = [
    "HUB_REPO_ID",
    "MODEL_DTYPES",
    "add_dtype_argument",
    "add_windowing_arguments",
    "checked_device_argument",
    "checked_model",
    "load_retrieval_pipeline",
    "model_dtype_arguments",
    "parsed_windowing",
    "probe_dtype",
    "process_group",
    "rebuild_advice",
    "saved_dataset",
    "saved_split",
    "write_evaluation_output",
]
