"""Train from WebDataset or parquet shards, streamed: features on the training device, gradient-cached batches.

    python datasets_scripts/write_shards.py my_corpus --output-dir shards --num-shards 16
    python examples/train_streaming.py "shards/train/*.tar" --max-steps 2000 --batch-size 1024 --chunk-size 64
    torchrun --standalone --nproc_per_node 2 examples/train_streaming.py "shards/train/*.tar" --use-cpu

Without shards (``--synthcaps N``) it writes N synthcaps clips as 8 WebDataset shards first. Each process reads
its own shards, the DataLoader workers decode, resample and randomly crop the clips, the log-mel features are
computed on the training device, and the encoders see ``--chunk-size`` clips at a time while the objective sees
the whole global batch. ``--max-steps`` sets the length (a stream has no epoch count).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from transformers import TrainingArguments, set_seed

from hf_atr import AtrDualEncoderModel, AtrProcessor, AtrTrainer
from hf_atr.data.shards import load_audio_text_shards, write_audio_text_shards
from hf_atr.data.synthcaps import load_synthcaps
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.training.streaming import StreamingPairs

TOKENIZER_CLIPS = 2000
"""Clips read from the stream to train the caption tokenizer on."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("shards", nargs="*", help="Shard files or glob patterns (.tar or .parquet).")
    parser.add_argument(
        "--synthcaps", type=int, default=256, help="Clips to write as shards when none are given."
    )
    parser.add_argument("--objective", default="contrastive")
    parser.add_argument("--output-dir", default="runs/streaming")
    parser.add_argument("--batch-size", type=int, default=64, help="Clips per process and step.")
    parser.add_argument(
        "--chunk-size", type=int, default=None, help="Gradient caching: clips per encoder chunk."
    )
    parser.add_argument("--captions", choices=["random", "all"], default="random")
    parser.add_argument("--shuffle-buffer", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--save-steps", type=int, default=50)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per process.")
    parser.add_argument("--resume-from-checkpoint", default=None)
    parser.add_argument("--use-cpu", action="store_true", help="Train on CPU (gloo DDP under torchrun).")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_seed(args.seed)
    shards = args.shards
    if not shards:
        shard_dir = Path(args.output_dir) / "synthcaps_shards"
        if not shard_dir.is_dir():
            clips = load_synthcaps(num_train=args.synthcaps, num_validation=2, num_test=2)["train"]
            write_audio_text_shards(clips, shard_dir, num_shards=8)
        shards = sorted(str(path) for path in shard_dir.glob("*.tar"))
    clips = load_audio_text_shards(shards)
    captions = [caption for row in itertools.islice(clips, TOKENIZER_CLIPS) for caption in row["captions"]]
    extractor = tiny_feature_extractor()
    processor = AtrProcessor(extractor, train_caption_tokenizer(captions, vocab_size=3000))
    model = AtrDualEncoderModel(
        tiny_model_config(extractor, len(processor.tokenizer), objective={"name": args.objective})
    )
    trainer = AtrTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            max_steps=args.max_steps,
            save_steps=args.save_steps,
            logging_steps=10,
            dataloader_num_workers=args.workers,
            report_to=[],
            use_cpu=args.use_cpu,
            seed=args.seed,
        ),
        train_dataset=StreamingPairs(
            clips, captions=args.captions, seed=args.seed, shuffle_buffer_size=args.shuffle_buffer
        ),
        processing_class=processor,
        audio_features="device",
        embedding_chunk_size=args.chunk_size,
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    if trainer.is_world_process_zero():
        trainer.save_model(args.output_dir)
        processor.save_pretrained(args.output_dir)
    trainer.end()


if __name__ == "__main__":
    main()
