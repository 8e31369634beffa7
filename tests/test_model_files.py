"""Files written beside a model's weights: registered by name, written by save_pretrained and the Hub upload."""

from __future__ import annotations

import json
import re

import pytest
from tiny_models import make_model

from hf_atr import model_files
from hf_atr.hub import stage_model_files
from hf_atr.model_files import MODEL_CARD_FILE, register_model_file, registered_model_files, write_model_files


@pytest.fixture
def writers(monkeypatch):
    """The registry as it stands (the card's writer), restored after the test."""
    monkeypatch.setattr(model_files, "_WRITERS", dict(model_files._WRITERS))


def write_objective(model, directory, *, note="saved"):
    path = directory / "objective.json"
    path.write_text(json.dumps({"objective": model.config.objective["name"], "note": note}))
    return path


def test_save_pretrained_and_the_upload_write_every_registered_file(tmp_path, writers):
    register_model_file("objective.json", write_objective)
    assert registered_model_files() == [MODEL_CARD_FILE, "objective.json"]
    model = make_model(objective={"name": "iot"})
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "objective.json").read_text()) == {
        "objective": "iot",
        "note": "saved",
    }
    assert "(m-LTM). ICLR 2024." in (tmp_path / "saved" / MODEL_CARD_FILE).read_text()
    # The upload passes each writer its own details: the card gets the repository id for its usage snippet.
    staged = {path.name for path in stage_model_files(model, tmp_path / "staged", repo_id="team/iot-model")}
    assert {MODEL_CARD_FILE, "objective.json", "config.json", "model.safetensors"} <= staged
    assert 'from_pretrained("team/iot-model")' in (tmp_path / "staged" / MODEL_CARD_FILE).read_text()
    written = write_model_files(model, tmp_path / "again", {"objective.json": {"note": "given"}})
    assert written == [tmp_path / "again" / MODEL_CARD_FILE, tmp_path / "again" / "objective.json"]
    assert json.loads(written[1].read_text())["note"] == "given"


def test_registering_a_name_again_replaces_its_writer(tmp_path, writers):
    register_model_file("objective.json", write_objective)
    register_model_file(
        "objective.json", lambda model, directory: (directory / "objective.json").write_text("{}")
    )
    assert registered_model_files().count("objective.json") == 1
    make_model().save_pretrained(tmp_path)
    assert (tmp_path / "objective.json").read_text() == "{}"


@pytest.mark.parametrize("name", ["", "cards/README.md", None])
def test_a_model_file_is_named_by_a_plain_file_name(name, writers):
    with pytest.raises(
        ValueError, match="A model file is named by a plain file name such as 'README.md', got "
    ):
        register_model_file(name, write_objective)


def test_a_writer_must_be_callable(writers):
    with pytest.raises(
        TypeError, match=re.escape("The writer of 'notes.txt' must be callable as writer(model, ")
    ):
        register_model_file("notes.txt", "notes")


def test_details_for_a_file_nobody_writes_are_refused_before_anything_is_written(tmp_path, writers):
    with pytest.raises(
        ValueError, match=re.escape("No writer is registered for ['notes.txt'] (registered: ['README.md'])")
    ):
        write_model_files(make_model(), tmp_path, {"notes.txt": {"text": "hello"}})
    assert not any(tmp_path.iterdir())
