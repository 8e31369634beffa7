"""``hf-atr demo``: the main job end to end (:func:`hf_atr.demo.run_demo`), and what it prints."""

from __future__ import annotations

import argparse
from typing import Any


def add_demo_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr demo [--output-dir DIR] [--objective NAME] [...]``."""
    parser = subparsers.add_parser(
        "demo",
        help="generate synthcaps, train a tiny model, evaluate, save, index and search (offline, CPU, a few minutes)",
        description="The main job: generate the embedded synthcaps dataset, train a tiny random-init AST + BERT "
        "dual encoder, evaluate retrieval in 8 languages, save the model, write the test clips and their index "
        "(for hf-atr search and hf-atr serve) and answer example text queries.",
    )
    parser.add_argument(
        "--output-dir",
        default="outputs/demo",
        help="where metrics.json, model/, audio/ (the test clips) and index/ (their index) are written",
    )
    parser.add_argument(
        "--objective", default="contrastive", help="registered objective name (default: contrastive)"
    )
    parser.add_argument(
        "--max-steps", type=int, default=-1, help="optimizer steps; overrides --epochs when > 0"
    )
    parser.add_argument(
        "--epochs",
        type=float,
        default=1.0,
        help="epochs; one epoch sees every caption of every language once (default: 1)",
    )
    parser.add_argument("--num-train", type=int, default=600, help="training clips (default: 600)")
    parser.add_argument("--num-test", type=int, default=100, help="test clips (default: 100)")
    parser.add_argument("--batch-size", type=int, default=32, help="clips per step (default: 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the run (default: 1, as README's figures were measured; another count sums in "
        "another order and gives slightly different figures)",
    )
    parser.set_defaults(handler=run_demo)
    return parser


def run_demo(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr demo``: run the demo, then print its results, searches and where it wrote them."""
    from ..demo import SEARCH_SUGGESTION, format_results_table
    from ..demo import run_demo as run_the_demo

    if args.threads < 1:
        raise SystemExit(f"hf-atr demo: --threads must be at least 1, got {args.threads}.")
    result = run_the_demo(
        args.output_dir,
        objective=args.objective,
        max_steps=args.max_steps,
        epochs=args.epochs,
        num_train=args.num_train,
        num_test=args.num_test,
        batch_size=args.batch_size,
        seed=args.seed,
        threads=args.threads,
    )
    print()
    print(
        f"Test retrieval on synthcaps ({args.num_test} clips, 5 captions each, 8 languages), objective "
        f"'{args.objective}', in %:"
    )
    print(format_results_table(result))
    print()
    for query, hits in result.searches.items():
        print(f"Query: {query!r}")
        for rank, (audio_id, score, caption) in enumerate(hits, start=1):
            print(f"  {rank}. {audio_id}  score={score:.3f}  ({caption})")
    print()
    print(f"Model saved to {result.model_dir}; metrics in {result.model_dir.parent / 'metrics.json'}")
    print(f"Test clips in {result.audio_dir}, their index in {result.index_dir}; search them with")
    print(f'  hf-atr search --model {result.model_dir} --index {result.index_dir} "{SEARCH_SUGGESTION}"')
    threads = f"{result.threads} torch thread{'s' if result.threads != 1 else ''}"
    print(
        f"Training took {result.train_seconds:.0f} s, the whole demo {result.total_seconds:.0f} s ({threads}, "
        f"CPU capability {result.cpu_capability})."
    )
    return 0


__all__ = ["add_demo_parser", "run_demo"]
