"""How ``hf-atr train`` evaluates the test split at the end (and the validation split during training):
``TestEvaluationArguments``, a dataclass that transformers' ``HfArgumentParser`` reads
(:mod:`~hf_atr.commands.train.train_arguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hf_atr.metrics.ranks import DEFAULT_MAP_CUTOFFS

if TYPE_CHECKING:
    from ...windowing import Windowing


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


__all__ = ["TestEvaluationArguments"]
