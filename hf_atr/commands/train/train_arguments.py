"""The arguments of ``hf-atr train``: dataclasses that transformers' ``HfArgumentParser`` reads, with
``TrainingArguments``, from the command line or a YAML/JSON file.

A config file comes first (``hf-atr train run.yaml [--flag value ...]``); its keys are the flags without their
dashes (``output_dir``, ``dataset``, ``objective_args``, ...), and flags given after it override its values.
This module imports transformers only when a parser is built, so that ``hf-atr --help`` stays light, and
``hf-atr train --help`` imports no model code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from ...data.corpora import CORPUS_LOADERS
from ...data.corpus_utils import MISSING_POLICIES
from ...data.multilingual import normalize_language_code
from ...data.overlap import OVERLAP_CRITERIA
from ...data.schema import ENGLISH
from ...metrics.retrieval import DEFAULT_MAP_CUTOFFS

if TYPE_CHECKING:
    from transformers import HfArgumentParser, TrainingArguments

    from ...windowing import Windowing

CONFIG_FILE_SUFFIXES = (".yaml", ".yml", ".json")
AUTO_WORKERS = -1
"""``--dataloader_num_workers`` unset (or -1): :func:`default_dataloader_workers` picks the count."""
MAX_DEFAULT_WORKERS = 8
"""The most DataLoader workers chosen by default. On a 16-core H100 machine, 8 workers fed AtrTrainer faster than
15 (precomputed features: 278 against 322 ms per step of 256 pairs; raw audio on the device: 352 against 343 ms,
issue 22): more workers contend with the training process for cores and memory bandwidth."""
DATALOADER_WORKERS_HELP = (
    "DataLoader worker processes that prepare the training batches (0: in the training process). Unset (or -1): "
    f"min({MAX_DEFAULT_WORKERS}, usable cores per process - 1), the usable cores being those this process may run "
    "on (os.sched_getaffinity) shared by the processes of the machine (LOCAL_WORLD_SIZE); the count and how it "
    "was chosen are written to OUTPUT_DIR/metrics.json (data_loading). The training log's data_wait is the share "
    "of each step spent waiting for batches"
)
TORCH_COMPILE_CHOICES = {"auto": None, "true": True, "false": False}
"""``--torch_compile``'s values; ``auto`` (the default, ``None`` until resolved) compiles on CUDA devices only."""
TORCH_COMPILE_HELP = (
    "compile the model with torch.compile: auto (the default: on a CUDA device, not on a CPU), true or false. The "
    "first step compiles (its time is logged); captions are padded to a few fixed lengths so that each compiles "
    "once. Dropout draws its random numbers differently under compilation"
)
NAN_INF_FILTER_HELP = (
    "transformers' per-step NaN/inf check of the loss, which reads the loss back every step; off by default here, "
    "since the trainer's own check (skipped or raised at the next logging step) covers it"
)
FEATURES_CACHE_SUBDIRECTORY = "hf_atr_features"
"""Default home of the extracted features: this folder of the datasets cache (``HF_DATASETS_CACHE``)."""


@dataclass
class StartingPointArguments:
    """Where fine-tuning starts: exactly one of ``model_name_or_path``, ``clap_model``, ``pe_audio_model``, or
    ``audio_model`` with ``text_model``."""

    _argument_group_name = (
        "starting point (one of --model_name_or_path, --clap_model, --pe_audio_model, "
        "--audio_model + --text_model)"
    )

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "an hf-atr model directory (saved with its processor) to fine-tune"}
    )
    clap_model: str | None = field(
        default=None,
        metadata={"help": "a transformers ClapModel checkpoint with its ClapProcessor (e.g. a local copy of "
                  "laion/clap-htsat-unfused), converted with AtrDualEncoderModel.from_clap"},
    )  # fmt: skip
    pe_audio_model: str | None = field(
        default=None,
        metadata={"help": "a transformers PeAudioModel checkpoint with its PeAudioProcessor (e.g. a local copy of "
                  "facebook/pe-av-small), converted with AtrDualEncoderModel.from_pe_audio; trains with its "
                  "objective, sigmoid, unless --objective is given"},
    )  # fmt: skip
    audio_model: str | None = field(
        default=None,
        metadata={"help": "audio tower directory with its feature extractor (AST, Whisper, PANNs, ...), "
                  "combined with --text_model by from_audio_text_pretrained"},
    )  # fmt: skip
    text_model: str | None = field(
        default=None,
        metadata={"help": "text tower directory with its tokenizer (BERT, RoBERTa, ...), or a "
                  "sentence-transformers directory (its pooling and normalisation are kept)"},
    )  # fmt: skip
    projection_dim: int | None = field(
        default=None, metadata={"help": "size of new projections (--audio_model/--text_model; unset: 512)"}
    )
    audio_pooling: str | None = field(
        default=None, metadata={"help": "audio tower pooling for --audio_model (mean, cls, pooler, ...)"}
    )
    text_pooling: str | None = field(
        default=None, metadata={"help": "text tower pooling for --text_model (mean, cls, pooler, ...)"}
    )
    scoring: str | None = field(
        default=None,
        metadata={
            "help": "scoring head: cosine, euclidean or mahalanobis (unset: cosine, or a CLAP checkpoint's)"
        },
    )
    freeze_audio: bool = field(
        default=False, metadata={"help": "freeze the audio tower (its projection still trains)"}
    )
    freeze_text: bool = field(
        default=False, metadata={"help": "freeze the text tower (its projection still trains)"}
    )


@dataclass
class DataArguments:
    """The corpus, its splits, its filters and its features."""

    _argument_group_name = "data"

    dataset: str = field(
        metadata={"help": f"a loader ({', '.join(CORPUS_LOADERS)}) with --data_dir, or a DatasetDict directory "
                  "saved with save_to_disk; for moment training, moments with --data_dir (a folder of "
                  "<corpus>_<split>_release.jsonl files) or one such .jsonl file (docs/moments.md)"},
    )  # fmt: skip
    data_dir: str | None = field(
        default=None, metadata={"help": "the corpus directory for a loader (wavcaps: its JSON file)"}
    )
    audio_dir: str | None = field(
        default=None, metadata={"help": "the loader's audio_dir, when apart from data_dir"}
    )
    missing: str = field(
        default="error",
        metadata={"help": "a missing or unreadable clip or malformed row: error (stop, naming it) or skip "
                  "(drop it and report)"},
    )  # fmt: skip
    encoding: str = field(default="utf-8", metadata={"help": "text encoding of the metadata files"})
    loader_options: dict | str | None = field(
        default=None,
        metadata={"help": 'further loader options as a JSON object, e.g. \'{"filename_pattern": "{youtube_id}.wav"}\' '
                  '(audiocaps), \'{"source": "FreeSound"}\' (wavcaps)'},
    )  # fmt: skip
    train_splits: list[str] = field(
        default_factory=lambda: ["train"],
        metadata={"help": "splits trained on, concatenated (esc50: e.g. fold1 fold2 fold3 fold4)"},
    )
    validation_split: str = field(
        default="validation",
        metadata={"help": "split evaluated during training when --eval_strategy is not 'no'"},
    )
    test_split: str = field(
        default="test", metadata={"help": "split evaluated at the end (esc50: e.g. fold5)"}
    )
    test_size: float | None = field(
        default=None,
        metadata={"help": "when the dataset has no test split: hold out this fraction (< 1) or number (>= 1) of "
                  "training clips as the test split, at random (--seed); they are saved to OUTPUT_DIR/test_split"},
    )  # fmt: skip
    test_dataset: str | None = field(
        default=None,
        metadata={"help": "take the test split from this dataset instead (a loader with --test_data_dir, or a "
                  "saved DatasetDict), e.g. train on wavcaps, test on clotho"},
    )  # fmt: skip
    test_data_dir: str | None = field(
        default=None, metadata={"help": "the corpus directory of --test_dataset"}
    )
    languages: list[str] = field(
        default_factory=lambda: [ENGLISH],
        metadata={"help": "caption languages trained and evaluated on (ISO 639-1 or 639-3: eng fra ja ...); "
                  "languages other than English come from the dataset's translations"},
    )  # fmt: skip
    exclude_test_overlap: bool = field(
        default=True,
        metadata={"help": "remove training clips that are clips of the test split (overlap filter, "
                  "--overlap_by); the card says what it removed"},
    )  # fmt: skip
    exclude_overlap_with: list[str] = field(
        default_factory=list,
        metadata={"help": "more reference datasets (save_to_disk directories, e.g. Clotho and AudioCaps test) "
                  "whose clips are removed from the training data"},
    )  # fmt: skip
    blocklist: str | None = field(
        default=None,
        metadata={"help": "a WavCaps block list JSON: its Freesound and YouTube ids are removed"},
    )
    overlap_by: list[str] = field(
        default_factory=lambda: list(OVERLAP_CRITERIA),
        metadata={
            "help": "match clips by source_id and/or content (decoded-PCM hash; reads the training audio)"
        },
    )
    feature_backend: str = field(
        default="transformers",
        metadata={
            "help": "audio features by the feature extractor (transformers) or its batched torch twin (torch)"
        },
    )
    feature_batch_size: int = field(default=32, metadata={"help": "clips per feature-extraction batch"})
    features_cache_dir: str | None = field(
        default=None,
        metadata={"help": "where extracted features are kept and reused (unset: "
                  f"$HF_DATASETS_CACHE/{FEATURES_CACHE_SUBDIRECTORY})"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("train_splits", "languages", "exclude_overlap_with", "overlap_by"):
            if isinstance(getattr(self, name), str):  # a YAML scalar for a list
                setattr(self, name, [getattr(self, name)])
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"--missing must be one of {list(MISSING_POLICIES)}, got {self.missing!r}.")
        from ...processing_atr import FEATURE_BACKENDS  # the processor's module, imported once the flags parse

        if self.feature_backend not in FEATURE_BACKENDS:
            raise ValueError(
                f"--feature_backend must be one of {list(FEATURE_BACKENDS)}, got {self.feature_backend!r}."
            )
        unknown = sorted(set(self.overlap_by) - set(OVERLAP_CRITERIA))
        if unknown or not self.overlap_by:
            raise ValueError(f"--overlap_by {self.overlap_by}: choose from {list(OVERLAP_CRITERIA)}.")
        self.loader_options = json_object(self.loader_options, "--loader_options")
        self.languages = [normalize_language_code(code) for code in self.languages]


@dataclass
class ObjectiveArguments:
    """The training objective and its hyperparameters."""

    _argument_group_name = "objective"

    objective: str | None = field(
        default=None,
        metadata={"help": "registered objective (contrastive, triplet, iot, iot_partial, dart, random_language, kcl, "
                  "cacl, ask, or a plugin); default: the starting model's, else contrastive"},
    )  # fmt: skip
    objective_args: dict | str | None = field(
        default=None,
        metadata={"help": 'the objective\'s hyperparameters as a JSON object, e.g. \'{"temperature": 0.05}\'; '
                  "with no --objective they update the starting model's objective"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.objective_args = json_object(self.objective_args, "--objective_args")


@dataclass
class ScaleArguments:
    """Training at scale: a streamed corpus, audio features on the training device, gradient-cached batches
    (README "Training at scale")."""

    _argument_group_name = "training at scale"

    train_shards: list[str] = field(
        default_factory=list,
        metadata={"help": "WebDataset .tar or parquet shards (files or glob patterns, e.g. shards/train/*.tar from "
                  "datasets_scripts/write_shards.py) streamed as the training data instead of --train_splits; "
                  "each process reads its own shards; needs --max_steps. The overlap filter does not run on a "
                  "stream: filter the corpus before writing its shards and pass --exclude_test_overlap false"},
    )  # fmt: skip
    stream_captions: str = field(
        default="random",
        metadata={
            "help": "streamed clips: one caption drawn per clip per epoch (random) or every caption (all)"
        },
    )
    shuffle_buffer_size: int | None = field(
        default=None,
        metadata={"help": "clips held by the stream's shuffle buffer (unset: 1000; 0: shard order)"},
    )
    audio_features: str = field(
        default="collator",
        metadata={"help": "training audio features extracted once into the features cache (collator), or "
                  "computed batched on the training device from waveforms that the DataLoader workers decode "
                  "and randomly crop (device)"},
    )  # fmt: skip
    embedding_chunk_size: int | None = field(
        default=None,
        metadata={"help": "gradient caching: the encoders see this many clips at a time, the objective the "
                  "whole (global) batch; memory no longer grows with the batch through the encoders"},
    )  # fmt: skip
    data_loading: dict[str, Any] | None = field(default=None, init=False)
    """How many DataLoader workers the run uses and how the count was chosen (:func:`resolve_dataloader_workers`;
    not a flag), for ``metrics.json``."""

    def __post_init__(self) -> None:
        if isinstance(self.train_shards, str):  # a YAML scalar for a list
            self.train_shards = [self.train_shards]
        # The training modules' own checks, imported once the flags parse.
        from ...training.device_inputs import AUDIO_FEATURE_SOURCES
        from ...training.grad_cache import check_chunk_size
        from ...training.streaming import CAPTION_MODES, DEFAULT_SHUFFLE_BUFFER

        if self.stream_captions not in CAPTION_MODES:
            raise ValueError(
                f"--stream_captions must be one of {list(CAPTION_MODES)}, got {self.stream_captions!r}."
            )
        if self.shuffle_buffer_size is None:
            self.shuffle_buffer_size = DEFAULT_SHUFFLE_BUFFER
        if self.shuffle_buffer_size < 0:
            raise ValueError(f"--shuffle_buffer_size must be 0 or more, got {self.shuffle_buffer_size}.")
        if self.audio_features not in AUDIO_FEATURE_SOURCES:
            raise ValueError(
                f"--audio_features must be one of {list(AUDIO_FEATURE_SOURCES)}, got {self.audio_features!r}."
            )
        if self.embedding_chunk_size is not None:
            check_chunk_size(self.embedding_chunk_size)


@dataclass
class TestEvaluationArguments:
    """How the test split is evaluated at the end (and the validation split during training)."""

    _argument_group_name = "test evaluation"

    map_cutoffs: list[int] = field(
        default_factory=lambda: list(DEFAULT_MAP_CUTOFFS),
        metadata={"help": "cutoffs c of mAP@c (DCASE 2025 ranks by mAP@16)"},
    )
    relevance: str | None = field(
        default=None,
        metadata={"help": "relevance judgements of the test split (CSV, docs/corpora.md): several relevant clips "
                  "per caption; read before training starts"},
    )  # fmt: skip
    relevance_threshold: float | None = field(
        default=None, metadata={"help": "graded judgements: relevant when relevance >= this value"}
    )
    eval_scoring: str = field(
        default="head",
        metadata={
            "help": "scores from the model's scoring head, or from the entropic OT plan (ot_plan, m-LTM Eq. 5)"
        },
    )
    eval_window_pooling: str | None = field(
        default=None,
        metadata={
            "help": "test evaluation: embed clips longer than the feature extractor's window window by window and "
            "pool them (mean or max; recorded in the protocol); default: the model's own protocol, which cuts "
            "such clips to the window (named in a warning)",
            "choices": ["mean", "max"],
        },
    )
    eval_window_seconds: float | None = field(
        default=None,
        metadata={
            "help": "--eval_window_pooling: window length in seconds (default: the extractor's window)"
        },
    )
    eval_hop_seconds: float | None = field(
        default=None,
        metadata={"help": "--eval_window_pooling: distance between window starts (default: half the window)"},
    )

    def __post_init__(self) -> None:
        from ...evaluation.evaluator import (
            SCORING_MODES,
        )  # the evaluator's module, imported once the flags parse

        if isinstance(self.map_cutoffs, int):
            self.map_cutoffs = [self.map_cutoffs]
        if self.eval_scoring not in SCORING_MODES:
            raise ValueError(
                f"--eval_scoring must be one of {list(SCORING_MODES)}, got {self.eval_scoring!r}."
            )
        if self.eval_window_pooling is None:
            given = [
                f"--{name}"
                for name in ("eval_window_seconds", "eval_hop_seconds")
                if getattr(self, name) is not None
            ]
            if given:
                raise ValueError(
                    f"{' and '.join(given)} set(s) the windows of --eval_window_pooling; give it too."
                )
        try:  # a window or hop that is not a positive number of seconds fails here, before training
            self.windowing()
        except ValueError as error:
            raise ValueError(
                str(error)
                .replace("window_seconds", "--eval_window_seconds")
                .replace("hop_seconds", "--eval_hop_seconds")
            ) from error

    def windowing(self) -> Windowing | None:
        """The test evaluation's :class:`~hf_atr.windowing.Windowing`, or ``None`` for the model's own protocol.

        Raises:
            ValueError: a window or hop that is not a positive number of seconds.
        """
        if self.eval_window_pooling is None:
            return None
        from ...windowing import Windowing

        return Windowing(
            window_seconds=self.eval_window_seconds,
            hop_seconds=self.eval_hop_seconds,
            pooling=self.eval_window_pooling,
        )


@dataclass
class CardArguments:
    """What the model card says about sharing the model: its licence and the checkpoints it starts from."""

    _argument_group_name = "model card"

    license: str | None = field(
        default=None,
        metadata={"help": "the licence of the trained model, as the Hub's id of it (an SPDX id in lower case: "
                  "apache-2.0, mit, cc-by-nc-4.0, ...) or other with --license_name and --license_link. The terms "
                  "of the training data and of the towers may restrict it (ESC-50 is CC BY-NC). Unset: the card "
                  "claims no licence and says that one must be set before sharing"},
    )  # fmt: skip
    license_name: str | None = field(
        default=None, metadata={"help": "--license other: a short id of the licence, e.g. my-license-1.0"}
    )
    license_link: str | None = field(
        default=None,
        metadata={"help": "--license other: LICENSE (a file of the model's repository) or a URL to its text"},
    )
    base_model: list[str] = field(
        default_factory=list,
        metadata={"help": "Hub ids (owner/name) of the checkpoints the model starts from, for the card's "
                  "base_model, e.g. the ids of the towers given as local copies; unset: the towers' own names "
                  "where they are Hub ids (a local path is never written)"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        # The card's module, imported once the flags parse.
        from ...model_card.facts import check_license, hub_model_id

        if isinstance(self.base_model, str):  # a YAML scalar for a list
            self.base_model = [self.base_model]

        self.license = check_license(self.license, self.license_name, self.license_link, prefix="--")
        for name in self.base_model:
            if hub_model_id(name) != name:
                raise ValueError(
                    f"--base_model {name}: not a Hub repository id (owner/name), or a local path; the card names "
                    "base models by their Hub ids only."
                )


class TrainArguments(NamedTuple):
    """Everything ``hf-atr train`` reads."""

    starting_point: StartingPointArguments
    data: DataArguments
    objective: ObjectiveArguments
    evaluation: TestEvaluationArguments
    scale: ScaleArguments
    training: TrainingArguments
    card: CardArguments


def json_object(value: dict | str | None, option: str) -> dict[str, Any]:
    """``value`` as a dict: a dict (from a YAML/JSON config), a JSON object string (from the command line) or
    ``None`` (empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{option} must be a JSON object, e.g. '{{\"temperature\": 0.05}}': {error}."
            ) from None
    if not isinstance(value, dict):
        raise ValueError(f"{option} must be a JSON object (a mapping of names to values), got {value!r}.")
    return value


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a container's or ``taskset``'s limit, unlike
    ``os.cpu_count``), or ``os.cpu_count()`` where the platform has no affinity."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_dataloader_workers(cores: int, processes: int = 1) -> int:
    """``min(MAX_DEFAULT_WORKERS, cores // processes - 1)``, at least 0: each training process keeps one of its
    share of the cores for itself and gives the rest to its DataLoader workers.

    Args:
        cores: the usable cores of the machine (:func:`usable_cores`).
        processes: training processes on the machine (``LOCAL_WORLD_SIZE`` under torchrun / accelerate).
    """
    return max(0, min(MAX_DEFAULT_WORKERS, cores // max(1, processes) - 1))


def resolve_dataloader_workers(scale: ScaleArguments, training: TrainingArguments) -> None:
    """Set ``training.dataloader_num_workers`` when it was left unset (:data:`AUTO_WORKERS`) and record the choice
    in ``scale.data_loading``.

    Raises:
        ValueError: a negative count other than -1, or ``--dataloader_prefetch_factor`` when the default is 0
            workers.
    """
    workers = training.dataloader_num_workers
    if workers >= 0:
        scale.data_loading = {"dataloader_num_workers": workers, "chosen_by": "--dataloader_num_workers"}
        return
    if workers != AUTO_WORKERS:
        raise ValueError(
            f"--dataloader_num_workers must be 0 or more (or -1 for the default), got {workers}."
        )
    cores, processes = usable_cores(), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    workers = default_dataloader_workers(cores, processes)
    if workers == 0 and training.dataloader_prefetch_factor is not None:
        raise ValueError(
            f"--dataloader_prefetch_factor needs DataLoader workers, and the default on this machine is 0 ({cores} "
            f"usable core(s) for {processes} process(es)): give --dataloader_num_workers too."
        )
    training.dataloader_num_workers = workers
    scale.data_loading = {
        "dataloader_num_workers": workers,
        "chosen_by": f"default: min({MAX_DEFAULT_WORKERS}, usable cores per process - 1)",
        "usable_cores": cores,
        "processes_on_the_machine": processes,
    }


def torch_compile_choice(value: str | bool) -> bool | None:
    """``--torch_compile``'s value: ``auto`` → ``None`` (resolved by :func:`resolve_torch_compile`), ``true`` /
    ``false`` (any case) → a bool."""
    if isinstance(value, bool):
        return value
    choice = str(value).strip().lower()
    if choice not in TORCH_COMPILE_CHOICES:
        raise ValueError(f"--torch_compile must be one of {list(TORCH_COMPILE_CHOICES)}, got {value!r}.")
    return TORCH_COMPILE_CHOICES[choice]


def resolve_torch_compile(training: TrainingArguments) -> None:
    """``--torch_compile auto`` (left ``None`` by the parser): compile when training on a CUDA device, with the
    backend ``--torch_compile_backend`` names (inductor by default), as ``TrainingArguments`` does for ``true``."""
    if training.torch_compile is not None:
        return
    training.torch_compile = training.device.type == "cuda"
    if training.torch_compile and training.torch_compile_backend is None:
        training.torch_compile_backend = "inductor"


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
    "AUTO_WORKERS",
    "CONFIG_FILE_SUFFIXES",
    "MAX_DEFAULT_WORKERS",
    "CardArguments",
    "DataArguments",
    "ObjectiveArguments",
    "ScaleArguments",
    "StartingPointArguments",
    "TestEvaluationArguments",
    "TrainArguments",
    "argument_parser",
    "default_dataloader_workers",
    "json_object",
    "parse_train_arguments",
    "read_config_file",
    "resolve_dataloader_workers",
    "resolve_torch_compile",
    "torch_compile_choice",
    "usable_cores",
]
