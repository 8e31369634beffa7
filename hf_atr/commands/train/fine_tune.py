"""``hf-atr train``: from a starting point to a fine-tuned, evaluated, shareable model in one command.

The arguments (:mod:`hf_atr.commands.train.train_arguments`) are the starting point, the data, the objective, the
test evaluation, training at scale and every field of ``TrainingArguments``, from the command line or a YAML/JSON
file.

Every process runs the same steps (``torchrun`` / ``accelerate launch -m hf_atr.cli train ...``):

1. the objective is checked (:func:`training_objective`), then the data is loaded
   (:func:`~hf_atr.commands.train.training_data.load_training_data`): a loader or a saved ``DatasetDict``; training, validation and test splits (or
   a test split held out of the training clips, or another dataset's); the training clips go through the
   overlap filter against the test clips (and any other reference), which the card reports. With
   ``--train_shards`` the training clips are WebDataset or parquet shards, streamed (filtered before they were
   written). Mistakes in either stop the run before any model is loaded;
2. the seed (``--seed``) is set, then the starting point becomes a model and its processor
   (:func:`load_starting_point`);
3. audio features of the training and validation splits are extracted once into Arrow files named after what
   determines them (:func:`feature_cache_key`): the main process writes them, the others and later runs read
   them. The test split's evaluator is built first, so a bad relevance file stops the run early; it reads the
   test clips' audio itself, so that its protocol counts the clips cut to the extractor's window (or, with
   ``--eval_window_pooling``, embeds them window by window).
   Streamed training clips, and with ``--audio_features device`` all training clips, keep their raw audio:
   the DataLoader workers decode it, and the features of each batch are computed on the training device;
4. :class:`~hf_atr.AtrTrainer` trains (checkpoints in ``--output_dir``; gradient-cached with
   ``--embedding_chunk_size``), evaluating the validation split with ``--eval_strategy``: retrieval on clips, the
   moment metrics on a moment dataset (its recordings decoded once for the whole run);
5. the main process evaluates the test split and writes ``OUTPUT_DIR/model`` (weights, processor, card with
   the results table and its protocol) and ``OUTPUT_DIR/metrics.json``
   (:func:`~hf_atr.training.final_model.evaluate_and_save`), and uploads the model with ``--push_to_hub``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import set_seed
from transformers.utils import logging

from ...configuration_atr import AtrConfig
from ...data.moments import is_moment_dataset
from ...evaluation.evaluator import RetrievalEvaluator
from ...hub import push_model_files
from ...model_card.facts import card_data, hub_model_id, record_sharing_terms
from ...modeling_atr import AtrDualEncoderModel
from ...models.checkpoint_families import CHECKPOINT_FAMILIES
from ...objectives.registry import build_objective, validate_objective_config
from ...processing_atr import AtrProcessor
from ...training.callbacks import ModelCardCallback
from ...training.final_model import TRAINING_AUDIO, FinalModel, evaluate_and_save, training_audio_record
from ...training.moment_crops import MOMENTS_VIEW
from ...training.objective_setup import objective_training_setup
from ...training.streaming import StreamingPairs
from ...training.trainer import AtrTrainer
from ...training.waveform_collator import WaveformCollator
from ..common import quiet_datasets_progress_bars
from ..moment_data import moment_evaluator, moment_test_evaluator, moment_training_audio
from .feature_cache import extract_features
from .model_arguments import ObjectiveArguments, StartingPointArguments
from .train_arguments import TrainArguments
from .training_data import load_training_data

logger = logging.get_logger(__name__)

ARCHITECTURE_OPTIONS = ("projection_dim", "audio_pooling", "text_pooling", "scoring")
"""Starting-point options that shape new projections and scoring heads; an hf-atr model has its own."""


def objective_config(arguments: ObjectiveArguments, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``AtrConfig.objective`` to train with; ``None`` keeps the starting point's.

    ``--objective NAME`` starts from NAME's defaults; ``--objective_args`` alone updates ``current`` (the
    starting model's objective, or ``contrastive`` for a new model).
    """
    if arguments.objective is None and not arguments.objective_args:
        return None
    if arguments.objective is not None and arguments.objective != (current or {}).get("name"):
        return {"name": arguments.objective, **arguments.objective_args}
    return {**(current or {"name": "contrastive"}), **arguments.objective_args}


def training_objective(start: StartingPointArguments, arguments: ObjectiveArguments) -> dict[str, Any] | None:
    """The checked ``AtrConfig.objective`` to train with (:func:`objective_config`); ``None`` keeps the starting
    point's. An hf-atr model's own objective is read from its config, nothing else is loaded.

    Raises:
        ValueError: an objective that is not registered or a hyperparameter it does not take.
    """
    if arguments.objective is None and not arguments.objective_args:
        return None
    current = (
        AtrConfig.from_pretrained(start.model_name_or_path).objective if start.model_name_or_path else None
    )
    objective = objective_config(arguments, current)
    validate_objective_config(objective)
    return objective


def load_starting_point(
    arguments: StartingPointArguments, objective: dict[str, Any] | None = None
) -> tuple[AtrDualEncoderModel, AtrProcessor, str]:
    """The model and processor fine-tuning starts from, and a one-line description of the starting point.

    Args:
        objective: the ``AtrConfig.objective`` to set (:func:`training_objective`); ``None`` keeps the starting
            point's (a new model: ``AtrConfig``'s default).

    Raises:
        ValueError: not exactly one starting point, or an option the starting point fixes.
    """
    checkpoints = {  # one starting point per row of the family table (--clap_model, --pe_audio_model, ...)
        key: getattr(arguments, family.argument, None) for key, family in CHECKPOINT_FAMILIES.items()
    }
    given = {
        "--model_name_or_path": arguments.model_name_or_path,
        **{f"--{CHECKPOINT_FAMILIES[key].argument}": path for key, path in checkpoints.items()},
        "--audio_model/--text_model": arguments.audio_model or arguments.text_model,
    }
    chosen = [name for name, value in given.items() if value]
    if len(chosen) != 1:
        families = "".join(
            f"--{family.argument} (a {family.name} checkpoint), " for family in CHECKPOINT_FAMILIES.values()
        )
        raise ValueError(
            f"Give one starting point: --model_name_or_path (an hf-atr model), {families}or --audio_model with "
            f"--text_model; got {chosen or 'none'}."
        )
    options = {
        name: getattr(arguments, name)
        for name in ARCHITECTURE_OPTIONS
        if getattr(arguments, name) is not None
    }
    options.update({name: True for name in ("freeze_audio", "freeze_text") if getattr(arguments, name)})
    if objective is not None:
        options["objective"] = objective
    if arguments.model_name_or_path:
        path = arguments.model_name_or_path
        fixed = sorted(set(options) & set(ARCHITECTURE_OPTIONS))
        if fixed:
            raise ValueError(
                f"{fixed} are set by the hf-atr model {path}; they apply to new projections "
                "(--audio_model/--text_model) and CLAP checkpoints (--scoring)."
            )
        model = AtrDualEncoderModel.from_pretrained(path, **options)
        return model, AtrProcessor.from_pretrained(path), f"hf-atr model {path}"
    for key, path in checkpoints.items():
        if path:
            return (
                AtrDualEncoderModel.from_checkpoint(key, path, **options),
                AtrProcessor.from_checkpoint(key, path),
                f"{CHECKPOINT_FAMILIES[key].name} checkpoint {path}",
            )
    if not (arguments.audio_model and arguments.text_model):
        raise ValueError("--audio_model and --text_model go together: give both towers.")
    audio, text = arguments.audio_model, arguments.text_model
    model = AtrDualEncoderModel.from_audio_text_pretrained(audio, text, **options)
    processor = AtrProcessor.from_audio_text_pretrained(audio, text)
    return model, processor, f"audio tower {audio} + text tower {text}"


def starting_point_base_model(arguments: StartingPointArguments) -> list[str] | None:
    """The card's ``base_model`` for a starting point given by its Hub id (an hf-atr model, a checkpoint of a family
    of :data:`~hf_atr.models.checkpoint_families.CHECKPOINT_FAMILIES` named ``owner/name``, not a local directory);
    ``None`` otherwise, and for towers, whose own names the card reads (:func:`~hf_atr.model_card.write_model_card`)."""
    checkpoints = (getattr(arguments, family.argument, None) for family in CHECKPOINT_FAMILIES.values())
    source = arguments.model_name_or_path or next((path for path in checkpoints if path), None)
    hub_id = hub_model_id(source)
    return [hub_id] if hub_id else None


@dataclass
class TrainResult:
    """What :func:`run_training` produced (``final`` on the main process only)."""

    final: FinalModel | None
    train_metrics: dict[str, float]
    starting_point: str
    test_name: str


def run_training(arguments: TrainArguments) -> TrainResult:
    """Fine-tune, evaluate and save as the module docstring describes."""
    start, data, objective_arguments, evaluation, scale, training, card = arguments
    objective_settings = training_objective(start, objective_arguments)
    if scale.train_shards and training.max_steps <= 0:
        raise ValueError("--train_shards streams the training data, which has no length: give --max_steps.")
    with_validation = str(getattr(training.eval_strategy, "value", training.eval_strategy)) != "no"
    corpus = load_training_data(
        data, with_validation=with_validation, seed=training.seed, train_shards=scale.train_shards
    )
    set_seed(training.seed)  # before any weight is built (projections, heads)
    model, processor, starting_point = load_starting_point(start, objective_settings)
    record_sharing_terms(
        model,
        license=card.license,
        license_name=card.license_name,
        license_link=card.license_link,
        base_model=card.base_model or starting_point_base_model(start),
    )
    objective = build_objective(model.config)
    waveforms = WaveformCollator(processor, seed=training.seed) if scale.audio_features == "device" else None
    setup = None
    if scale.train_shards:  # a stream needs no features extracted: its objective is checked now
        stream = StreamingPairs(
            corpus.train,
            captions=scale.stream_captions,
            languages=data.languages,
            seed=training.seed,
            shuffle_buffer_size=scale.shuffle_buffer_size,
        )
        setup = objective_training_setup(
            objective, stream, processor, languages=data.languages, seed=training.seed, waveforms=waveforms
        )
    windowing = evaluation.windowing()
    # The evaluator reads the test clips' audio itself, so that its protocol counts (and names) the clips cut to
    # the extractor's window, or embeds them window by window; a split saved with only its features is used as is.
    test_clips = (
        corpus.test
        if "audio" in corpus.test.column_names
        else extract_features(processor, corpus.test, "test", data, training).features
    )
    if windowing is not None and "audio" not in test_clips.column_names:
        raise ValueError(
            f"--eval_window_pooling needs the test clips' audio; the test split has only the columns "
            f"{test_clips.column_names}."
        )
    if is_moment_dataset(test_clips):  # moment annotations: the moment metrics
        evaluator = moment_test_evaluator(
            test_clips,
            processor,
            batch_size=training.per_device_eval_batch_size,
            split=data.test_split,
            windowing=windowing,
            relevance=evaluation.relevance,
        )
    else:  # built now: a bad relevance file stops the run before training
        evaluator = RetrievalEvaluator(
            test_clips,
            processor,
            languages=data.languages,
            batch_size=training.per_device_eval_batch_size,
            split=data.test_split,
            relevance=evaluation.relevance,
            relevance_threshold=evaluation.relevance_threshold,
            map_cutoffs=evaluation.map_cutoffs,
            scoring=evaluation.eval_scoring,
            windowing=windowing,
        )
    if scale.train_shards:
        training_audio = training_audio_record(
            None, None, processor.feature_extractor, kept=waveforms.crop_description() if waveforms else None
        )
    elif is_moment_dataset(corpus.train):  # crops of the recordings, read by the moment view's dataset
        train_clips = corpus.train
        training_audio = moment_training_audio(train_clips, processor)
    elif waveforms:  # on the device: the workers decode the raw audio and cut it
        train_clips = corpus.train
        training_audio = training_audio_record(
            len(train_clips), None, processor.feature_extractor, kept=waveforms.crop_description()
        )
    else:
        extracted = extract_features(processor, corpus.train, "train", data, training)
        train_clips = extracted.features
        training_audio = training_audio_record(
            len(train_clips), extracted.clips_cut, processor.feature_extractor
        )
    card_data(model)[TRAINING_AUDIO] = training_audio
    if setup is None:
        setup = objective_training_setup(
            objective,
            train_clips,
            processor,
            languages=data.languages,
            seed=training.seed,
            waveforms=waveforms,
            view=MOMENTS_VIEW if is_moment_dataset(train_clips) else None,
        )
    validation_features, validation_evaluator = None, None
    # A moment validation split's recordings are decoded once for the whole run, and encoded at each evaluation.
    if with_validation and is_moment_dataset(corpus.validation):
        validation_evaluator = moment_evaluator(
            corpus.validation,
            processor,
            batch_size=training.per_device_eval_batch_size,
            split=data.validation_split,
        )
    elif with_validation:
        validation_features = extract_features(
            processor, corpus.validation, "validation", data, training
        ).features
    push = training.push_to_hub
    training.push_to_hub = False  # the final model (not the checkpoints) is uploaded below, with its card
    trainer = AtrTrainer(
        model=model,
        args=training,
        train_dataset=setup.train_dataset,
        eval_dataset=validation_features,
        evaluator=validation_evaluator,
        data_collator=setup.data_collator,
        processing_class=processor,
        objective=objective,
        train_languages=data.languages,
        eval_languages=data.languages,
        eval_scoring=evaluation.eval_scoring,
        callbacks=[ModelCardCallback(training_data=corpus.train_name), *setup.callbacks],
        embedding_chunk_size=scale.embedding_chunk_size,
    )
    train_output = trainer.train(resume_from_checkpoint=training.resume_from_checkpoint)
    final = None
    if trainer.is_world_process_zero():
        if corpus.held_out:
            with quiet_datasets_progress_bars():  # a copy of the held-out clips' rows: no stage to follow
                corpus.test.save_to_disk(str(Path(training.output_dir) / "test_split"))
        final = evaluate_and_save(
            model,
            processor,
            evaluator,
            training.output_dir,
            eval_dataset=corpus.test_name,
            extra={
                "training": train_output.metrics,
                "starting_point": starting_point,
                **({"data_loading": scale.data_loading} if scale.data_loading else {}),
            },
        )
        if push:
            push_model_files(
                model,
                training.hub_model_id or Path(training.output_dir).name,
                processor=processor,
                private=training.hub_private_repo,
                token=training.hub_token,
            )
    trainer.end()
    return TrainResult(final, train_output.metrics, starting_point, corpus.test_name)


__all__ = [
    "TrainResult",
    "load_starting_point",
    "objective_config",
    "run_training",
    "starting_point_base_model",
    "training_objective",
]
