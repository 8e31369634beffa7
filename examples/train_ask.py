"""Contrastive vs ASK (and ASK's Table 3 ablations) on SynthCaps with the tiny demo dual encoder.

Every variant starts from the same random initialisation and sees the same batches; only the objective
(and, for ``no_refresh``, the knowledge-base refresh) differs. The knowledge base is the training set
(ASK⁺: every caption paired with its clip), built at train begin and rebuilt every ``--refresh-epochs``
epochs by :class:`~hf_atr.training.callbacks.KnowledgeBaseRefreshCallback`; the paper's ``T = 15`` and
``N_c = 512`` are scaled down to this short run. Results are English T2A/A2T retrieval on the test split.

Example::

    OMP_NUM_THREADS=1 python examples/train_ask.py --output-dir runs/ask
    python examples/train_ask.py --variants contrastive ask --epochs 10 --num-train 512
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import TrainingArguments

from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.objectives.ask import AskObjective
from hf_atr.objectives.contrastive import ContrastiveObjective
from hf_atr.processing_atr import AtrProcessor
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training.callbacks import KnowledgeBaseRefreshCallback
from hf_atr.training.trainer import AtrTrainer

VARIANTS = {
    "contrastive": None,
    "ask": {},
    "no_fine": {"use_fine": False},
    "no_coarse": {"use_coarse": False},
    "no_injection": {"use_injection": False},
    "no_ot": {"use_ot_realignment": False},
    "no_reliability": {"use_reliability": False},
    "no_refresh": {},
}
"""Variant name -> AskObjective switches (None: the contrastive baseline). ``no_refresh`` keeps the first base."""

COLUMNS = ("t2a_R@1", "t2a_R@5", "t2a_R@10", "a2t_R@1", "a2t_R@5", "a2t_R@10", "t2a_mAP@10")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/train_ask"))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--num-train", type=int, default=192, help="training clips (5 captions each)")
    parser.add_argument("--num-test", type=int, default=100)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--refresh-epochs", type=int, default=1, help="knowledge-base update period T")
    parser.add_argument("--prototypes", type=int, default=64, help="N_c")
    parser.add_argument("--neighbours", type=int, default=10, help="K")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def run_variant(
    name: str, corpus, processor: AtrProcessor, vocab_size: int, args: argparse.Namespace
) -> dict:
    torch.manual_seed(args.seed)
    model = AtrDualEncoderModel(tiny_model_config(processor.feature_extractor, vocab_size))
    switches = VARIANTS[name]
    callbacks = []
    if switches is None:
        objective = ContrastiveObjective()
    else:
        objective = AskObjective(num_neighbours=args.neighbours, num_prototypes=args.prototypes, **switches)
        callbacks.append(
            KnowledgeBaseRefreshCallback(
                objective,
                processor,
                corpus["train"],
                every_epochs=args.refresh_epochs,
                refresh=name != "no_refresh",
                show_progress=False,
                seed=args.seed,
            )
        )
    training_args = TrainingArguments(
        output_dir=str(args.output_dir / name),
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        weight_decay=0.01,
        warmup_steps=10,
        num_train_epochs=args.epochs,
        lr_scheduler_type="cosine",
        logging_strategy="epoch",
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=args.seed,
        dataloader_drop_last=True,
        disable_tqdm=True,
    )
    trainer = AtrTrainer(
        model=model,
        args=training_args,
        train_dataset=corpus["train"],
        processing_class=processor,
        objective=objective,
        callbacks=callbacks,
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    metrics = RetrievalEvaluator(corpus["test"], processor)(model)
    drifts = [entry["kb_drift"] for entry in trainer.state.log_history if "kb_drift" in entry]
    return {"metrics": metrics, "train_seconds": seconds, "kb_drifts": drifts}


def main() -> None:
    args = build_parser().parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    raw = load_synthcaps(
        num_train=args.num_train, num_validation=0, num_test=args.num_test, languages=("eng",), seed=args.seed
    )
    tokenizer = train_caption_tokenizer(
        [caption for row in raw["train"] for caption in row["captions"]], vocab_size=3000
    )
    processor = AtrProcessor(tiny_feature_extractor(), tokenizer)
    corpus = processor.extract_audio_features(raw, keep_audio=False)
    results = {}
    for name in args.variants:
        results[name] = run_variant(name, corpus, processor, len(tokenizer), args)
        print(
            f"{name}: {json.dumps({key: round(results[name]['metrics'][key], 4) for key in COLUMNS})}",
            flush=True,
        )
    (args.output_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    print(
        f"\n{args.num_train} training clips x 5 captions, {args.epochs:g} epochs, {args.num_test} test clips "
        f"(chance R@1 = {100 / args.num_test:.1f}%)\n"
    )
    print("| variant | " + " | ".join(COLUMNS) + " | train s |")
    print("|---|" + "---|" * (len(COLUMNS) + 1))
    for name, result in results.items():
        values = " | ".join(f"{100 * result['metrics'][key]:.1f}" for key in COLUMNS)
        print(f"| {name} | {values} | {result['train_seconds']:.0f} |")


if __name__ == "__main__":
    main()
