"""The parser of ``hf-atr train``: transformers' ``HfArgumentParser`` over the argument dataclasses (the model,
:mod:`~hf_atr.commands.train.model_arguments`; the data, :mod:`~hf_atr.commands.train.data_arguments`; the test
evaluation, :mod:`~hf_atr.commands.train.evaluation_arguments`; training at scale and ``TrainingArguments``,
:mod:`~hf_atr.commands.train.training_arguments`), read from the command line or a YAML/JSON file.

A config file comes first (``hf-atr train run.yaml [--flag value ...]``); its keys are the flags without their
dashes (``output_dir``, ``dataset``, ``objective_args``, ...), and flags given after it override its values.
This module imports transformers only when a parser is built, so that ``hf-atr --help`` stays light, and
``hf-atr train --help`` imports no model code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from .data_arguments import DataArguments
from .evaluation_arguments import TestEvaluationArguments
from .model_arguments import CardArguments, ObjectiveArguments, StartingPointArguments
from .option_values import torch_compile_choice
from .training_arguments import (
    AUTO_WORKERS,
    DATALOADER_WORKERS_HELP,
    NAN_INF_FILTER_HELP,
    TORCH_COMPILE_HELP,
    ScaleArguments,
    resolve_dataloader_workers,
    resolve_torch_compile,
)

if TYPE_CHECKING:
    from transformers import HfArgumentParser, TrainingArguments

CONFIG_FILE_SUFFIXES = (".yaml", ".yml", ".json")
"""What a config file given first is named (YAML or JSON)."""


class TrainArguments(NamedTuple):
    """Everything ``hf-atr train`` reads."""

    starting_point: StartingPointArguments
    data: DataArguments
    objective: ObjectiveArguments
    evaluation: TestEvaluationArguments
    scale: ScaleArguments
    training: TrainingArguments
    card: CardArguments


def argument_parser() -> HfArgumentParser:
    """The parser of ``hf-atr train``: the dataclasses above and ``TrainingArguments`` (whose
    ``--dataloader_num_workers`` defaults to :data:`AUTO_WORKERS` here)."""
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser(
        (
            StartingPointArguments,
            DataArguments,
            ObjectiveArguments,
            TestEvaluationArguments,
            ScaleArguments,
            TrainingArguments,
            CardArguments,
        ),
        prog="hf-atr train",
        description="Fine-tune an audio-text retrieval model, evaluate it on the test split and save it with "
        "its processor and model card. Arguments on the command line, or in a YAML/JSON file given first "
        "(hf-atr train run.yaml [--flag value ...]: flags override the file). Writes checkpoints to "
        "--output_dir, the final model to OUTPUT_DIR/model and the test metrics with their protocol to "
        "OUTPUT_DIR/metrics.json. Runs unchanged under torchrun or accelerate launch -m hf_atr.cli train.",
    )
    parser.set_defaults(
        dataloader_num_workers=AUTO_WORKERS, torch_compile="auto", logging_nan_inf_filter=False
    )
    for action in parser._actions:
        if action.dest == "dataloader_num_workers":
            action.help = DATALOADER_WORKERS_HELP
        elif action.dest == "torch_compile":
            action.type, action.help = torch_compile_choice, TORCH_COMPILE_HELP
            action.metavar = "{auto,true,false}"
        elif action.dest == "logging_nan_inf_filter":
            action.help = NAN_INF_FILTER_HELP
    return parser


def parse_train_arguments(argv: Sequence[str]) -> TrainArguments:
    """Parse ``hf-atr train``'s arguments: flags, or a YAML/JSON config file first and flags overriding it.

    Raises:
        SystemExit: bad flags (argparse's usage message), or a config file that cannot be read or holds keys
            that are no option (named).
    """
    argv = list(argv)
    parser = argument_parser()
    if argv and not argv[0].startswith("-") and argv[0].lower().endswith(CONFIG_FILE_SUFFIXES):
        config_file, argv = argv[0], argv[1:]
        values = read_config_file(config_file)
        destinations = {action.dest for action in parser._actions}
        unknown = sorted(set(values) - destinations)
        if unknown:
            parser.error(f"{config_file}: unknown option(s) {unknown}; keys are the flags without dashes.")
        parser.set_defaults(**values)
        for action in parser._actions:  # a required option the file gives is given
            if action.dest in values:
                action.required = False
    try:
        arguments = TrainArguments(*parser.parse_args_into_dataclasses(argv, look_for_args_file=False))
        resolve_dataloader_workers(arguments.scale, arguments.training)
        resolve_torch_compile(arguments.training)
    except ValueError as error:  # a dataclass's own check (ours or TrainingArguments')
        parser.error(str(error))
    return arguments


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The options of a YAML or JSON config file (a mapping of option names to values)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise SystemExit(f"hf-atr train: config file {path} not found.")
    text = path.read_text(encoding="utf-8")
    try:
        values = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SystemExit(f"hf-atr train: {path} is not valid {path.suffix[1:].upper()}: {error}") from None
    if not isinstance(values, dict):
        raise SystemExit(f"hf-atr train: {path} must hold a mapping of option names to values.")
    return values


__all__ = [
    "CONFIG_FILE_SUFFIXES",
    "TrainArguments",
    "argument_parser",
    "parse_train_arguments",
    "read_config_file",
]
