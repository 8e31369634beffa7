"""Train a dual encoder with AtrTrainer on synthcaps or on a saved shared-schema DatasetDict.

One process:
    python examples/train.py --objective dart --output-dir runs/dart
Several processes (CPU/gloo here, CUDA/NCCL on GPUs; see docs/training-at-scale.md):
    accelerate launch --config_file examples/accelerate_config.yaml examples/train.py --objective dart
    torchrun --standalone --nproc_per_node 2 examples/train.py --objective dart --use-cpu
Every process gathers the embeddings of all processes, so objectives see the global batch
(per-device batch × processes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from datasets import load_from_disk
from transformers import TrainingArguments, set_seed

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.data.schema import LANGUAGES, all_captions
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.tokenization import train_caption_tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dataset", default="synthcaps", help="'synthcaps' or a DatasetDict saved with save_to_disk"
    )
    parser.add_argument("--objective", default="contrastive", help="registered objective name")
    parser.add_argument(
        "--scoring", default=None, help="cosine | euclidean | mahalanobis (default: the objective's paper)"
    )
    parser.add_argument("--output-dir", default="runs/train")
    parser.add_argument("--per-device-batch-size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--save-steps", type=int, default=100)
    parser.add_argument("--resume-from-checkpoint", default=None)
    parser.add_argument(
        "--languages", nargs="*", default=["eng"], help=f"training caption languages, of {LANGUAGES}"
    )
    parser.add_argument(
        "--use-cpu", action="store_true", help="train on CPU (needed for gloo DDP under torchrun)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # Before anything draws random numbers: the model's initial weights must come from the seed.
    set_seed(args.seed)
    corpus = (
        load_synthcaps(num_train=600, num_validation=64, num_test=100)
        if args.dataset == "synthcaps"
        else (load_from_disk(args.dataset))
    )
    processor = AtrProcessor(
        tiny_feature_extractor(), train_caption_tokenizer(all_captions(corpus["train"]), vocab_size=3000)
    )
    model = AtrDualEncoderModel(
        tiny_model_config(
            processor.feature_extractor,
            len(processor.tokenizer),
            objective={"name": args.objective},
            scoring=args.scoring,
        )
    )
    features = processor.extract_audio_features(corpus)
    trainer = AtrTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=args.per_device_batch_size,
            per_device_eval_batch_size=64,
            learning_rate=args.learning_rate,
            max_steps=args.max_steps,
            save_steps=args.save_steps,
            logging_steps=20,
            report_to=[],
            use_cpu=args.use_cpu,
            seed=args.seed,
            dataloader_drop_last=True,
        ),
        train_dataset=features["train"],
        eval_dataset=features["test"],
        processing_class=processor,
        train_languages=args.languages,
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    metrics = trainer.evaluate()
    if trainer.is_world_process_zero():
        trainer.save_model(args.output_dir)
        processor.save_pretrained(args.output_dir)
        Path(args.output_dir, "metrics.json").write_text(json.dumps(metrics, indent=2))
        print(json.dumps({key: round(value, 4) for key, value in metrics.items() if "R@" in key}, indent=2))
    trainer.end()  # destroys the process group; a gloo group left to interpreter shutdown can abort a rank


if __name__ == "__main__":
    main()
