"""Model cards (content, metadata, training callback) and push_to_hub's uploaded files, offline."""

from __future__ import annotations

import logging
import sys

import pytest
from huggingface_hub import ModelCard
from PIL import Image
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrTrainer
from hf_atr.hub import stage_upload
from hf_atr.model_card import (
    TRAINING_CURVES_FILE,
    ModelCardCallback,
    build_model_card,
    evaluation_table,
    normalize_metric_names,
    write_model_card,
)
from hf_atr.objectives import get_objective_class

MULTILINGUAL_METRICS = {
    "eval_t2a_R@1": 0.25, "eval_t2a_R@1/eng": 0.3, "eval_t2a_R@1/fra": 0.2,
    "eval_a2t_R@1": 0.4, "eval_a2t_R@1/eng": 0.5, "eval_a2t_R@1/fra": 0.3,
    "eval_t2a_mAP@10": 0.35, "eval_MRV": 1.5, "eval_loss": 2.0, "epoch": 3.0,
}  # fmt: skip


def test_card_describes_model_objective_training_and_evaluation(tmp_path):
    model = make_model(objective={"name": "triplet", "margin": 0.3}, scoring="euclidean")
    path = write_model_card(
        model,
        tmp_path,
        model_id="team/atr-tiny",
        eval_results=MULTILINGUAL_METRICS,
        training_data="synthcaps",
    )
    assert path == tmp_path / "README.md"
    text = path.read_text()
    for expected in (
        "# team/atr-tiny",
        "| audio backbone | `audio-spectrogram-transformer` (1 layers, hidden size 32) |",
        "| text backbone | `bert` (1 layers, hidden size 32) |",
        "linear, 32 → 16 (audio) and 32 → 16 (text)",
        "`euclidean`: negative Euclidean distance",
        "`triplet` — hinge triplet loss",
        "- `margin`: `0.3`",
        "VSE++: Improving Visual-Semantic Embeddings with Hard Negatives. BMVC 2018.",
        "- training data: synthcaps",
        "| language | t2a_R@1 | t2a_mAP@10 | a2t_R@1 |",
        "| eng | 30.0 | — | 50.0 |",
        "| fra | 20.0 | — | 30.0 |",
        "| avg | 25.0 | 35.0 | 40.0 |",
        "MRV (mean rank variance across languages, ATRI Eq. 16; lower is more consistent): 1.50",
        'pipeline("audio-text-retrieval", model="team/atr-tiny")',
        "## Licence\n\n`apache-2.0`",
    ):
        assert expected in text, expected
    card = ModelCard.load(path)
    assert card.data.license == "apache-2.0"
    assert card.data.datasets == ["synthcaps"]
    assert card.data.language == ["eng", "fra"]
    assert {result.metric_type: result.metric_value for result in card.data.eval_results} == {
        "t2a_R@1": 25.0, "t2a_mAP@10": 35.0, "a2t_R@1": 40.0, "MRV": 1.5,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("objective", "citation"),
    [
        ("contrastive", "CLAP: Learning Audio Concepts From Natural Language Supervision. ICASSP 2023."),
        ("contrastive", "(CLIP). ICML 2021."),
        (
            "iot",
            "Revisiting Deep Audio-Text Retrieval Through the Lens of Transportation (m-LTM). ICLR 2024.",
        ),
        ("iot_partial", "(m-LTM). ICLR 2024."),
        ("dart", "Dual-Level Optimal Transport for Audio-Text Retrieval (DART). ICLR 2026."),
        ("kcl", "ATRI: Mitigating Multilingual Audio Text Retrieval Inconsistencies"),
        ("cacl", "Reducing Data Distribution Errors. ACL 2025."),
        ("ask", "ASK: Adaptive Self-improving Knowledge Framework for Audio Text Retrieval"),
    ],
)
def test_objectives_cite_their_papers(objective, citation):
    assert any(citation in reference for reference in get_objective_class(objective).citation)


def test_card_lists_default_hyperparameters_and_citation_of_the_objective():
    card = build_model_card(make_model(objective={"name": "dart"}))
    assert "- `uwd_reg`: `0.03` (default)" in card.text
    assert "(DART). ICLR 2026." in card.text
    assert "No evaluation results were recorded." in card.text
    assert card.data.eval_results is None


def test_metric_names_and_single_language_table():
    assert normalize_metric_names({"eval_t2a_R@1": 0.5, "test_MRV": 2, "eval_runtime_note": "x"}) == {
        "t2a_R@1": 0.5, "MRV": 2.0,
    }  # fmt: skip
    table = evaluation_table({"t2a_R@1": 0.125, "a2t_R@10": 1.0})
    assert "| all | 12.5 | 100.0 |" in table
    assert "MRV" not in table


def test_callback_collects_training_facts_for_the_card(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=4, learning_rate=1e-3),
        train_dataset=feature_dataset(32),
        eval_dataset=feature_dataset(8),
        processing_class=processor,
        callbacks=[ModelCardCallback(training_data="synthcaps")],
    )
    trainer.train()
    trainer.evaluate()
    collected = model.model_card_data
    assert collected["training_data"] == "synthcaps"
    assert collected["global_step"] == 4
    assert collected["hyperparameters"]["learning_rate"] == 1e-3
    assert collected["hyperparameters"]["per_device_train_batch_size"] == 8
    assert 0.0 <= collected["eval_metrics"]["t2a_R@1"] <= 1.0
    text = write_model_card(model, tmp_path / "card").read_text()
    assert "- steps: 4" in text and "- learning_rate: 0.001" in text and "On synthcaps:" in text
    # The history the callback kept is the trainer's own, drawn beside the card.
    assert collected["log_history"] is trainer.state.log_history
    assert (
        "![Training curves: loss, objective terms and evaluation over optimizer steps](training_curves.png)"
        in text
    )
    assert "and R@k and mAP@10 (%, mean over languages) at each evaluation during training" in text
    assert Image.open(tmp_path / "card" / TRAINING_CURVES_FILE).format == "PNG"


def test_save_pretrained_writes_the_card(tmp_path):
    make_model(objective={"name": "iot"}).save_pretrained(tmp_path)
    assert "(m-LTM). ICLR 2024." in (tmp_path / "README.md").read_text()


IOT_HISTORY = [
    {"loss": 2.0, "iot/loss_iot": 2.0, "iot/iot_diagonal_mass": 0.2, "iot/iot_transported_mass": 1.0, "step": 5},
    {"loss": 1.2, "iot/loss_iot": 1.2, "iot/iot_diagonal_mass": 0.5, "iot/iot_transported_mass": 1.0, "step": 10},
    {"train_runtime": 3.0, "train_loss": 1.6, "step": 10},
]  # fmt: skip


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
    uploaded = {path.name for path in stage_upload(model, tmp_path / "staged")}
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
