"""Model cards (content, metadata, training callback) and push_to_hub's uploaded files, offline."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import ModelCard
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrTrainer
from hf_atr.model_card import (
    ModelCardCallback,
    build_model_card,
    evaluation_table,
    normalize_metric_names,
    write_model_card,
)
from hf_atr.objectives.registry import BUILTIN_OBJECTIVES, available_objectives, get_objective_class

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


PAPER_IDENTIFIER = re.compile(r"arXiv:\d{4}\.\d{4,5}\b|https://openreview\.net/forum\?id=\w+")
VENUE = re.compile(r"\b(ICML|ICASSP|BMVC|ICLR|ACL) (19|20)\d\d\b|\bACL submission\b")
BUILT_IN_PAPERS = {
    "contrastive": ("arXiv:2103.00020", "arXiv:2206.04769"),  # CLIP, CLAP
    "triplet": ("arXiv:1707.05612",),  # VSE++
    "iot": ("arXiv:2405.10084",),  # m-LTM
    "iot_partial": ("arXiv:2405.10084",),
    "dart": ("openreview.net/forum?id=cFhcd4WGjO",),
    "kcl": ("arXiv:2502.14627",),  # ATRI
    "cacl": ("arXiv:2502.14627",),
    "random_language": ("arXiv:2502.14627",),
    "ask": ("Adaptive Self-improving Knowledge Framework",),  # anonymous submission, no identifier yet
}


@pytest.mark.parametrize("name", sorted(BUILT_IN_PAPERS))
def test_built_in_objectives_describe_themselves_and_cite_their_own_paper_with_venue_and_identifier(name):
    objective_class = get_objective_class(name)
    own = vars(objective_class)
    assert "citation" in own, f"{name} inherits its citation from another objective's paper"
    assert "description" in own and objective_class.description, f"{name} has no description of its own"
    assert isinstance(objective_class.citation, tuple) and objective_class.citation
    for reference in objective_class.citation:
        assert VENUE.search(reference), reference
        assert PAPER_IDENTIFIER.search(reference) or "no public identifier" in reference, reference
    for paper in BUILT_IN_PAPERS[name]:
        assert any(paper in reference for reference in objective_class.citation), paper


def test_every_objective_shipped_with_the_package_is_a_built_in_with_a_paper():
    assert set(BUILTIN_OBJECTIVES) == set(BUILT_IN_PAPERS)
    shipped = {
        name for name in available_objectives() if get_objective_class(name).__module__.startswith("hf_atr.")
    }
    assert shipped == set(BUILT_IN_PAPERS)


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


def test_save_pretrained_writes_the_card(tmp_path):
    make_model(objective={"name": "iot"}).save_pretrained(tmp_path)
    assert "(m-LTM). ICLR 2024." in (tmp_path / "README.md").read_text()
