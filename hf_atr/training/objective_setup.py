"""What each objective trains on: training views, by name, mapped to a dataset, a collator and callbacks.

An objective declares the view it needs (:attr:`Objective.training_view <hf_atr.objectives.Objective>`) and
whether it needs the whole training set at hand (``needs_whole_corpus``); this module maps view names to what
:class:`~hf_atr.AtrTrainer` gets beside the objective. The views built in:

- ``pairs``: caption pairs, :class:`~hf_atr.AtrTrainer`'s default (a :class:`CaptionPairDataset` over the
  training languages and :class:`AtrDataCollator`); the pair objectives also train from a stream
  (:class:`~hf_atr.training.streaming.StreamingPairs`);
- ``all_languages`` (``kcl``): each English caption slot once per epoch, batched with its ``K`` translations
  (:class:`MultilingualCollator`, ATRI Eq. 9-11);
- ``english_and_random_language`` (``cacl``): each slot once per epoch in one random non-English language, with
  its English caption (:class:`RandomLanguageDataset` without English + :class:`MultilingualCollator` in
  ``cacl`` mode, Eq. 12-13);
- ``random_language``: each slot once per epoch in one random language (the ML-CLAP baseline, Eq. 4-5);
- ``pairs_with_knowledge_base`` (``ask``): pairs, and a knowledge base built from the training clips and
  refreshed during training (:class:`KnowledgeBaseRefreshCallback`, ASK §4.4);
- ``pairs_from_moments``: moment annotations (:func:`~hf_atr.data.moments.load_moments`) as window crops inside the moments,
  paired with their queries, and crops outside them as in-recording negatives
  (:mod:`hf_atr.training.moment_crops`); chosen by the data (``view=MOMENTS_VIEW``), for objectives that train on
  ``pairs``.

With features on the training device the clips keep their raw audio and a :class:`WaveformCollator` prepares the
waveforms (alone, or inside the multilingual collator). A plugin adds a view with :func:`register_training_view`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import IterableDataset as StreamedDataset
from transformers import TrainerCallback

from ..data.schema import ENGLISH
from ..lazy import get_logger
from ..objectives.registry import Objective
from ..processing_atr import AtrProcessor
from .callbacks import KnowledgeBaseRefreshCallback
from .collator import AtrDataCollator, CaptionPairDataset
from .moment_crops import MOMENTS_VIEW, MomentCropCollator, MomentCropDataset, default_crop_seconds
from .multilingual import MultilingualCollator, RandomLanguageDataset
from .streaming import StreamingPairs
from .waveform_collator import WaveformCollator

logger = get_logger(__name__)


@dataclass
class ObjectiveTrainingSetup:
    """Arguments for :class:`~hf_atr.AtrTrainer`: ``train_dataset``, ``data_collator`` (``None``: the
    trainer's default) and ``callbacks``."""

    train_dataset: Any
    data_collator: Any = None
    callbacks: list[TrainerCallback] = field(default_factory=list)


@dataclass
class TrainingViewInputs:
    """What a training view is built from: the arguments of :func:`objective_training_setup`.

    Attributes:
        objective: the objective that will train (ASK's callback sets its knowledge base).
        clips: the shared-schema training clips (or a stream, for objectives that accept one).
        processor: the :class:`~hf_atr.AtrProcessor`.
        languages: the caption languages trained on (ISO 639-3; at least English).
        seed: seeds the view's random draws.
        show_progress: progress bars while the view prepares something (ASK's knowledge base).
        waveforms: the :class:`WaveformCollator` for features on the training device, or ``None``: the rows'
            precomputed features.
    """

    objective: Objective
    clips: Any
    processor: AtrProcessor
    languages: list[str]
    seed: int = 0
    show_progress: bool = False
    waveforms: WaveformCollator | None = None


TrainingView = Callable[[TrainingViewInputs], ObjectiveTrainingSetup]
"""A training view: its inputs -> the dataset, collator and callbacks the trainer gets."""

_TRAINING_VIEWS: dict[str, TrainingView] = {}


def register_training_view(name: str) -> Callable[[TrainingView], TrainingView]:
    """Function decorator that registers a training view under ``name``, the value an objective declares in
    ``training_view``.

    Example::

        @register_training_view("pairs_with_my_callback")
        def pairs_with_my_callback(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
            return ObjectiveTrainingSetup(inputs.clips, inputs.waveforms, callbacks=[MyCallback(inputs.objective)])

    Raises:
        ValueError: another function is registered under ``name``.
    """

    def decorator(view: TrainingView) -> TrainingView:
        existing = _TRAINING_VIEWS.get(name)
        if existing is not None and existing is not view:
            raise ValueError(
                f"A training view named {name!r} is already registered "
                f"({existing.__module__}:{existing.__qualname__})."
            )
        _TRAINING_VIEWS[name] = view
        return view

    return decorator


def training_views() -> list[str]:
    """Sorted names of the registered training views."""
    return sorted(_TRAINING_VIEWS)


@register_training_view("pairs")
def caption_pairs(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """The clips as they are: :class:`~hf_atr.AtrTrainer` makes caption pairs of them over the training languages
    (or streams them), collated by the waveform collator or the trainer's default."""
    return ObjectiveTrainingSetup(inputs.clips, inputs.waveforms)


@register_training_view("all_languages")
def all_languages(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """Each English caption slot once per epoch, with the same slot in every training language (``kcl``)."""
    return ObjectiveTrainingSetup(
        CaptionPairDataset(inputs.clips, languages=[ENGLISH]),
        MultilingualCollator(inputs.processor, languages=inputs.languages, waveforms=inputs.waveforms),
    )


@register_training_view("english_and_random_language")
def english_and_random_language(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """Each slot once per epoch in a random non-English language drawn per epoch, with its English caption
    (``cacl``)."""
    return ObjectiveTrainingSetup(
        RandomLanguageDataset(inputs.clips, inputs.languages, seed=inputs.seed, include_english=False),
        MultilingualCollator(
            inputs.processor, languages=inputs.languages, mode="cacl", waveforms=inputs.waveforms
        ),
    )


@register_training_view("random_language")
def random_language(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """Each slot once per epoch in one language drawn per epoch among those the clip has (``random_language``)."""
    return ObjectiveTrainingSetup(
        RandomLanguageDataset(inputs.clips, inputs.languages, seed=inputs.seed), inputs.waveforms
    )


@register_training_view("pairs_with_knowledge_base")
def pairs_with_knowledge_base(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """Caption pairs, and a callback that builds the objective's knowledge base from the training clips and
    refreshes it during training (``ask``)."""
    refresh = KnowledgeBaseRefreshCallback(
        inputs.objective,
        inputs.processor,
        inputs.clips,
        show_progress=inputs.show_progress,
        seed=inputs.seed,
    )
    return ObjectiveTrainingSetup(inputs.clips, inputs.waveforms, callbacks=[refresh])


@register_training_view(MOMENTS_VIEW)
def moment_crops(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
    """Moment annotations as window crops (:class:`MomentCropDataset`, one item per query per epoch, crops of the
    feature extractor's window): inside a moment, paired with its query; outside the recording's moments, unpaired
    negatives when the objective scores them (``accepts_negative_audio``), else left out.

    Raises:
        ValueError: an objective that trains on another view than ``pairs``, or a language other than English.
    """
    objective = inputs.objective
    if objective.training_view != "pairs":
        raise ValueError(
            f"Moment training pairs each crop with one query, the 'pairs' view; objective {objective.name!r} trains "
            f"on {objective.training_view!r}. Use a pair objective such as 'contrastive'."
        )
    if inputs.languages != [ENGLISH]:
        raise ValueError(f"Moment training reads the English queries only; got languages {inputs.languages}.")
    if not objective.accepts_negative_audio:
        logger.warning(
            f"Objective {objective.name!r} does not score unpaired audio: moment training draws no crops outside "
            "the moments, and a crop's negatives are the other queries' crops of the batch."
        )
    crops = MomentCropDataset(
        inputs.clips,
        default_crop_seconds(inputs.processor),
        seed=inputs.seed,
        negatives=objective.accepts_negative_audio,
    )
    return ObjectiveTrainingSetup(
        crops, MomentCropCollator(inputs.waveforms or AtrDataCollator(inputs.processor))
    )


def objective_training_setup(
    objective: Objective,
    clips: Any,
    processor: AtrProcessor,
    *,
    languages: Sequence[str] | None = None,
    seed: int = 0,
    show_progress: bool = False,
    waveforms: WaveformCollator | None = None,
    view: str | None = None,
) -> ObjectiveTrainingSetup:
    """The training view of ``clips`` that ``objective`` declares (its ``training_view``), or ``view``.

    Args:
        objective: the objective :class:`~hf_atr.AtrTrainer` will train with (pass the same instance to it:
            ASK's callback sets its knowledge base).
        clips: shared-schema rows with audio features (raw ``audio`` with ``waveforms``), or, for objectives that
            do not declare ``needs_whole_corpus``, a stream (a ``datasets.IterableDataset`` or
            :class:`~hf_atr.training.streaming.StreamingPairs`).
        languages: the caption languages trained on (ISO 639-3; ``None``: English). The multilingual views draw
            their languages from them.
        seed: seeds the random language draws and the knowledge base's clustering.
        show_progress: progress bars while ASK's knowledge base is encoded.
        waveforms: for features on the training device (``AtrTrainer(audio_features="device")``), the collator
            that decodes and crops the clips in the DataLoader workers; it becomes the data collator, or the
            audio part of the multilingual one. ``None``: the rows' precomputed features.
        view: the view to train with when the data decide it rather than the objective (for a moment
            dataset: :data:`~hf_atr.training.moment_crops.MOMENTS_VIEW`); ``None``: the objective's ``training_view``.

    Raises:
        ValueError: a stream for an objective that declares ``needs_whole_corpus``; a ``training_view`` that no
            view is registered under.
    """
    name = objective.name
    if isinstance(clips, (StreamedDataset, StreamingPairs)) and objective.needs_whole_corpus:
        raise ValueError(
            f"Objective {name!r} cannot train from a stream: it needs the whole training set at hand (ATRI's "
            "per-epoch language draws, ASK's knowledge base of the training clips). Train it from a map-style "
            "dataset (with audio_features='device' the clips need not fit as features)."
        )
    view_name = view or objective.training_view
    view_function = _TRAINING_VIEWS.get(view_name)
    if view_function is None:
        raise ValueError(
            (f"view={view!r}" if view else f"Objective {name!r} declares training_view={view_name!r}")
            + ", which is not a registered "
            f"training view ({', '.join(training_views())}). Register it with "
            "hf_atr.training.register_training_view before training."
        )
    inputs = TrainingViewInputs(
        objective,
        clips,
        processor,
        list(languages) if languages else [ENGLISH],
        seed=seed,
        show_progress=show_progress,
        waveforms=waveforms,
    )
    return view_function(inputs)


__all__ = [
    "ObjectiveTrainingSetup",
    "TrainingView",
    "TrainingViewInputs",
    "objective_training_setup",
    "register_training_view",
    "training_views",
]
