from __future__ import annotations

import json

import pytest
from tiny_models import feature_dataset, make_model, make_processor
from transformers import AutoModel, AutoProcessor

from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.training.final_model import METRICS_FILE, MODEL_DIRECTORY, evaluate_and_save


def test_evaluate_and_save_writes_model_card_and_metrics_with_their_protocol(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    test = feature_dataset(8)
    evaluator = RetrievalEvaluator(test, processor, split="test", map_cutoffs=(10, 16))
    final = evaluate_and_save(
        model, processor, evaluator, tmp_path, eval_dataset="my test clips", extra={"training": {"steps": 3}}
    )
    assert final.model_dir == tmp_path / MODEL_DIRECTORY and final.metrics_file == tmp_path / METRICS_FILE
    written = json.loads(final.metrics_file.read_text())
    assert written == {"metrics": final.metrics, "protocol": final.protocol, "training": {"steps": 3}}
    assert final.protocol == evaluator.protocol and final.protocol["similarity"] == "cosine"
    assert "t2a_mAP@16" in final.metrics
    reloaded = AutoModel.from_pretrained(final.model_dir)
    again = RetrievalEvaluator(test, AutoProcessor.from_pretrained(final.model_dir), map_cutoffs=(10, 16))
    assert again(reloaded) == pytest.approx(final.metrics)  # the saved model is the evaluated one
    card = (final.model_dir / "README.md").read_text()
    assert (
        "On my test clips:" in card and "| all |" in card and "- queries: 16 captions; languages: eng" in card
    )
    assert f"{100 * final.metrics['t2a_R@1']:.1f} |" in card
