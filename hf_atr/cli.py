"""The ``hf-atr`` command line: ``demo``, ``index``, ``search``, ``evaluate``.

Each ``add_*_parser(subparsers)`` adds one sub-command whose ``handler`` takes the parsed arguments and
returns the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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
    print(f"Training took {result.train_seconds:.0f} s, the whole demo {result.total_seconds:.0f} s.")
    return 0


AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif")
"""File suffixes ``hf-atr index`` picks up (those soundfile decodes)."""
SYNTHCAPS = "synthcaps"


def add_index_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr index --model DIR --audio-dir D --out INDEX``."""
    parser = subparsers.add_parser(
        "index",
        help="encode a folder of audio files into a searchable index",
        description="Encode every audio file under --audio-dir (recursively; "
        f"{', '.join(AUDIO_EXTENSIONS)}) once with the model's audio encoder and save the embeddings as a "
        "retrieval index (safetensors + ids JSON) in --out. Ids are the files' paths relative to --audio-dir. "
        "Search it with `hf-atr search --index OUT`.",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument("--audio-dir", required=True, help="folder of audio files to index")
    parser.add_argument("--out", required=True, help="directory to write the index to")
    parser.add_argument(
        "--kind",
        choices=("flat", "ivf", "hnsw"),
        default="flat",
        help="flat: exact search (default); ivf / hnsw: approximate, for hundreds of thousands of clips",
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="clips encoded per forward pass (default: 32)"
    )
    parser.set_defaults(handler=run_index)
    return parser


def add_search_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr search --model DIR --index INDEX "query"``."""
    parser = subparsers.add_parser(
        "search",
        help="search an index with a text query (or an audio file)",
        description="Rank the entries of an index built by `hf-atr index` (or `pipe.save_index`) for a query. "
        "A text query returns the best-matching audio clips; a path to an existing audio file returns the "
        "best-matching captions of a caption index. Scores are the model's similarity (cosine, or the "
        "negative Euclidean/Mahalanobis distance).",
    )
    parser.add_argument(
        "--model", required=True, help="directory (or Hub id) of the model that built the index"
    )
    parser.add_argument("--index", required=True, help="index directory")
    parser.add_argument("query", help='a caption such as "a dog barks", or the path of an audio file')
    parser.add_argument("--top-k", type=int, default=5, help="number of results (default: 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a list")
    parser.set_defaults(handler=run_search)
    return parser


def add_evaluate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr evaluate --model DIR --dataset {DIR,synthcaps}``."""
    parser = subparsers.add_parser(
        "evaluate",
        help="retrieval metrics of a model on a dataset (R@k both ways, mAP@c, MRV)",
        description="Encode every clip and caption of one split once and report text-to-audio and "
        "audio-to-text R@1/5/10 and mAP@10 (--map-cutoffs for others, e.g. 10 16) and, with several "
        "--languages, per-language values and MRV. Ties count against the relevant item, so a collapsed "
        "model scores at chance or below. --relevance FILE evaluates with several relevant clips per caption "
        "(DCASE 2025 judgements: a caption,file_name,relevance CSV with --relevance-threshold, or the "
        "query,audio_filenames lists); only the judged captions are queries. "
        "--dataset is a DatasetDict (or Dataset) saved with `save_to_disk` in the hf-atr schema "
        "(audio, audio_id, captions, optional translations), or `synthcaps` to generate the embedded "
        "synthetic corpus. --zero-shot classifies the clips of a labelled split (a `label` column, as ESC-50 "
        "and synthcaps have) by prompts of every class instead: accuracy, balanced accuracy, mAP@10. "
        "--report DIR also writes figures and a report.html (R@k curves, rank histograms, the transport plan "
        "of an OT-trained model; for --zero-shot the confusion matrix and per-class accuracy).",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument("--dataset", required=True, help="a `save_to_disk` directory, or `synthcaps`")
    parser.add_argument("--split", default="test", help="split of a DatasetDict (default: test)")
    parser.add_argument(
        "--languages",
        nargs="+",
        default=None,
        help="caption languages (ISO 639-3, e.g. eng fra deu); default English only",
    )
    parser.add_argument(
        "--num-test", type=int, default=100, help="test clips when --dataset synthcaps (default: 100)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="clips per forward pass (default: 32)")
    parser.add_argument(
        "--map-cutoffs",
        type=int,
        nargs="+",
        default=None,
        help="cutoffs c of mAP@c, e.g. 10 16 (DCASE 2025 ranks by mAP@16; default: the library's, mAP@10)",
    )
    parser.add_argument(
        "--relevance",
        default=None,
        help="relevance judgements of the split (CSV, see docs/corpora.md): several relevant clips per caption",
    )
    parser.add_argument(
        "--relevance-threshold",
        type=float,
        default=None,
        help="graded judgements: a pair is relevant when its relevance is >= this value",
    )
    parser.add_argument(
        "--relevance-missing",
        choices=("error", "skip"),
        default="error",
        help="a judged caption or file the split lacks: stop (default) or skip it and report",
    )
    parser.add_argument(
        "--output",
        default=None,
        help='also write {"metrics": {...}, "protocol": {...}} to this JSON file: the metrics and how they '
        "were obtained (tie rule, split, clips, captions, languages, relevance file, cutoffs, scoring)",
    )
    parser.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="also write PNG figures and report.html (figures, metrics table, protocol; opens offline) to DIR; "
        "needs matplotlib: pip install 'hf-atr[plots]'",
    )
    zero_shot = parser.add_argument_group("zero-shot classification")
    zero_shot.add_argument(
        "--zero-shot",
        action="store_true",
        help="classify each clip into the classes of --label-column by caption prompts, instead of retrieval",
    )
    zero_shot.add_argument(
        "--labels",
        nargs="+",
        default=None,
        help="the classes to choose from (default: the split's distinct labels); every clip's label must be one",
    )
    zero_shot.add_argument(
        "--label-column", default="label", help="the column holding each clip's class (default: label)"
    )
    zero_shot.add_argument(
        "--template",
        dest="templates",
        action="append",
        default=None,
        help="prompt template with {} or {class}; repeat to average several (default: 'This is a sound of {class}.')",
    )
    parser.set_defaults(handler=run_evaluate)
    return parser


def run_index(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr index``."""
    audio_dir = Path(args.audio_dir)
    if not audio_dir.is_dir():
        raise SystemExit(f"--audio-dir {audio_dir} is not a directory.")
    files = sorted(
        path for path in audio_dir.rglob("*") if path.is_file() and path.suffix.lower() in AUDIO_EXTENSIONS
    )
    if not files:
        raise SystemExit(f"No audio files ({', '.join(AUDIO_EXTENSIONS)}) under {audio_dir}.")
    pipe = _pipeline(args.model, index_kind=args.kind)
    pipe.index(
        [str(path) for path in files],
        ids=[path.relative_to(audio_dir).as_posix() for path in files],
        batch_size=args.batch_size,
    )
    written = pipe.save_index(args.out)
    print(
        f"Indexed {len(files)} clips from {audio_dir} into {Path(args.out)} ({', '.join(p.name for p in written)})."
    )
    return 0


def run_search(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr search``."""
    pipe = _pipeline(args.model, index_dir=args.index)
    hits = pipe(args.query, top_k=args.top_k)
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
        return 0
    print(f"Query: {args.query!r}")
    for rank, hit in enumerate(hits, start=1):
        caption = f"  ({hit['caption']})" if "caption" in hit else ""
        print(f"  {rank}. {hit['id']}  score={hit['score']:.4f}{caption}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr evaluate``."""
    from transformers import AutoModel, AutoProcessor

    from hf_atr.evaluation.tables import format_metric

    if args.zero_shot:
        misplaced = [
            option
            for option, value in (
                ("--relevance", args.relevance),
                ("--languages", args.languages),
                ("--map-cutoffs", args.map_cutoffs),
            )
            if value
        ]
        if misplaced:
            raise SystemExit(
                f"hf-atr evaluate: {', '.join(misplaced)} apply to retrieval, not to --zero-shot."
            )
    elif args.labels or args.templates:
        raise SystemExit("hf-atr evaluate: --labels and --template apply to --zero-shot.")
    dataset, split = _evaluation_split(args)
    model = AutoModel.from_pretrained(args.model)
    processor = AutoProcessor.from_pretrained(args.model)
    try:
        evaluator = (_zero_shot_evaluator if args.zero_shot else _retrieval_evaluator)(
            args, dataset, split, processor
        )
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    if args.report:
        try:
            report = evaluator.report(model, args.report)
        except ImportError as error:
            raise SystemExit(f"hf-atr evaluate --report: {error}") from error
        metrics = report.metrics
    else:
        metrics = evaluator(model)
    protocol = evaluator.protocol
    where = f"{args.dataset} ({split or 'saved Dataset'}, {protocol['clips']} clips"
    if args.zero_shot:
        print(
            f"Zero-shot classification on {where}, {protocol['classes']} classes, templates "
            f"{protocol['templates']}; a tie with the true class counts against it); in %:"
        )
    else:
        relevance = (
            f"relevance judgements {protocol['relevance_file']}"
            if protocol["relevance"] == "judgements"
            else "each caption's own clip relevant"
        )
        print(
            f"Retrieval on {where}, {protocol['captions']} captions, {relevance}; ties count against the relevant "
            "item); recall and mAP in %, ranks 1-based:"
        )
    width = max(len(name) for name in metrics)
    for name, value in metrics.items():
        print(f"  {name:<{width}}  {format_metric(name, value)}")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps({"metrics": metrics, "protocol": protocol}, indent=2))
        print(f"Metrics and protocol written to {args.output}")
    if args.report:
        print(f"Report written to {report.path} (figures beside it)")
    return 0


def _retrieval_evaluator(args: argparse.Namespace, dataset: Any, split: str | None, processor: Any) -> Any:
    from hf_atr.evaluation.evaluator import RetrievalEvaluator
    from hf_atr.evaluation.retrieval import DEFAULT_MAP_CUTOFFS

    return RetrievalEvaluator(
        dataset,
        processor,
        languages=args.languages,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
        relevance=args.relevance,
        relevance_threshold=args.relevance_threshold,
        relevance_missing=args.relevance_missing,
        map_cutoffs=args.map_cutoffs or DEFAULT_MAP_CUTOFFS,
    )


def _zero_shot_evaluator(args: argparse.Namespace, dataset: Any, split: str | None, processor: Any) -> Any:
    from hf_atr.evaluation.zero_shot import ZeroShotEvaluator

    return ZeroShotEvaluator(
        dataset,
        processor,
        labels=args.labels,
        label_column=args.label_column,
        templates=args.templates,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
    )


def _pipeline(model: str, **pipeline_kwargs: Any) -> Any:
    from transformers import pipeline  # importing hf_atr arranged the task's registration (auto_registration)

    return pipeline("audio-text-retrieval", model=model, **pipeline_kwargs)


def _evaluation_split(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The dataset to evaluate and its split name (``None`` for a saved single ``Dataset``)."""
    if args.dataset == SYNTHCAPS:
        from hf_atr.data.schema import LANGUAGES
        from hf_atr.data.synthcaps import load_synthcaps

        languages = args.languages or ["eng"]
        unknown = [language for language in languages if language not in LANGUAGES]
        if unknown:
            raise SystemExit(f"synthcaps has no captions in {unknown}; choose from {list(LANGUAGES)}.")
        synthcaps = load_synthcaps(num_train=0, num_validation=0, num_test=args.num_test, languages=languages)
        return synthcaps["test"], "test"
    from datasets import DatasetDict, load_from_disk

    path = Path(args.dataset)
    if not path.is_dir():
        raise SystemExit(
            f"--dataset {path} is neither `synthcaps` nor a directory saved with `save_to_disk`."
        )
    loaded = load_from_disk(str(path))
    if isinstance(loaded, DatasetDict):
        if args.split not in loaded:
            raise SystemExit(f"{path} has no split {args.split!r}; splits: {sorted(loaded)}.")
        return loaded[args.split], args.split
    return loaded, None


__all__ = [
    "add_evaluate_parser",
    "add_index_parser",
    "add_search_parser",
    "run_evaluate",
    "run_index",
    "run_search",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-atr", description="Audio-text retrieval with the Hugging Face stack."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo",
        help="generate synthcaps, train a tiny model, evaluate, save and search (offline, CPU, a few minutes)",
        description="The main job: generate the embedded synthcaps dataset, train a tiny random-init AST + BERT "
        "dual encoder, evaluate retrieval in 8 languages, save the model and answer example text queries.",
    )
    demo.add_argument(
        "--output-dir", default="outputs/demo", help="where metrics.json and model/ are written"
    )
    demo.add_argument(
        "--objective", default="contrastive", help="registered objective name (default: contrastive)"
    )
    demo.add_argument(
        "--max-steps", type=int, default=-1, help="optimizer steps; overrides --epochs when > 0"
    )
    demo.add_argument(
        "--epochs",
        type=float,
        default=1.0,
        help="epochs; one epoch sees every caption of every language once (default: 1)",
    )
    demo.add_argument("--num-train", type=int, default=600, help="training clips (default: 600)")
    demo.add_argument("--num-test", type=int, default=100, help="test clips (default: 100)")
    demo.add_argument("--batch-size", type=int, default=32, help="clips per step (default: 32)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(handler=_demo)
    add_index_parser(commands)
    add_search_parser(commands)
    add_evaluate_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
