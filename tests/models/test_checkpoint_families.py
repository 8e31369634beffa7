"""The table of checkpoint families: every row resolves to a family module and has its ``hf-atr train`` argument,
and a new family (a module written to a temporary folder plus one row) converts, gives its processor and window, and
trains from its own flag through ``hf-atr train``'s code with no other file touched."""

from __future__ import annotations

import dataclasses
import textwrap

import datasets
import numpy as np
import pytest
import torch
from tiny_models import make_processor, save_towers, write_sound_folder
from transformers import ASTFeatureExtractor, AutoModel

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.commands.train import train_arguments
from hf_atr.commands.train.fine_tune import load_starting_point, run_training, starting_point_base_model
from hf_atr.commands.train.model_arguments import StartingPointArguments, with_checkpoint_arguments
from hf_atr.commands.train.train_arguments import parse_train_arguments
from hf_atr.models.checkpoint_families import (
    CHECKPOINT_FAMILIES,
    FAMILY_MODULE_NAMES,
    CheckpointFamily,
    checkpoint_family,
)
from hf_atr.windowing import extractor_window

FAKE_FAMILY_MODULE = '''
"""A checkpoint family of the test: an AST audio tower and a BERT text tower saved side by side, whose tensors
are stored under "audio." and "text."; projections and scoring head start fresh."""

import transformers

from hf_atr.models.checkpoint_conversion import ConvertedCheckpoint, convert_state_dict, renamed_key

FIXED_CONFIG_FIELDS = ("audio_config", "text_config")
TOWERS = {"audio.": "audio_model.", "text.": "text_model."}


def convert(state, atr_shapes, *, source):
    return convert_state_dict(
        state,
        atr_shapes,
        lambda key: renamed_key(key, {}, TOWERS),
        family="Fake",
        fresh_keys=[key for key in atr_shapes if not key.startswith(tuple(TOWERS.values()))],
        source=source,
        error_class=ValueError,
    )


def load_model_parts(path, **kwargs):
    audio = transformers.AutoModel.from_pretrained(f"{path}/audio-tower", **kwargs)
    text = transformers.AutoModel.from_pretrained(f"{path}/text-tower", **kwargs)
    state = {f"{prefix}{key}": tensor for prefix, tower in (("audio.", audio), ("text.", text))
             for key, tensor in tower.state_dict().items()}
    return ConvertedCheckpoint(
        config={"audio_config": audio.config, "text_config": text.config},
        audio_model=audio,
        text_model=text,
        state_dict=state,
        convert=convert,
        defaults={"projection_dim": 8},
    )


def load_processor_parts(path, **kwargs):
    return (
        transformers.AutoFeatureExtractor.from_pretrained(f"{path}/audio-tower", **kwargs),
        transformers.AutoTokenizer.from_pretrained(f"{path}/text-tower", **kwargs),
    )
'''


@pytest.fixture
def fake_family(tmp_path, monkeypatch):
    """The fake family's module on ``sys.path``, its row in the table, and a checkpoint of it in ``tmp_path/"fake"``."""
    modules = tmp_path / "family_modules"
    modules.mkdir()
    (modules / "fake_atr_family.py").write_text(textwrap.dedent(FAKE_FAMILY_MODULE))
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.setitem(
        CHECKPOINT_FAMILIES,
        "fake",
        CheckpointFamily("Fake", "fake_model", "fake_atr_family", "a tiny AST + BERT checkpoint of the test"),
    )
    save_towers(tmp_path / "fake")
    return tmp_path / "fake"


def fake_starting_point_arguments() -> type:
    """``hf-atr train``'s starting-point arguments as :func:`with_checkpoint_arguments` makes them once the fake
    family has its row (the module's own class was made when it was imported, before the row)."""

    @dataclasses.dataclass
    @with_checkpoint_arguments
    class FakeStartingPoint(StartingPointArguments):
        model_name_or_path: str | None = None

    return FakeStartingPoint


@pytest.mark.parametrize("key", sorted(CHECKPOINT_FAMILIES))
def test_every_row_names_a_family_module_and_a_starting_point_argument(key):
    family = checkpoint_family(key)
    module = family.family_module()
    assert all(callable(getattr(module, name)) for name in FAMILY_MODULE_NAMES[1:])
    assert family.fixed_config_fields and all(isinstance(name, str) for name in family.fixed_config_fields)
    fields = {field.name: field for field in dataclasses.fields(StartingPointArguments)}
    assert fields[family.argument].metadata["help"].startswith(family.description)


def test_an_unknown_family_and_an_incomplete_module_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"Unknown checkpoint family 'fak'; known: \['clap', 'pe_audio'\]"):
        checkpoint_family("fak")
    (tmp_path / "half_family.py").write_text("FIXED_CONFIG_FIELDS = ()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    half = CheckpointFamily("Half", "half_model", "half_family", "half a family")
    with pytest.raises(TypeError, match=r"lacks \['load_model_parts', 'load_processor_parts'\]"):
        half.load_processor_parts("anywhere")


def test_a_new_family_converts_with_its_processor_and_window(fake_family):
    model = AtrDualEncoderModel.from_checkpoint("fake", fake_family)
    tower = AutoModel.from_pretrained(fake_family / "audio-tower")
    assert model.config.projection_dim == 8 and not model.training
    for key, tensor in tower.state_dict().items():
        torch.testing.assert_close(model.audio_model.state_dict()[key], tensor, rtol=0, atol=0)
    processor = AtrProcessor.from_checkpoint("fake", fake_family)
    assert isinstance(processor.feature_extractor, ASTFeatureExtractor)
    assert extractor_window(processor.feature_extractor) == extractor_window(
        make_processor().feature_extractor
    )
    with pytest.raises(ValueError, match=r"from_checkpoint\('fake'\): \['text_config'\] are set by the Fake"):
        AtrDualEncoderModel.from_checkpoint("fake", fake_family, text_config={})


@pytest.mark.slow
def test_a_new_family_trains_one_step_through_hf_atr_train(fake_family, monkeypatch):
    """``--fake_model`` is parsed, converted, trained for one step, evaluated and saved by ``hf-atr train``'s code."""
    monkeypatch.chdir(fake_family.parent)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", fake_family.parent / "datasets-cache")
    monkeypatch.setattr(train_arguments, "StartingPointArguments", fake_starting_point_arguments())
    write_sound_folder(fake_family.parent / "sounds", clips=8)
    help_text = " ".join(train_arguments.argument_parser().format_help().split())
    assert "--fake-model FAKE_MODEL a tiny AST + BERT checkpoint of the test; converted with" in help_text
    parsed = parse_train_arguments(
        ["--fake_model", "fake", "--dataset", "audiofolder", "--data_dir", "sounds", "--test_size", "0.25",
         "--output_dir", "run", "--max_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none"]
    )  # fmt: skip
    assert starting_point_base_model(parsed.starting_point) is None  # a local directory
    assert starting_point_base_model(train_arguments.StartingPointArguments(fake_model="owner/fake")) == [
        "owner/fake"
    ]
    with pytest.raises(ValueError, match=r"--fake_model \(a Fake checkpoint\), or --audio_model"):
        load_starting_point(train_arguments.StartingPointArguments())
    result = run_training(parsed)
    assert result.starting_point == "Fake checkpoint fake"
    assert result.train_metrics["epoch"] > 0 and np.isfinite(result.train_metrics["train_loss"])
    trained = AutoModel.from_pretrained(fake_family.parent / "run" / "model")
    assert trained.config.projection_dim == 8
    saved_processor = AtrProcessor.from_pretrained(fake_family.parent / "run" / "model")
    assert saved_processor.feature_extractor.max_length == 100
