"""``hf-atr search``: rank the entries of an index for a text query, an audio file, or a file of queries."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from .common import (
    add_dtype_argument,
    checked_device_argument,
    load_retrieval_pipeline,
    model_dtype_arguments,
)
from .moment_options import add_moment_arguments
from .search_moments import MOMENTS_HELP, check_moment_arguments, run_moment_search


def add_search_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr search --model DIR --index INDEX "query"``."""
    parser = subparsers.add_parser(
        "search",
        help="search an index with a text query, an audio file, or a file of queries",
        description="Rank the entries of an index built by `hf-atr index` (or `pipe.save_index`) for a query. "
        "A text query returns the best-matching audio files, each with its best-matching time span (start "
        "and end in seconds); a path to an existing audio file returns the best-matching captions of a "
        "caption index (a query ending in an audio extension that names no file is an error). --audio FILE "
        "returns the audio files that sound most like FILE (query by example). --queries FILE runs one query "
        'per line with one model load and prints JSON lines {"query", "hits"}. --moments finds when the described '
        "sound happens: one ranked list of moments (file, start, end in seconds, score) across the indexed files. "
        "Scores are the model's "
        "similarity (cosine, or the negative Euclidean/Mahalanobis distance).",
    )
    parser.add_argument(
        "--model", required=True, help="directory (or Hub id) of the model that built the index"
    )
    parser.add_argument("--index", required=True, help="index directory")
    parser.add_argument(
        "query", nargs="?", help='a caption such as "a dog barks", or the path of an audio file'
    )
    parser.add_argument(
        "--audio", default=None, help="an audio file: find the indexed files that sound alike"
    )
    parser.add_argument(
        "--queries", default=None, help="a text file of queries, one per line (JSON lines out)"
    )
    parser.add_argument("--top-k", type=int, default=5, help="number of results (default: 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a list")
    parser.add_argument(
        "--device",
        default=None,
        help="run the model and search the index on this torch device (cuda, cuda:1, cpu): exact search of the "
        "stored vectors there, whatever the index's kind (default: the model where transformers puts it, the "
        "index searched by faiss on the CPU)",
    )
    parser.add_argument(
        "--search-dtype",
        choices=("float32", "float16"),
        default=None,
        help="with --device: hold the index's vectors there in this precision (default: float32; float16 "
        "halves the memory, near-ties may swap)",
    )
    add_dtype_argument(parser)
    add_moment_arguments(parser, MOMENTS_HELP)
    parser.set_defaults(handler=run_search)
    return parser


def run_search(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr search``."""
    given = [name for name in ("query", "audio", "queries") if getattr(args, name) is not None]
    if len(given) != 1:
        raise SystemExit(
            "hf-atr search: give exactly one of a query, --audio FILE or --queries FILE"
            + (f" (got {', '.join(given)})." if given else ".")
        )
    queries = _read_queries(Path(args.queries).expanduser()) if args.queries else None
    proposal = check_moment_arguments(args)
    if args.audio is not None and not Path(args.audio).expanduser().is_file():
        raise SystemExit(f"--audio {args.audio}: no such file.")
    index_dir = Path(args.index).expanduser()
    if not index_dir.is_dir():
        raise SystemExit(
            f"--index {index_dir}: no such directory; build the index first (`hf-atr index --model ... "
            f"--audio-dir ... --out {args.index}`)."
        )
    if args.search_dtype is not None and args.device is None:
        raise SystemExit("hf-atr search: --search-dtype applies to --device search; give --device too.")
    placement = {}
    if args.device is not None:
        device = checked_device_argument(args.device)
        placement = {
            "device": device,
            "search_device": device,
            "search_dtype": args.search_dtype or "float32",
        }
    placement.update(model_dtype_arguments(args, placement.get("device")))
    pipe = load_retrieval_pipeline(args.model, index_dir=index_dir, **placement)
    if proposal is not None:
        return run_moment_search(pipe, proposal, queries or [args.query], args)
    if queries is not None:
        return _run_query_file(pipe, queries, args)
    try:
        if args.audio is not None:
            hits = pipe(audio=str(Path(args.audio).expanduser()), top_k=args.top_k)
        else:
            hits = pipe(args.query, top_k=args.top_k)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr search: {_search_error(error, args.query, args)}") from error
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
        return 0
    query = f"Sounds like: {args.audio}" if args.audio is not None else f"Query: {args.query!r}"
    print(f"{query}  {_precisions(pipe, args)}")
    for rank, hit in enumerate(hits, start=1):
        span = f"  {hit['start']:.2f}-{hit['end']:.2f} s" if "start" in hit else ""
        caption = f"  ({hit['caption']})" if "caption" in hit else ""
        print(f"  {rank}. {hit['id']}{span}  score={hit['score']:.4f}{caption}")
    return 0


def _run_query_file(pipe: Any, queries: list[str], args: argparse.Namespace) -> int:
    """One JSON line per query, ``{"query", "hits"}``, or ``{"query", "error"}`` for a query that fails (the
    others still run); exit status 1 when any failed."""
    failed = 0
    for query in queries:
        try:
            line = {"query": query, "hits": pipe(query, top_k=args.top_k)}
        except (FileNotFoundError, ValueError) as error:
            failed += 1
            line = {"query": query, "error": _search_error(error, query, args)}
        print(json.dumps(line, ensure_ascii=False))
    if failed:
        print(
            f'hf-atr search: {failed} of {len(queries)} queries failed (see their "error").', file=sys.stderr
        )
    return 1 if failed else 0


def _precisions(pipe: Any, args: argparse.Namespace) -> str:
    """The dtype the searched index's embeddings were computed in (its metadata) and, when it differs, the query's."""
    from hf_atr.data.audio import looks_like_audio_path
    from hf_atr.pipelines.index_storage import model_dtype

    audio_query = args.audio is None and looks_like_audio_path(args.query)
    index = pipe.text_index if audio_query else pipe.audio_index
    query_dtype = model_dtype(pipe.model)
    queries = "" if index.embedding_dtype == query_dtype else f", the query in {query_dtype}"
    return f"(index embeddings computed in {index.embedding_dtype}{queries})"


def _search_error(error: Exception, query: str | None, args: argparse.Namespace) -> str:
    """What ``hf-atr search`` says about a query that fails: the pipeline's message, but for an index the index
    directory lacks (whose message names the Python calls that build one), the command that adds it.

    ``query`` is the text or audio path searched (``None`` for ``--audio FILE``, which searches audio files).
    """
    from hf_atr.pipelines.persistence import AUDIO_INDEX_NAME
    from hf_atr.pipelines.retrieval_pipeline import MissingIndexError

    if not isinstance(error, MissingIndexError):
        return str(error)
    model, index = shlex.quote(args.model), shlex.quote(args.index)
    if error.missing == AUDIO_INDEX_NAME:
        return (
            f"--index {args.index} holds no audio files to search: add them with "
            f"`hf-atr index --model {model} --audio-dir DIR --out {index} --append`."
        )
    return (
        f"{query} is an audio file, which searches captions, and --index {args.index} holds none: add them with "
        f"`hf-atr index --model {model} --captions FILE --out {index} --append`, or find the audio files that "
        f"sound like it with `hf-atr search --model {model} --index {index} --audio {shlex.quote(query or '')}`."
    )


def _read_queries(path: Path) -> list[str]:
    if not path.is_file():
        raise SystemExit(f"--queries {path}: no such file.")
    queries = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not queries:
        raise SystemExit(f"--queries {path} holds no query.")
    return queries


__all__ = ["add_search_parser", "run_search"]
