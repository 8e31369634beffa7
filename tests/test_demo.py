from __future__ import annotations

import json

import pytest
from transformers import AutoModel, AutoProcessor

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.cli import main
from hf_atr.data.schema import LANGUAGES
from hf_atr.demo import EXAMPLE_QUERIES, format_results_table, run_demo
from hf_atr.evaluation.retrieval import TIE_RULE


@pytest.mark.slow
def test_demo_end_to_end_small(tmp_path):
    result = run_demo(tmp_path, max_steps=6, num_train=24, num_test=12, batch_size=8, show_progress=False)
    written = json.loads((tmp_path / "metrics.json").read_text())
    metrics, protocol = written["metrics"], written["protocol"]
    assert metrics == pytest.approx(result.metrics)
    assert protocol["tie_rule"] == TIE_RULE and protocol["split"] == "test" and protocol["clips"] == 12
    assert protocol["languages"] == list(LANGUAGES) and protocol["window_pooling"] is None
    for key in ("t2a_R@1", "a2t_R@10", "a2t_recall_fraction@5", "t2a_mAP@10", "MRV", "t2a_R@1/jpn"):
        assert key in metrics
    assert result.chance_r1 == pytest.approx(1 / 12)
    assert list(result.searches) == list(EXAMPLE_QUERIES)
    assert all(len(hits) == 3 for hits in result.searches.values())
    assert isinstance(AutoModel.from_pretrained(result.model_dir), AtrDualEncoderModel)
    assert isinstance(AutoProcessor.from_pretrained(result.model_dir), AtrProcessor)
    table = format_results_table(result)
    assert all(f"| {language} |" in table for language in (*LANGUAGES, "avg"))
    assert "Chance level: T2A R@1 = 8.3% (12 test clips)" in table
    card = (result.model_dir / "README.md").read_text()  # what `make model-cards` publishes
    assert "| avg |" in card and "(CLIP). ICML 2021." in card and "- training data: synthcaps" in card
    assert "- ties: ties count against the relevant item" in card and "- queries: 480 captions" in card


def test_cli_demo_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for option in ("--output-dir", "--objective", "--max-steps", "--epochs"):
        assert option in help_text
