from __future__ import annotations

import json

import pytest
import torch
from tiny_models import feature_dataset, make_model, make_processor, tiny_clap_feature_extractor
from transformers import AutoModel, AutoProcessor, WhisperFeatureExtractor

from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.model_card import card_data
from hf_atr.training.final_model import (
    METRICS_FILE,
    MODEL_DIRECTORY,
    TRAINING_AUDIO,
    evaluate_and_save,
    training_audio_record,
)


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
    compute = {
        "torch": torch.__version__,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    assert final.protocol == {**evaluator.protocol, "compute": compute}
    assert final.protocol["similarity"] == "cosine"
    assert "t2a_mAP@16" in final.metrics
    reloaded = AutoModel.from_pretrained(final.model_dir)
    again = RetrievalEvaluator(test, AutoProcessor.from_pretrained(final.model_dir), map_cutoffs=(10, 16))
    assert again(reloaded) == pytest.approx(final.metrics)  # the saved model is the evaluated one
    card = (final.model_dir / "README.md").read_text()
    assert (
        "On my test clips (8 clips):" in card
        and "| all |" in card
        and "- queries: 16 captions; languages: eng" in card
    )
    assert f"{100 * final.metrics['t2a_R@1']:.1f} |" in card


def test_metrics_file_records_the_training_clips_cut_to_the_window(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    record = training_audio_record(33, 33, processor.feature_extractor)
    window = 1.015  # 100 AST frames of 25 ms every 10 ms
    assert record == {
        "clips": 33, "clips_cut_to_window": 33, "window_seconds": pytest.approx(window), "kept": f"the first {window:.2f} s of each",
    }  # fmt: skip
    card_data(model)[TRAINING_AUDIO] = record
    evaluator = RetrievalEvaluator(feature_dataset(4), processor, split="test")
    final = evaluate_and_save(model, processor, evaluator, tmp_path)
    assert json.loads(final.metrics_file.read_text())[TRAINING_AUDIO] == record
    assert (
        f"- long clips: 33 of 33 training clips were longer than the feature extractor's {window:.2f}-s window"
        in (final.model_dir / "README.md").read_text()
    )


def test_training_audio_record_follows_the_extractor():
    # rand_trunc: features the processor stored hold the head (its random crop is the waveform collator's)
    clap = training_audio_record(10, 2, tiny_clap_feature_extractor())
    assert clap["kept"] == "the first 1.00 s of each" and clap["clips_cut_to_window"] == 2
    fused = training_audio_record(10, None, tiny_clap_feature_extractor(fused=True))  # reads long clips whole
    assert fused == {"clips": 10, "clips_cut_to_window": 0, "window_seconds": None, "kept": None}
    whisper = training_audio_record(5, None, WhisperFeatureExtractor(), kept="cut in the workers")
    assert whisper == {
        "clips": 5,
        "clips_cut_to_window": None,
        "window_seconds": 30.0,
        "kept": "cut in the workers",
    }
