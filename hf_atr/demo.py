"""The main job: generate synthcaps → train a tiny dual encoder → evaluate → save → index → search.

``hf-atr demo`` runs it from the command line; :func:`run_demo` is the same thing from Python.
Everything is offline: the audio backbone is a random-init AST, the text backbone a random-init
BERT with a WordPiece tokenizer trained on the captions.

It runs at one torch thread (:data:`DEMO_THREADS`; the thread count in force before is restored at the end):
the thread count and the CPU's instruction set change the order in which sums are taken, so the figures are
reproducible only for the same count on the same kind of CPU; both are recorded in ``metrics.json`` (the
protocol's ``compute``) and in the card.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import ASTConfig, ASTFeatureExtractor, BertConfig, TrainingArguments, pipeline
from transformers.utils import logging

from .configuration_atr import AtrConfig
from .data.schema import LANGUAGES, all_captions, describe_dataset
from .data.synthcaps import CORPUS_NAME, load_synthcaps
from .data.synthcaps_grammar import event_phrase
from .evaluation.evaluator import RetrievalEvaluator
from .metrics.tables import results_table
from .model_card.facts import card_data, record_sharing_terms
from .modeling_atr import AtrDualEncoderModel
from .processing_atr import AtrProcessor
from .tokenization import train_caption_tokenizer
from .training.callbacks import ModelCardCallback
from .training.final_model import TRAINING_AUDIO, evaluate_and_save, training_audio_record
from .training.trainer import AtrTrainer
from .windowing import collect_cut_clips, extractor_window

logger = logging.get_logger(__name__)

EXAMPLE_QUERIES = ("a loud siren", "a high-pitched tone followed by a low tone")
SEARCH_SUGGESTION = event_phrase("high_tone")
"""The query of the ``hf-atr search`` command the demo ends by suggesting: a synthcaps event ("a high-pitched
tone"), which the demo model was trained to find, so the first search a newcomer runs shows it working."""
CORPUS = CORPUS_NAME
DEMO_THREADS = 1
"""torch threads the demo runs with: README's figures were measured at one thread (see the module docstring)."""
DEMO_LICENSE = "apache-2.0"
"""The demo model's licence: its weights come from random initialisation and synthcaps, which hf-atr's own code
(Apache-2.0) generates; no third-party data or weights go into it."""
AUDIO_DIRECTORY = "audio"
"""Sub-directory of the demo's output with the test clips as WAV files, which its index points to."""
INDEX_DIRECTORY = "index"
"""Sub-directory of the demo's output with the retrieval index of its test clips (``hf-atr search --index``)."""
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
    """What :func:`run_demo` produced: the test metrics, the chance level of T2A R@1, the model, the index of the
    test clips and their audio, the example searches, the torch threads and CPU capability of the run, and the
    time it took."""

    metrics: dict[str, float]
    chance_r1: float
    model_dir: Path
    index_dir: Path
    audio_dir: Path
    searches: dict[str, list[tuple[str, float, str]]] = field(default_factory=dict)
    threads: int = DEMO_THREADS
    cpu_capability: str = ""
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
    threads: int = DEMO_THREADS,
    show_progress: bool = True,
) -> DemoResult:
    """Train and evaluate a tiny model on synthcaps, then index its test clips; everything goes to ``output_dir``.

    Written: ``model/`` (the weights, the processor and the model card with the test results and their protocol;
    ``make model-cards`` copies it to ``model_cards/demo-contrastive/``), ``metrics.json`` (``{"metrics", "protocol",
    "training_audio"}``, :func:`~hf_atr.training.final_model.evaluate_and_save`), ``audio/`` (the test clips as WAV
    files) and ``index/`` (their retrieval index, audio and English captions, for ``hf-atr search`` and ``hf-atr
    serve``).

    Args:
        threads: torch's thread count for the run (restored afterwards); README's figures are at
            :data:`DEMO_THREADS`.

    Returns:
        The metrics (English + 7 translations, with per-language keys and MRV), the chance level of T2A R@1
        (``1 / num_test``), the top-3 clips the saved index gives for :data:`EXAMPLE_QUERIES`, and the run's
        thread count and CPU capability.

    Raises:
        ValueError: ``threads`` below 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}.")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run_demo(
            Path(output_dir),
            objective=objective,
            max_steps=max_steps,
            epochs=epochs,
            num_train=num_train,
            num_test=num_test,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=seed,
            show_progress=show_progress,
        )
    finally:
        torch.set_num_threads(previous_threads)


def _run_demo(
    output_dir: Path,
    *,
    objective: str,
    max_steps: int,
    epochs: float,
    num_train: int,
    num_test: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    show_progress: bool,
) -> DemoResult:
    started = time.perf_counter()
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
    record_sharing_terms(model, license=DEMO_LICENSE, base_model=[])  # random init: no base model

    window = extractor_window(feature_extractor)
    with collect_cut_clips("the demo's clips", window, log=False) as cut:
        features = processor.extract_audio_features(corpus, keep_audio=False)
    training_ids = set(corpus["train"]["audio_id"])
    card_data(model)[TRAINING_AUDIO] = training_audio_record(
        len(features["train"]), sum(name in training_ids for name in cut.names), feature_extractor
    )
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
    final = evaluate_and_save(
        model, processor, evaluator, output_dir, eval_dataset=describe_dataset(corpus["test"], CORPUS)
    )
    retrieval = index_test_clips(
        final.model_dir,
        corpus["test"],
        output_dir / AUDIO_DIRECTORY,
        output_dir / INDEX_DIRECTORY,
        show_progress,
    )
    return DemoResult(
        metrics=final.metrics,
        chance_r1=1.0 / len(features["test"]),
        model_dir=final.model_dir,
        index_dir=output_dir / INDEX_DIRECTORY,
        audio_dir=output_dir / AUDIO_DIRECTORY,
        searches=search_examples(retrieval, corpus["test"], EXAMPLE_QUERIES, top_k=3),
        threads=final.protocol["compute"]["threads"],
        cpu_capability=final.protocol["compute"]["cpu_capability"],
        train_seconds=train_seconds,
        total_seconds=time.perf_counter() - started,
    )


def index_test_clips(
    model_dir: Path, clips: Dataset, audio_dir: Path, index_dir: Path, show_progress: bool = True
) -> Any:
    """Write ``clips`` (shared schema, WAV bytes) into ``audio_dir`` as ``<audio_id>.wav``, index them and their
    English captions (ids ``<audio_id>#<slot>``) with the retrieval pipeline of the saved model in ``model_dir``,
    and save the index to ``index_dir``; returns the pipeline.

    The index records ``audio_dir`` as its root, so its hits carry the files' paths (``hf-atr serve`` plays them).
    """
    audio_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for row in clips.select_columns(["audio", "audio_id"]):
        path = audio_dir / f"{row['audio_id']}.wav"
        path.write_bytes(row["audio"]["bytes"])
        files.append(path)
    retrieval = pipeline("audio-text-retrieval", model=str(model_dir))
    retrieval.index(files, root=audio_dir, show_progress=show_progress)
    caption_ids, captions = [], []
    for audio_id, clip_captions in zip(clips["audio_id"], clips["captions"]):
        caption_ids += [f"{audio_id}#{slot}" for slot in range(len(clip_captions))]
        captions += clip_captions
    retrieval.index(captions, ids=caption_ids, show_progress=show_progress)
    retrieval.save_index(index_dir)
    return retrieval


def search_examples(
    retrieval: Any, clips: Dataset, queries: tuple[str, ...], *, top_k: int = 3
) -> dict[str, list[tuple[str, float, str]]]:
    """For each text query, the ``top_k`` clips of the pipeline's index as ``(audio_id, score, first caption)``
    (what ``hf-atr search`` prints for the same query on the saved index)."""
    first_caption = {
        audio_id: captions[0] for audio_id, captions in zip(clips["audio_id"], clips["captions"])
    }
    results = {}
    for query in queries:
        hits = retrieval(query, top_k=top_k)
        results[query] = [
            (Path(hit["id"]).stem, float(hit["score"]), first_caption[Path(hit["id"]).stem]) for hit in hits
        ]
    return results


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
