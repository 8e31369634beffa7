"""The card's training curves: drawn beside the card from the Trainer's log history, uploaded with it."""

from __future__ import annotations

import logging
import sys

import pytest
from PIL import Image
from tiny_models import make_model

from hf_atr.hub import stage_model_files
from hf_atr.model_card import TRAINING_CURVES_FILE, write_model_card

IOT_HISTORY = [
    {"loss": 2.0, "iot/loss_iot": 2.0, "iot/iot_diagonal_mass": 0.2, "iot/iot_transported_mass": 1.0, "step": 5},
    {"loss": 1.2, "iot/loss_iot": 1.2, "iot/iot_diagonal_mass": 0.5, "iot/iot_transported_mass": 1.0, "step": 10},
    {"train_runtime": 3.0, "train_loss": 1.6, "step": 10},
]  # fmt: skip


@pytest.mark.slow
def test_card_shows_the_training_curves_beside_it(tmp_path):
    model = make_model(objective={"name": "iot"}, scoring="euclidean")
    text = write_model_card(model, tmp_path, training_info={"log_history": IOT_HISTORY}).read_text()
    section = text.split("### Training curves\n\n", 1)[1].split("\n\n## Evaluation", 1)[0]
    assert section.splitlines() == [
        "![Training curves: loss, objective terms and evaluation over optimizer steps](training_curves.png)",
        "",
        "The training loss and the terms the `iot` objective logs (averaged between logging steps), over optimizer steps.",
        "Constant over the run (not drawn): `iot_transported_mass` = 1.",
    ]
    image = Image.open(tmp_path / TRAINING_CURVES_FILE)
    assert image.format == "PNG" and image.size == (1040, 360)  # two panels: loss, diagonal mass
    # What push_to_hub uploads includes the figure the card shows.
    model.model_card_data = {"log_history": IOT_HISTORY}
    uploaded = {path.name for path in stage_model_files(model, tmp_path / "staged")}
    assert {"README.md", TRAINING_CURVES_FILE} <= uploaded


def test_card_without_training_history_is_unchanged(tmp_path):
    model = make_model()
    text = write_model_card(model, tmp_path).read_text()
    assert "## Training\n\n- training data: not recorded\n\n## Evaluation" in text
    assert "Training curves" not in text and not (tmp_path / TRAINING_CURVES_FILE).exists()
    # A history without a training loss (an evaluation only) draws nothing either.
    write_model_card(
        model, tmp_path / "eval_only", training_info={"log_history": [{"eval_t2a_R@1": 0.5, "step": 0}]}
    )
    assert not (tmp_path / "eval_only" / TRAINING_CURVES_FILE).exists()


def test_card_without_matplotlib_says_how_to_draw_the_curves(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    model = make_model(objective={"name": "iot"}, scoring="euclidean")
    with caplog.at_level(logging.WARNING):
        text = write_model_card(model, tmp_path, training_info={"log_history": IOT_HISTORY}).read_text()
    assert (
        "### Training curves\n\nNot drawn where this card was written (matplotlib is not installed: " in text
    )
    assert "pip install 'hf-atr[plots]'" in text and "pip install 'hf-atr[plots]'" in caplog.text
    assert not (tmp_path / TRAINING_CURVES_FILE).exists()
