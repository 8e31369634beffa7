"""Zero-shot classification of a labelled dataset: every clip scored against prompts of every class.

Each class becomes captions through templates (``"This is a sound of {class}."``) and one class embedding
(:func:`~hf_atr.encoding.encode_labels`, the prompt ensemble that the retrieval pipeline's ``classify`` uses);
each clip is scored against every class with the model's scoring head. The metrics reuse the retrieval
arithmetic with the clips as queries and the classes as the gallery (one relevant class per clip), so ties
count against the true class as everywhere else (:data:`~hf_atr.metrics.ranks.TIE_RULE`):

- ``accuracy``: clip -> class R@1, the share of clips whose true class scores strictly above every other;
- ``balanced_accuracy``: the mean over classes of each class's accuracy;
- ``mAP@10``: clip -> class mAP@10, the mean reciprocal rank of the true class within the top 10;
- ``class_to_audio_mAP@10``: each class's prompts retrieving the clips of that class.

The classes to choose from are the dataset's own class list when its loader records one (ESC-50: all 50
classes, even for a fold that holds a few of them; :func:`~hf_atr.data.schema.class_list`), else the split's
distinct labels, with a warning. Chance (:func:`chance_levels`) is recorded beside the figures, and a split with
fewer clips than classes (:func:`minimum_clips`) is flagged as too few to measure. Several splits (ESC-50's folds)
are encoded once, concatenated, with figures per split as well (:meth:`ZeroShotEvaluator.split_results`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from datasets import concatenate_datasets
from transformers.utils import logging

from ..data.schema import class_list, corpus_provenance
from ..encoding import check_templates, encode_labels
from ..metrics.ranks import TIE_RULE
from ..metrics.retrieval import retrieval_ranks
from ..plots.canvas import require_matplotlib
from ..processing_atr import AtrProcessor
from ..windowing import Windowing
from .clip_evaluator import ClipEvaluator, EvaluationReport, describe_split, head_similarity
from .report import write_zero_shot_report

LABEL_COLUMN = "label"
"""The shared schema's class column (ESC-50, synthcaps)."""
MAP_CUTOFF = 10
METRIC_NAMES: tuple[str, ...] = ("accuracy", "balanced_accuracy", "mAP@10", "class_to_audio_mAP@10")
"""The metrics of :meth:`ZeroShotPredictions.metrics`, in order."""
METRIC_KEYS = {"accuracy": "t2a_R@1", "mAP@10": "t2a_mAP@10", "class_to_audio_mAP@10": "a2t_mAP@10"}
"""Zero-shot metric -> key of the retrieval metrics with clips as queries and classes as the gallery."""
_LISTED_ROWS = 5
WHOLE = "all"
"""The name :meth:`ZeroShotEvaluator.split_results` gives the figures over all splits, when there are several."""
CLASSES_FROM = {
    "labels": "the labels given",
    "dataset": "the dataset's class list",
    "split": "the split's distinct labels (the dataset records no class list)",
}
"""``protocol["classes_from"]``: where the classes to choose from came from."""

logger = logging.get_logger(__name__)


def minimum_clips(num_classes: int) -> int:
    """The fewest clips a split needs for its zero-shot figures to measure anything: one per class. With fewer,
    some classes are never tested and each clip moves accuracy by more than chance itself (one clip of 50 classes
    scores 0 or 100 %)."""
    return num_classes


def chance_levels(num_classes: int) -> dict[str, float]:
    """The expected figures of a classifier that ranks the classes in random order: ``accuracy`` and
    ``balanced_accuracy`` 1/n, ``mAP@10`` (the true class's reciprocal rank within the top 10)
    (1/n) * sum_{r=1}^{min(10, n)} 1/r. ``class_to_audio_mAP@10`` has none here: it depends on how many clips each
    class has."""
    reciprocal_ranks = sum(1.0 / rank for rank in range(1, min(MAP_CUTOFF, num_classes) + 1))
    return {
        "accuracy": 1.0 / num_classes,
        "balanced_accuracy": 1.0 / num_classes,
        "mAP@10": reciprocal_ranks / num_classes,
    }


@dataclass
class ZeroShotPredictions:
    """The scores of every clip against every class, with the clips' true classes.

    Args:
        scores: `(n_clips, n_classes)` the model's similarity of each clip to each class embedding.
        true_classes: `(n_clips,)` int64 index of each clip's class in `class_names`.
        class_names: the classes, in the columns' order.
        clip_rows: `(n_clips,)` int64 dataset row of each clip (default ``0..n_clips - 1``; rows are missing
            when the evaluator left undecodable clips out).
    """

    scores: torch.Tensor
    true_classes: torch.Tensor
    class_names: list[str]
    clip_rows: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.clip_rows is None:
            self.clip_rows = torch.arange(len(self.true_classes))

    def metrics(self) -> dict[str, float]:
        """``accuracy``, ``balanced_accuracy``, ``mAP@10`` and ``class_to_audio_mAP@10`` (module docstring)."""
        retrieval = retrieval_ranks(self.scores, self.true_classes).metrics(
            ks=(1,), map_cutoffs=(MAP_CUTOFF,)
        )
        return {
            "accuracy": retrieval[METRIC_KEYS["accuracy"]],
            "balanced_accuracy": float(np.nanmean(self.per_class_accuracy())),
            "mAP@10": retrieval[METRIC_KEYS["mAP@10"]],
            "class_to_audio_mAP@10": retrieval[METRIC_KEYS["class_to_audio_mAP@10"]],
        }

    def predicted_classes(self) -> torch.Tensor:
        """`(n_clips,)` the best-scoring class of each clip; a tie between the true class and another is
        resolved against the true class, so that ``accuracy`` is the share of clips predicted correctly."""
        scores = self.scores.double()
        rows = torch.arange(len(scores))
        true_scores = scores[rows, self.true_classes]
        others = scores.clone()
        others[rows, self.true_classes] = -torch.inf
        best_other = others.max(dim=1)
        return torch.where(true_scores > best_other.values, self.true_classes, best_other.indices)

    def confusion_matrix(self) -> np.ndarray:
        """`(n_classes, n_classes)` int64 clip counts: ``[t, p]`` clips of class t predicted as class p."""
        size = len(self.class_names)
        confusion = np.zeros((size, size), dtype=np.int64)
        np.add.at(confusion, (self.true_classes.numpy(), self.predicted_classes().numpy()), 1)
        return confusion

    def per_class_accuracy(self) -> np.ndarray:
        """`(n_classes,)` share of each class's clips predicted correctly (NaN for a class without clips)."""
        confusion = self.confusion_matrix()
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.diag(confusion) / confusion.sum(axis=1)

    def select(self, rows: Sequence[int]) -> ZeroShotPredictions:
        """The predictions of the clips at these dataset rows (e.g. one ESC-50 fold), over the same classes;
        rows the evaluator left out (undecodable clips) have none."""
        index = torch.isin(self.clip_rows, torch.as_tensor(list(rows), dtype=torch.long)).nonzero().squeeze(1)
        return ZeroShotPredictions(
            self.scores[index], self.true_classes[index], self.class_names, self.clip_rows[index]
        )


class ZeroShotEvaluator(ClipEvaluator):
    """Zero-shot classification metrics of a model on a labelled dataset (module docstring).

    Args:
        dataset: shared-schema rows with precomputed audio features (or raw ``audio``) and a class column; or
            several splits (a mapping name -> rows, e.g. a ``DatasetDict`` of ESC-50 folds), concatenated in order
            and encoded once, with figures per split as well (:meth:`split_results`).
        processor: the model's :class:`~hf_atr.AtrProcessor`.
        labels: the classes to choose from; every clip's label must be one of them. Default: the dataset's class
            list, recorded by its loader in its provenance (:func:`~hf_atr.data.schema.class_list`: ESC-50's 50
            classes in its order, however few a fold holds); for a dataset without one, the split's distinct
            labels, sorted, with a warning saying so.
        label_column: the column holding each clip's class.
        templates: caption templates with ``{}`` or ``{class}``; several are averaged (default
            ``"This is a sound of {class}."``).
        split: name of the evaluation set, used in messages and recorded in `protocol` (default for several splits:
            their names joined by ``+``).
        min_clips: a split with fewer clips is flagged as too few to measure (a warning, ``too_few_clips`` in
            `protocol` and :meth:`split_results`); default :func:`minimum_clips`, one clip per class.
        windowing, strict: how long clips are encoded and whether an undecodable clip stops the evaluation, as
            for :class:`~hf_atr.evaluation.evaluator.RetrievalEvaluator`, by the same clip encoding
            (:class:`~hf_atr.evaluation.clip_evaluator.ClipEvaluator`; default: the model's own protocol;
            undecodable clips left out, named in a warning and in ``protocol["skipped_clips"]``).

    Calling it with a model returns the metrics; :meth:`predict` the scores behind them, :meth:`report` writes the
    confusion matrix, the per-class accuracy and ``report.html``. ``protocol`` records how the figures are
    obtained (split, clips, classes and where they came from, chance, whether there are too few clips, templates,
    scoring, tie rule, window pooling, clips cut to the window, skipped clips).

    Raises:
        ValueError: on an empty dataset, a missing label column, a clip without a label, or a label that is not
            among `labels` (naming the rows); several splits of which one is named ``"all"``; a negative
            `min_clips`.
    """

    name = "zero_shot"
    primary_metric = "accuracy"

    def __init__(
        self,
        dataset: Any,
        processor: AtrProcessor,
        *,
        labels: Sequence[str] | None = None,
        label_column: str = LABEL_COLUMN,
        templates: str | Sequence[str] | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        split: str | None = None,
        windowing: Windowing | None = None,
        strict: bool = False,
        min_clips: int | None = None,
    ) -> None:
        if min_clips is not None and (
            isinstance(min_clips, bool) or not isinstance(min_clips, int) or min_clips < 0
        ):
            raise ValueError(f"min_clips must be a whole number of clips, 0 or more; got {min_clips!r}.")
        dataset, split_rows = _concatenated(dataset)
        if split is None and split_rows:
            split = "+".join(split_rows)
        self.split_rows = split_rows or {split or WHOLE: range(len(dataset))}
        where = describe_split(split)
        if len(dataset) == 0:
            raise ValueError(f"{where} has no clips: nothing to classify.")
        if label_column not in dataset.column_names:
            raise ValueError(
                f"{where} has no {label_column!r} column to take the classes from; its columns are "
                f"{dataset.column_names}. Pass label_column=... (`--label-column`)."
            )
        clip_labels = list(dataset[label_column])
        unlabelled = [row for row, label in enumerate(clip_labels) if not isinstance(label, str) or not label]
        if unlabelled:
            raise ValueError(
                f"{where}: {len(unlabelled)} clip(s) have no {label_column!r}, e.g. row(s) "
                f"{unlabelled[:_LISTED_ROWS]}; every clip needs its class."
            )
        class_names, classes_from = _class_names(dataset, labels, clip_labels)
        if classes_from == "split":
            logger.warning(
                f"{where}: the dataset records no class list, so its clips are classified among the "
                f"{len(class_names)} distinct labels they carry (chance {100 / len(class_names):.2f} %); pass "
                "labels=[...] (`hf-atr evaluate --labels`) to choose among all the classes of its corpus."
            )
        class_index = {name: index for index, name in enumerate(class_names)}
        unknown = [row for row, label in enumerate(clip_labels) if label not in class_index]
        if unknown:
            examples = ", ".join(f"row {row} {clip_labels[row]!r}" for row in unknown[:_LISTED_ROWS])
            raise ValueError(
                f"{where}: {len(unknown)} clip(s) have a {label_column!r} that is not among the {len(class_names)} "
                f"labels to choose from ({examples}); add them to the labels or leave those clips out."
            )
        self.class_names = class_names
        self.true_classes = torch.tensor([class_index[label] for label in clip_labels], dtype=torch.long)
        self.templates = check_templates(templates)
        self.min_clips = minimum_clips(len(class_names)) if min_clips is None else min_clips
        self._warn_about_small_splits(split, len(dataset))
        super().__init__(
            dataset,
            processor,
            batch_size=batch_size,
            show_progress=show_progress,
            split=split,
            windowing=windowing,
            strict=strict,
        )
        self.protocol = {
            "task": "zero-shot classification (clips as queries, class prompts as the gallery)",
            "tie_rule": TIE_RULE,
            "split": split,
            "clips": len(dataset),
            "classes": len(class_names),
            "classes_from": CLASSES_FROM[classes_from],
            "chance": chance_levels(len(class_names)),
            "min_clips": self.min_clips,
            "too_few_clips": len(dataset) < self.min_clips,
            "label_column": label_column,
            "templates": list(self.templates),
            "class_embedding": "mean of the templates' caption embeddings, L2-normalised",
            "scoring": "head",
            **self.encoding_protocol(),
        }

    def __call__(self, model: Any) -> dict[str, float]:
        return self.predict(model).metrics()

    def predict(self, model: Any) -> ZeroShotPredictions:
        """Encode the clips and the class prompts once and score every clip against every class (clips that
        cannot be decoded are left out unless ``strict``)."""
        class_embeds = encode_labels(model, self.processor, self.class_names, self.templates)
        clips = self.encode_clips(model)
        self.protocol["too_few_clips"] = len(clips.kept) < self.min_clips
        if not clips.kept:
            raise ValueError(f"{describe_split(self.split)}: no clip could be decoded; nothing to classify.")
        kept = torch.tensor(clips.kept, dtype=torch.long)
        scores = head_similarity(model)(class_embeds, clips.embeddings).T
        return ZeroShotPredictions(scores.contiguous(), self.true_classes[kept], self.class_names, kept)

    def split_results(self, predictions: ZeroShotPredictions) -> dict[str, dict[str, Any]]:
        """The figures of every split evaluated, then of all of them (``"all"``) when there are several:
        ``{split: {"clips", "too_few_clips", **metrics}}``, clips counted after undecodable ones were left out (a
        split left without clips has no metrics). A single dataset is one split, named as `split` (``"all"``
        without a name)."""
        parts = {name: predictions.select(rows) for name, rows in self.split_rows.items()}
        if len(parts) != 1:
            parts[WHOLE] = predictions
        results = {}
        for name, part in parts.items():
            clips = len(part.true_classes)
            metrics = part.metrics() if clips else {}
            results[name] = {"clips": clips, "too_few_clips": clips < self.min_clips, **metrics}
        return results

    def _warn_about_small_splits(self, split: str | None, clips: int) -> None:
        """One warning naming the splits (and their whole) with fewer clips than :attr:`min_clips`."""
        several = len(self.split_rows) > 1
        sizes = {name: len(rows) for name, rows in self.split_rows.items()} if several else {}
        sizes[split] = clips
        small = [
            f"{describe_split(name, capital=False)} ({size} clips)"
            for name, size in sizes.items()
            if size < self.min_clips
        ]
        if small:
            logger.warning(
                f"Too few clips to measure {len(self.class_names)} classes (fewer than {self.min_clips}): "
                f"{', '.join(small)}; their figures are flagged `too_few_clips`."
            )

    def report(
        self, model: Any, output_dir: str | os.PathLike, *, title: str | None = None
    ) -> EvaluationReport:
        """Classify, then write the confusion matrix, per-class accuracy and ``report.html`` into `output_dir`.

        Needs matplotlib (``pip install 'hf-atr[plots]'``).
        """
        require_matplotlib()  # before encoding: nothing is computed in vain
        return self.write_report(self.predict(model), output_dir, title=title)

    def write_report(
        self, predictions: ZeroShotPredictions, output_dir: str | os.PathLike, *, title: str | None = None
    ) -> EvaluationReport:
        """The report of predictions already made (:meth:`predict`, or a :meth:`ZeroShotPredictions.select` of
        them): the figures and ``report.html`` in `output_dir`."""
        metrics = predictions.metrics()
        clips = len(predictions.true_classes)
        path = write_zero_shot_report(
            output_dir,
            predictions.confusion_matrix(),
            predictions.class_names,
            metrics,
            {**self.protocol, "clips": clips, "too_few_clips": clips < self.min_clips},
            title=title
            or f"Zero-shot classification on {describe_split(self.split, capital=False)} "
            f"({clips} clips, {len(predictions.class_names)} classes)",
        )
        return EvaluationReport(metrics=metrics, path=path)


def _concatenated(dataset: Any) -> tuple[Any, dict[str, range]]:
    """``(rows, {split: its rows})``: a mapping of splits concatenated in order, or one dataset as is (``{}``)."""
    if not isinstance(dataset, Mapping):
        return dataset, {}
    if not dataset:
        raise ValueError("No split to evaluate: the mapping of splits is empty.")
    if WHOLE in dataset and len(dataset) > 1:
        raise ValueError(
            f"Splits {list(dataset)}: a split named {WHOLE!r} cannot be evaluated with others (the figures over "
            "all of them carry that name); rename it."
        )
    split_rows, start = {}, 0
    for name, part in dataset.items():
        split_rows[name] = range(start, start + len(part))
        start += len(part)
    parts = list(dataset.values())
    return (parts[0] if len(parts) == 1 else concatenate_datasets(parts)), split_rows


def _class_names(dataset: Any, labels: Sequence[str] | None, clip_labels: list[Any]) -> tuple[list[str], str]:
    """The classes to choose from and where they come from (a key of :data:`CLASSES_FROM`)."""
    if labels is not None:
        return _checked_labels(labels), "labels"
    recorded = class_list(corpus_provenance(dataset)) if hasattr(dataset, "info") else None
    if recorded is not None:
        return recorded, "dataset"
    return sorted(set(clip_labels)), "split"


def _checked_labels(labels: Sequence[str]) -> list[str]:
    labels = [labels] if isinstance(labels, str) else list(labels)
    if not labels or not all(isinstance(label, str) and label for label in labels):
        raise ValueError(f"labels must be a non-empty list of non-empty strings, got {labels!r}.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"labels lists {repeated} more than once; each class must appear once.")
    return labels


__all__ = [
    "LABEL_COLUMN",
    "METRIC_NAMES",
    "ZeroShotEvaluator",
    "ZeroShotPredictions",
    "chance_levels",
    "minimum_clips",
]
