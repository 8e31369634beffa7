"""Model cards (content, metadata, training callback) and push_to_hub's uploaded files, offline."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest
from huggingface_hub import HfApi, ModelCard
from tiny_models import feature_dataset, make_model, make_processor, random_waveforms, training_args
from transformers import pipeline

from hf_atr import AtrTrainer
from hf_atr.hub import push_to_hub, stage_upload
from hf_atr.model_card import (
    ModelCardCallback,
    build_model_card,
    evaluation_table,
    normalize_metric_names,
    write_model_card,
)
from hf_atr.objectives.registry import available_objectives, get_objective_class
from hf_atr.pipelines.index import IndexFormatError
from hf_atr.pipelines.retrieval_pipeline import register_pipeline

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
        "| captions | t2a_R@1 | t2a_mAP@10 | a2t_R@1 |",
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


@pytest.mark.parametrize("name", [name for name in available_objectives() if name in BUILT_IN_PAPERS])
def test_built_in_objectives_cite_their_own_paper_with_venue_and_identifier(name):
    objective_class = get_objective_class(name)
    assert "citation" in vars(objective_class), f"{name} inherits its citation from another objective's paper"
    for reference in objective_class.citation.splitlines():
        assert VENUE.search(reference), reference
        assert PAPER_IDENTIFIER.search(reference) or "no public identifier" in reference, reference
    assert all(paper in objective_class.citation for paper in BUILT_IN_PAPERS[name])


def test_every_objective_shipped_with_the_package_is_a_built_in_with_a_paper():
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


UPLOADED_FILES = [
    "README.md",
    "config.json",
    "model.safetensors",
    "processor_config.json",
    "retrieval_index/audio_index.json",
    "retrieval_index/audio_index.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]


def model_with_index(tmp_path, seed=0):
    """A tiny model, its processor, and a directory holding an audio index built with it."""
    register_pipeline()
    processor = make_processor()
    model = make_model(processor=processor, seed=seed)
    model_dir = tmp_path / f"model{seed}"
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    pipe.index(random_waveforms(3), show_progress=False)
    index_dir = tmp_path / f"index{seed}"
    pipe.save_index(index_dir)
    return model, processor, index_dir


def test_push_to_hub_uploads_model_processor_index_and_card(tmp_path):
    model, processor, index_dir = model_with_index(tmp_path)

    uploaded: dict[str, bytes] = {}

    def fake_create_commit(self, repo_id, operations, **kwargs):
        assert repo_id == "team/atr-tiny"
        for operation in operations:
            uploaded[operation.path_in_repo] = Path(operation.path_or_fileobj).read_bytes()
        return mock.sentinel.commit_info

    fake_repo = mock.Mock(repo_id="team/atr-tiny")
    with (
        mock.patch.object(HfApi, "create_repo", return_value=fake_repo) as create_repo,
        mock.patch.object(HfApi, "create_commit", fake_create_commit),
    ):
        result = push_to_hub(
            model, "atr-tiny", processor=processor, index_dir=index_dir,
            eval_results={"t2a_R@1": 0.5}, training_data="synthcaps",
        )  # fmt: skip
    assert result is mock.sentinel.commit_info
    assert create_repo.call_args.args == ("atr-tiny",)
    assert sorted(uploaded) == UPLOADED_FILES
    readme = uploaded["README.md"].decode()
    assert readme.startswith("---\n") and "license: apache-2.0" in readme
    assert 'pipeline("audio-text-retrieval", model="team/atr-tiny")' in readme
    assert "| all | 50.0 |" in readme and "- training data: synthcaps" in readme
    assert uploaded["retrieval_index/audio_index.json"] == (index_dir / "audio_index.json").read_bytes()


def test_push_to_hub_without_a_saved_index_is_refused(tmp_path):
    with (
        mock.patch.object(HfApi, "create_repo", return_value=mock.Mock(repo_id="team/x")),
        mock.patch.object(HfApi, "create_commit") as create_commit,
        pytest.raises(FileNotFoundError, match="No saved retrieval index"),
    ):
        push_to_hub(make_model(), "team/x", index_dir=tmp_path)
    create_commit.assert_not_called()


def test_push_to_hub_refuses_an_index_of_other_weights(tmp_path):
    _, _, stale_index = model_with_index(tmp_path, seed=1)
    with (
        mock.patch.object(HfApi, "create_repo", return_value=mock.Mock(repo_id="team/x")),
        mock.patch.object(HfApi, "create_commit") as create_commit,
        pytest.raises(IndexFormatError, match="fingerprint"),
    ):
        push_to_hub(make_model(), "team/x", index_dir=stale_index)
    create_commit.assert_not_called()


def test_stage_upload_writes_what_would_be_pushed(tmp_path):
    model, processor, index_dir = model_with_index(tmp_path)
    files = stage_upload(
        model, tmp_path / "staged", repo_id="team/atr", processor=processor, index_dir=index_dir
    )
    assert [path.relative_to(tmp_path / "staged").as_posix() for path in files] == UPLOADED_FILES
    assert 'model="team/atr"' in (tmp_path / "staged" / "README.md").read_text()
