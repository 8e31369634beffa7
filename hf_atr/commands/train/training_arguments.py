"""How ``hf-atr train`` runs: training at scale (``ScaleArguments``, a dataclass that transformers'
``HfArgumentParser`` reads) and what it changes in transformers' ``TrainingArguments``: the DataLoader workers
picked from the usable cores when unset (:mod:`hf_atr.training.dataloader_workers`), ``--torch_compile auto``,
the per-step NaN/inf filter off, their help, and their resolution once the flags parse.
It imports ``hf_atr.training`` only once the flags parse, so that ``hf-atr train --help`` stays without it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import TrainingArguments

AUTO_WORKERS = -1
"""``--dataloader_num_workers`` unset (or -1): :func:`~hf_atr.training.dataloader_workers
.chosen_dataloader_workers` picks the count."""
DATALOADER_WORKERS_HELP = (
    "DataLoader worker processes that prepare the training batches (0: in the training process). Unset (or -1): "
    "min(8, usable cores per process - 1), the usable cores being those this process may run on "
    "(os.sched_getaffinity) shared by the processes of the machine (LOCAL_WORLD_SIZE); the count and how it was "
    "chosen are written to OUTPUT_DIR/metrics.json (data_loading). The training log's data_wait is the share of "
    "each step spent waiting for batches"
)
"""The help of ``--dataloader_num_workers``. It writes out the rule of :mod:`hf_atr.training.dataloader_workers`
(``DEFAULT_WORKERS_RULE``) rather than importing it, since ``hf-atr train --help`` imports nothing of
``hf_atr.training``; a test holds the two together."""
TORCH_COMPILE_HELP = (
    "compile the model with torch.compile: auto (the default: on a CUDA device, not on a CPU), true or false. The "
    "first step compiles (its time is logged); captions are padded to a few fixed lengths so that each compiles "
    "once. Dropout draws its random numbers differently under compilation"
)
NAN_INF_FILTER_HELP = (
    "transformers' per-step NaN/inf check of the loss, which reads the loss back every step; off by default here, "
    "since the trainer's own check (skipped or raised at the next logging step) covers it"
)


@dataclass
class ScaleArguments:
    """Training at scale: a streamed corpus, audio features on the training device, gradient-cached batches
    (docs/training-at-scale.md)."""

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


def resolve_dataloader_workers(scale: ScaleArguments, training: TrainingArguments) -> None:
    """Set ``training.dataloader_num_workers`` when it was left unset (:data:`AUTO_WORKERS`: the default of
    :func:`~hf_atr.training.dataloader_workers.chosen_dataloader_workers`) and record the choice in
    ``scale.data_loading``.

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
    from ...training.dataloader_workers import chosen_dataloader_workers

    chosen = chosen_dataloader_workers()
    if chosen["dataloader_num_workers"] == 0 and training.dataloader_prefetch_factor is not None:
        raise ValueError(
            "--dataloader_prefetch_factor needs DataLoader workers, and the default on this machine is 0 "
            f"({chosen['usable_cores']} usable core(s) for {chosen['processes_on_the_machine']} process(es)): give "
            "--dataloader_num_workers too."
        )
    training.dataloader_num_workers = chosen["dataloader_num_workers"]
    scale.data_loading = chosen


def resolve_torch_compile(training: TrainingArguments) -> None:
    """``--torch_compile auto`` (left ``None`` by the parser): compile when training on a CUDA device, with the
    backend ``--torch_compile_backend`` names (inductor by default), as ``TrainingArguments`` does for ``true``."""
    if training.torch_compile is not None:
        return
    training.torch_compile = training.device.type == "cuda"
    if training.torch_compile and training.torch_compile_backend is None:
        training.torch_compile_backend = "inductor"


__all__ = [
    "AUTO_WORKERS",
    "DATALOADER_WORKERS_HELP",
    "NAN_INF_FILTER_HELP",
    "TORCH_COMPILE_HELP",
    "ScaleArguments",
    "resolve_dataloader_workers",
    "resolve_torch_compile",
]
