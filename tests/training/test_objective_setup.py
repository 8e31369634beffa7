from __future__ import annotations

import importlib.metadata
import math

import pytest
from tiny_models import make_model, make_processor, raw_audio_dataset, training_args
from tiny_models import translated_feature_dataset as _clips
from transformers import TrainerCallback

from hf_atr.objectives import registry
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.objectives.registry import (
    BUILTIN_OBJECTIVES,
    Objective,
    ObjectiveOutput,
    build_objective,
    get_objective_class,
)
from hf_atr.training import (
    ObjectiveTrainingSetup,
    TrainingViewInputs,
    objective_training_setup,
    register_training_view,
    training_views,
)
from hf_atr.training import objective_setup as objective_setup_module
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback
from hf_atr.training.collator import CaptionPairDataset
from hf_atr.training.multilingual import MultilingualCollator, RandomLanguageDataset
from hf_atr.training.streaming import StreamingPairs
from hf_atr.training.trainer import AtrTrainer
from hf_atr.training.waveform_collator import WaveformCollator

LANGUAGES = ["eng", "fra"]
WHOLE_CORPUS_OBJECTIVES = ("kcl", "cacl", "random_language", "ask")


def _train_two_steps(tmp_path, model, objective, setup, processor, **trainer_options) -> list[dict]:
    """Train ``model`` with ``objective`` on ``setup`` for two steps of 4 items, logging each: the log entries."""
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=4, logging_steps=1),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        callbacks=setup.callbacks,
        objective=objective,
        processing_class=processor,
        **trainer_options,
    )
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.parametrize(
    ("name", "dataset_type", "collator_mode", "with_english"),
    [
        ("contrastive", None, None, None),
        ("kcl", CaptionPairDataset, "kcl", None),
        ("cacl", RandomLanguageDataset, "cacl", False),
        ("random_language", RandomLanguageDataset, None, True),
    ],
)
def test_each_objective_gets_its_view_and_collator(name, dataset_type, collator_mode, with_english):
    clips, processor = _clips(), make_processor()
    setup = objective_training_setup(
        build_objective({"name": name}), clips, processor, languages=LANGUAGES, seed=1
    )
    assert setup.callbacks == []
    if dataset_type is None:  # AtrTrainer makes caption pairs of the clips over the training languages
        assert setup.train_dataset is clips and setup.data_collator is None
        return
    assert isinstance(setup.train_dataset, dataset_type) and setup.train_dataset.clips is clips
    if dataset_type is CaptionPairDataset:  # kcl: each English slot once per epoch, with its K translations
        assert setup.train_dataset.languages == ["eng"]
    else:
        drawn = {setup.train_dataset.language_of(index) for index in range(len(setup.train_dataset))}
        assert drawn == ({"eng", "fra"} if with_english else {"fra"}) and setup.train_dataset.seed == 1
    if collator_mode is None:
        assert setup.data_collator is None
    else:
        assert isinstance(setup.data_collator, MultilingualCollator)
        assert setup.data_collator.mode == collator_mode and setup.data_collator.languages == LANGUAGES


def test_ask_gets_a_knowledge_base_of_the_training_clips_on_its_own_objective():
    clips, processor = _clips(), make_processor()
    objective = build_objective({"name": "ask", "num_neighbours": 2, "num_prototypes": 2})
    setup = objective_training_setup(objective, clips, processor, seed=5)
    assert setup.train_dataset is clips and setup.data_collator is None
    (refresh,) = setup.callbacks
    assert isinstance(refresh, KnowledgeBaseRefreshCallback)
    assert refresh.objective is objective and refresh.dataset is clips and refresh.seed == 5


@pytest.mark.parametrize(
    ("name", "hyperparameters"),
    [("kcl", {}), ("cacl", {}), ("random_language", {}), ("ask", {"num_neighbours": 2, "num_prototypes": 2})],
)
def test_the_trainer_trains_each_setup(tmp_path, name, hyperparameters):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": name, **hyperparameters})
    objective = build_objective(model.config)
    clips = _clips(8)
    setup = objective_training_setup(objective, clips, processor, languages=LANGUAGES)
    losses = [
        entry["loss"]
        for entry in _train_two_steps(tmp_path, model, objective, setup, processor, train_languages=LANGUAGES)
    ]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    if name == "ask":
        assert objective.knowledge_base is not None


@pytest.mark.parametrize("name", ["contrastive", "kcl", "cacl", "random_language", "ask"])
def test_waveforms_become_the_collator_or_the_audio_part_of_the_multilingual_one(name):
    processor = make_processor()
    waveforms = WaveformCollator(processor, seed=3)
    objective = build_objective({"name": name, **({"num_prototypes": 2} if name == "ask" else {})})
    setup = objective_training_setup(objective, _clips(), processor, languages=LANGUAGES, waveforms=waveforms)
    if name in ("kcl", "cacl"):
        assert (
            isinstance(setup.data_collator, MultilingualCollator)
            and setup.data_collator.waveforms is waveforms
        )
    else:
        assert setup.data_collator is waveforms


def _raw_translated_clips(count: int):
    clips = raw_audio_dataset([0.6 + 0.2 * index for index in range(count)])
    return clips.add_column(
        "translations", [{"fra": [f"un chien {i}", f"une sirène {i}"]} for i in range(count)]
    )


@pytest.mark.parametrize("name", ["contrastive", "kcl"])
def test_the_trainer_trains_a_setup_with_features_on_the_device(tmp_path, name):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": name})
    objective = build_objective(model.config)
    setup = objective_training_setup(
        objective,
        _raw_translated_clips(8),
        processor,
        languages=LANGUAGES,
        waveforms=WaveformCollator(processor, seed=0),
    )
    logged = _train_two_steps(
        tmp_path, model, objective, setup, processor, train_languages=LANGUAGES, audio_features="device"
    )
    losses = [entry["loss"] for entry in logged]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)


@pytest.mark.parametrize("name", WHOLE_CORPUS_OBJECTIVES)
def test_objectives_that_need_the_whole_training_set_refuse_a_stream(name):
    stream = _clips().to_iterable_dataset(num_shards=2)
    objective = build_objective({"name": name})
    for clips in (stream, StreamingPairs(stream)):
        with pytest.raises(
            ValueError, match=f"Objective '{name}' cannot train from a stream: it needs the whole"
        ):
            objective_training_setup(objective, clips, make_processor(), languages=LANGUAGES)
    pairs = StreamingPairs(stream)
    assert (
        objective_training_setup(build_objective({"name": "iot"}), pairs, make_processor()).train_dataset
        is pairs
    )


def test_the_builtin_objectives_declare_their_views_by_name():
    views = {name: get_objective_class(name).training_view for name in BUILTIN_OBJECTIVES}
    assert views == {
        "contrastive": "pairs",
        "triplet": "pairs",
        "iot": "pairs",
        "iot_partial": "pairs",
        "dart": "pairs",
        "random_language": "random_language",
        "kcl": "all_languages",
        "cacl": "english_and_random_language",
        "ask": "pairs_with_knowledge_base",
        "sigmoid": "pairs",
    }
    assert set(views.values()) <= set(training_views())
    whole_corpus = {name for name in BUILTIN_OBJECTIVES if get_objective_class(name).needs_whole_corpus}
    assert whole_corpus == set(WHOLE_CORPUS_OBJECTIVES)


class _LanguageCentroidObjective(Objective):
    """A third-party plugin on the multilingual view: each clip's audio against the mean of its present captions."""

    training_view = "all_languages"
    needs_whole_corpus = True

    def forward(self, audio_embeds, text_embeds, *, batch=None, model=None):
        if text_embeds.dim() != 3:
            raise ValueError(f"expected (batch, K, dim) captions, got {tuple(text_embeds.shape)}")
        present = batch["language_mask"].to(text_embeds.dtype)[..., None]
        centroid = (text_embeds * present).sum(dim=1) / present.sum(dim=1)
        loss = (audio_embeds - centroid).square().sum(dim=-1).mean()
        return ObjectiveOutput(loss=loss, logs={"captions_per_clip": float(text_embeds.shape[1])})


@pytest.fixture
def centroid_plugin(monkeypatch):
    """``language_centroid`` installed as a package would install it: through the entry-point group."""
    plugin = importlib.metadata.EntryPoint(
        name="language_centroid",
        value=f"{__name__}:_LanguageCentroidObjective",
        group=registry.ENTRY_POINT_GROUP,
    )
    monkeypatch.setattr(registry, "_entry_points", None)
    monkeypatch.setattr(
        registry, "entry_points", lambda group: [plugin] if group == registry.ENTRY_POINT_GROUP else []
    )
    yield "language_centroid"
    registry._REGISTRY.pop("language_centroid", None)


def test_a_plugin_objective_declaring_the_multilingual_view_trains_on_it(tmp_path, centroid_plugin):
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": centroid_plugin})
    objective = build_objective(model.config)
    assert isinstance(objective, _LanguageCentroidObjective)
    setup = objective_training_setup(objective, _clips(8), processor, languages=LANGUAGES)
    assert isinstance(setup.train_dataset, CaptionPairDataset) and setup.train_dataset.languages == ["eng"]
    assert (
        isinstance(setup.data_collator, MultilingualCollator) and setup.data_collator.languages == LANGUAGES
    )
    logged = _train_two_steps(tmp_path, model, objective, setup, processor)
    assert len(logged) == 2 and all(math.isfinite(entry["loss"]) for entry in logged)
    assert all(entry[f"{centroid_plugin}/captions_per_clip"] == len(LANGUAGES) for entry in logged)
    with pytest.raises(ValueError, match=f"Objective '{centroid_plugin}' cannot train from a stream"):
        objective_training_setup(objective, _clips().to_iterable_dataset(), processor, languages=LANGUAGES)


class _StepCounter(TrainerCallback):
    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1


class _CountedContrastive(ContrastiveObjective):
    training_view = "pairs_with_step_counter"


def test_a_plugin_registers_a_view_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(
        objective_setup_module, "_TRAINING_VIEWS", dict(objective_setup_module._TRAINING_VIEWS)
    )
    counter = _StepCounter()

    @register_training_view("pairs_with_step_counter")
    def pairs_with_step_counter(inputs: TrainingViewInputs) -> ObjectiveTrainingSetup:
        return ObjectiveTrainingSetup(inputs.clips, inputs.waveforms, callbacks=[counter])

    assert "pairs_with_step_counter" in training_views()
    assert (
        register_training_view("pairs_with_step_counter")(pairs_with_step_counter) is pairs_with_step_counter
    )
    processor = make_processor()
    objective = _CountedContrastive()
    clips = _clips(8)
    setup = objective_training_setup(objective, clips, processor)
    assert setup.train_dataset is clips and setup.callbacks == [counter]
    _train_two_steps(tmp_path, make_model(processor=processor), objective, setup, processor)
    assert counter.steps == 2
    with pytest.raises(
        ValueError, match=r"A training view named 'pairs' is already registered \(.*:caption_pairs\)"
    ):
        register_training_view("pairs")(pairs_with_step_counter)


def test_an_unregistered_view_is_named_with_the_registered_ones():
    class _Unplaced(ContrastiveObjective):
        training_view = "no_such_view"

    with pytest.raises(
        ValueError,
        match=r"declares training_view='no_such_view', which is not a registered training view "
        r"\(all_languages, english_and_random_language, pairs, .*\)\. Register it with "
        r"hf_atr\.training\.register_training_view",
    ):
        objective_training_setup(_Unplaced(), _clips(), make_processor())
