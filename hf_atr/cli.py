"""The ``hf-atr`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    from .demo import format_results_table, run_demo

    result = run_demo(
        args.output_dir,
        objective=args.objective,
        max_steps=args.max_steps,
        epochs=args.epochs,
        num_train=args.num_train,
        num_test=args.num_test,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    print()
    print(f"Test retrieval on synthcaps ({args.num_test} clips, 5 captions each, 8 languages), objective "
          f"'{args.objective}', in %:")
    print(format_results_table(result))
    print()
    for query, hits in result.searches.items():
        print(f"Query: {query!r}")
        for rank, (audio_id, score, caption) in enumerate(hits, start=1):
            print(f"  {rank}. {audio_id}  score={score:.3f}  ({caption})")
    print()
    print(f"Model saved to {result.model_dir}; metrics in {result.model_dir.parent / 'metrics.json'}")
    print(f"Training took {result.train_seconds:.0f} s, the whole demo {result.total_seconds:.0f} s.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-atr", description="Audio-text retrieval with the Hugging Face stack.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo",
        help="generate synthcaps, train a tiny model, evaluate, save and search (offline, CPU, a few minutes)",
        description="The main job: generate the embedded synthcaps dataset, train a tiny random-init AST + BERT "
        "dual encoder, evaluate retrieval in 8 languages, save the model and answer example text queries.",
    )
    demo.add_argument("--output-dir", default="outputs/demo", help="where metrics.json and model/ are written")
    demo.add_argument("--objective", default="contrastive", help="registered objective name (default: contrastive)")
    demo.add_argument("--max-steps", type=int, default=-1, help="optimizer steps; overrides --epochs when > 0")
    demo.add_argument("--epochs", type=float, default=1.0, help="epochs; one epoch sees every caption of every language once (default: 1)")
    demo.add_argument("--num-train", type=int, default=600, help="training clips (default: 600)")
    demo.add_argument("--num-test", type=int, default=100, help="test clips (default: 100)")
    demo.add_argument("--batch-size", type=int, default=32, help="clips per step (default: 32)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(handler=_demo)

    from .cli_search import add_evaluate_parser, add_index_parser, add_search_parser

    add_index_parser(commands)
    add_search_parser(commands)
    add_evaluate_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
