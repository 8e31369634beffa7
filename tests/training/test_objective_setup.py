from __future__ import annotations

import math

import pytest
from tiny_models import make_model, make_processor, raw_audio_dataset, training_args
from tiny_models import translated_feature_dataset as _clips

from hf_atr.objectives.registry import build_objective
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback
from hf_atr.training.collator import CaptionPairDataset
from hf_atr.training.multilingual import MultilingualCollator, RandomLanguageDataset
from hf_atr.training.objective_setup import WHOLE_CORPUS_OBJECTIVES, objective_training_setup
from hf_atr.training.streaming import StreamingPairs
from hf_atr.training.trainer import AtrTrainer
from hf_atr.training.waveform_collator import WaveformCollator

LANGUAGES = ["eng", "fra"]


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
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=4, logging_steps=1),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        callbacks=setup.callbacks,
        objective=objective,
        processing_class=processor,
        train_languages=LANGUAGES,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
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
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=2, per_device_train_batch_size=4, logging_steps=1),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        objective=objective,
        processing_class=processor,
        train_languages=LANGUAGES,
        audio_features="device",
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
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
