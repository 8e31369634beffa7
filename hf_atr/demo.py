"""The main job: generate synthcaps → train a tiny dual encoder → evaluate → save → search.

``hf-atr demo`` runs it from the command line; :func:`run_demo` is the same thing from Python.
Everything is offline: the audio backbone is a random-init AST, the text backbone a random-init
BERT with a WordPiece tokenizer trained on the captions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import ASTConfig, ASTFeatureExtractor, BertConfig, TrainingArguments
from transformers.utils import logging

from .configuration_atr import AtrConfig
from .data.schema import LANGUAGES, all_captions
from .data.synthcaps import load_synthcaps
from .encoding import encode_audio, encode_text
from .evaluation.evaluator import RetrievalEvaluator, head_similarity
from .evaluation.tables import results_table
from .model_card import ModelCardCallback
from .modeling_atr import AtrDualEncoderModel
from .processing_atr import AtrProcessor
from .tokenization import train_caption_tokenizer
from .training.final_model import evaluate_and_save
from .training.trainer import AtrTrainer

logger = logging.get_logger(__name__)

EXAMPLE_QUERIES = ("a loud siren", "a high-pitched tone followed by a low tone")
CORPUS = "synthcaps"
DEMO_EVALUATIONS = 0.2
"""The validation split (English) is evaluated every fifth of the run, for the card's evaluation curve; the
evaluation encodes in eval mode and draws no random numbers, so the trained model is the same without it."""


def tiny_feature_extractor(sampling_rate: int = 16000, duration: float = 2.0) -> ASTFeatureExtractor:
    """AST log-mel features (64 bins, 10 ms hop) sized to clips of ``duration`` seconds."""
    return ASTFeatureExtractor(
        sampling_rate=sampling_rate, num_mel_bins=64, max_length=int(round(duration * 100)), do_normalize=True
    )


def tiny_model_config(
    feature_extractor: ASTFeatureExtractor,
    vocab_size: int,
    *,
    hidden_size: int = 64,
    projection_dim: int = 64,
    objective: dict[str, Any] | None = None,
    scoring: str | None = None,
) -> AtrConfig:
    """A small AST + BERT dual encoder that trains in minutes on a CPU."""
    audio_config = ASTConfig(
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * hidden_size,
        num_mel_bins=feature_extractor.num_mel_bins,
        max_length=feature_extractor.max_length,
        patch_size=16,
        frequency_stride=16,
        time_stride=8,
    )
    text_config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=128,
    )
    return AtrConfig(
        audio_config=audio_config,
        text_config=text_config,
        projection_dim=projection_dim,
        scoring=scoring,
        objective=objective or {"name": "contrastive"},
    )


@dataclass
class DemoResult:
    """What :func:`run_demo` produced."""

    metrics: dict[str, float]
    chance_r1: float
    model_dir: Path
    searches: dict[str, list[tuple[str, float, str]]] = field(default_factory=dict)
    train_seconds: float = 0.0
    total_seconds: float = 0.0


def run_demo(
    output_dir: str | Path,
    *,
    objective: str = "contrastive",
    max_steps: int = -1,
    epochs: float = 1.0,
    num_train: int = 600,
    num_test: int = 100,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    seed: int = 0,
    show_progress: bool = True,
) -> DemoResult:
    """Train and evaluate a tiny model on synthcaps; write ``metrics.json`` and the model to ``output_dir``.

    The model directory holds the weights, the processor and the model card with the test results and their
    protocol (``make model-cards`` copies it to ``model_cards/demo-contrastive/``); ``metrics.json`` holds
    ``{"metrics": ..., "protocol": ...}`` (:func:`~hf_atr.training.final_model.evaluate_and_save`).

    Returns the metrics (English + 7 translations, with per-language keys and MRV), the chance level
    of T2A R@1 (``1 / num_test``), and the top-3 clips for :data:`EXAMPLE_QUERIES`.
    """
    started = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    corpus = load_synthcaps(
        num_train=num_train, num_validation=max(num_test // 2, 8), num_test=num_test, seed=seed
    )
    tokenizer = train_caption_tokenizer(all_captions(corpus["train"]), vocab_size=3000)
    feature_extractor = tiny_feature_extractor()
    processor = AtrProcessor(feature_extractor, tokenizer)
    config = tiny_model_config(feature_extractor, len(tokenizer), objective={"name": objective})
    model = AtrDualEncoderModel(config)

    features = processor.extract_audio_features(corpus, keep_audio=False)
    args = TrainingArguments(
        output_dir=str(output_dir / "trainer"),
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=64,
        learning_rate=learning_rate,
        weight_decay=0.01,
        warmup_steps=20,
        num_train_epochs=epochs,
        max_steps=max_steps,
        lr_scheduler_type="cosine",
        logging_steps=20,
        save_strategy="no",
        eval_strategy="steps",
        eval_steps=DEMO_EVALUATIONS,
        report_to=[],
        use_cpu=True,
        seed=seed,
        dataloader_drop_last=True,
        disable_tqdm=not show_progress,
    )
    trainer = AtrTrainer(
        model=model,
        args=args,
        train_dataset=features["train"],
        eval_dataset=features["validation"],
        processing_class=processor,
        train_languages=list(LANGUAGES),
        callbacks=[ModelCardCallback(training_data=CORPUS)],
    )
    train_started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - train_started

    evaluator = RetrievalEvaluator(features["test"], processor, languages=list(LANGUAGES), split="test")
    final = evaluate_and_save(model, processor, evaluator, output_dir, eval_dataset=CORPUS)

    searches = search_examples(model, processor, features["test"], EXAMPLE_QUERIES, top_k=3)
    return DemoResult(
        metrics=final.metrics,
        chance_r1=1.0 / len(features["test"]),
        model_dir=final.model_dir,
        searches=searches,
        train_seconds=train_seconds,
        total_seconds=time.perf_counter() - started,
    )


def search_examples(
    model: AtrDualEncoderModel,
    processor: AtrProcessor,
    dataset: Any,
    queries: tuple[str, ...],
    *,
    top_k: int = 3,
) -> dict[str, list[tuple[str, float, str]]]:
    """For each text query, the ``top_k`` clips as ``(audio_id, score, first caption)``."""
    audio_embeds = encode_audio(model, processor, dataset)
    query_embeds = encode_text(model, processor, list(queries))
    scores = head_similarity(model)(query_embeds, audio_embeds)
    top = scores.topk(min(top_k, scores.shape[1]), dim=1)
    audio_ids, captions = dataset["audio_id"], dataset["captions"]
    return {
        query: [
            (audio_ids[index], float(score), captions[index][0])
            for score, index in zip(row_scores, row_indices)
        ]
        for query, row_scores, row_indices in zip(queries, top.values.tolist(), top.indices.tolist())
    }


def format_results_table(result: DemoResult, languages: tuple[str, ...] = LANGUAGES) -> str:
    """The demo's report: the results table (one row per language plus the average, MRV) and chance level."""
    return "\n".join(
        [
            results_table(result.metrics, languages),
            "",
            "MRV: mean rank variance across languages, lower is more consistent.",
            f"Chance level: T2A R@1 = {100 * result.chance_r1:.1f}% ({round(1 / result.chance_r1)} test clips)",
        ]
    )
