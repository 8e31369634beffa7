"""The ``hf-atr`` command line: ``demo``, ``train``, ``index``, ``search``, ``evaluate``, ``serve``, ``build-dataset``.

Each ``add_*_parser(subparsers)`` adds one sub-command whose ``handler`` takes the parsed arguments and
returns the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .commands.build_dataset import add_build_dataset_parser
from .commands.model_loading import checked_model, load_retrieval_pipeline, rebuild_advice
from .commands.serve import add_serve_parser
from .commands.train import add_train_parser

if TYPE_CHECKING:
    from .pipelines.indexing import IndexingRun


def _demo(args: argparse.Namespace) -> int:
    from .demo import format_results_table, run_demo

    if args.threads < 1:
        raise SystemExit(f"hf-atr demo: --threads must be at least 1, got {args.threads}.")
    result = run_demo(
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
    print(f'  hf-atr search --model {result.model_dir} --index {result.index_dir} "a dog barks"')
    threads = f"{result.threads} torch thread{'s' if result.threads != 1 else ''}"
    print(
        f"Training took {result.train_seconds:.0f} s, the whole demo {result.total_seconds:.0f} s ({threads}, "
        f"CPU capability {result.cpu_capability})."
    )
    return 0


SYNTHCAPS = "synthcaps"
ALL_SPLITS = "all"
"""``hf-atr evaluate --zero-shot --split all``: every split of the dataset."""
DEFAULT_SAVE_EVERY = 1000
"""``hf-atr index`` saves the index after this many files (and at the end, and when it stops early)."""


def _add_windowing_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help=f"{what}: window length in seconds (default: the feature extractor's window)",
    )
    parser.add_argument(
        "--hop-seconds",
        type=float,
        default=None,
        help=f"{what}: distance between window starts (default: half the window, 50%% overlap)",
    )


def add_index_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr index --model DIR --audio-dir D --out INDEX``."""
    parser = subparsers.add_parser(
        "index",
        help="encode a folder of audio files (and/or captions) into a searchable index",
        description="Encode every audio file under --audio-dir (recursively; any extension in "
        "hf_atr.data.audio.AUDIO_EXTENSIONS) once with the model's audio encoder and save the embeddings as "
        "a retrieval index (safetensors + ids JSON) in --out. Ids are the files' paths relative to "
        "--audio-dir, which the index records so that hits resolve from anywhere. A file longer than the "
        "feature extractor's window is stored window by window with each window's time span (--pool: one "
        "pooled entry per file), so search returns files with their best-matching span. Files that cannot "
        "be decoded (empty, not audio, corrupt, macOS ._* AppleDouble files) are skipped and listed in "
        "OUT/skipped.tsv unless --strict. The index is saved every --save-every files and when the job stops "
        "early; --append adds the files not yet indexed. --captions FILE adds a caption index for "
        "audio-to-text search; --dataset DIR indexes a saved shared-schema dataset (audio and captions). "
        "Under `accelerate launch` or `torchrun` each process encodes a share of the files and one index "
        "is written, the same as one process writes.",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument("--audio-dir", default=None, help="folder of audio files to index")
    parser.add_argument(
        "--captions",
        default=None,
        help="captions to index for audio-to-text search: a .txt file (one per line), a .csv with a 'caption' "
        "column or caption_1..caption_N (Clotho; ids from 'id' or 'file_name'), or a .jsonl of "
        '{"caption", "id"} objects',
    )
    parser.add_argument(
        "--encoding",
        default="utf-8",
        help="text encoding of the --captions file (a Python codec name such as cp1252; default utf-8)",
    )
    parser.add_argument(
        "--dataset", default=None, help="a dataset saved with `save_to_disk` in the hf-atr schema"
    )
    parser.add_argument("--split", default="test", help="split of a --dataset DatasetDict (default: test)")
    parser.add_argument("--out", required=True, help="directory to write the index to")
    parser.add_argument(
        "--kind",
        choices=("flat", "ivf", "hnsw"),
        default="flat",
        help="flat: exact search (default); ivf / hnsw: approximate, for hundreds of thousands of clips",
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="windows encoded per forward pass (default: 32)"
    )
    parser.add_argument(
        "--pool", action="store_true", help="one pooled entry per file instead of one per window"
    )
    parser.add_argument(
        "--pooling", choices=("mean", "max"), default="mean", help="how --pool pools windows (default: mean)"
    )
    _add_windowing_arguments(parser, "long files")
    parser.add_argument("--strict", action="store_true", help="stop at the first file that cannot be decoded")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--append", action="store_true", help="add to the index in --out (files not yet in it)"
    )
    existing.add_argument("--overwrite", action="store_true", help="replace an index already in --out")
    parser.add_argument(
        "--save-every",
        type=int,
        default=DEFAULT_SAVE_EVERY,
        help=f"save the index after every N files (default: {DEFAULT_SAVE_EVERY})",
    )
    parser.set_defaults(handler=run_index)
    return parser


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
        'per line with one model load and prints JSON lines {"query", "hits"}. Scores are the model\'s '
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
    parser.set_defaults(handler=run_search)
    return parser


RETRIEVAL_OPTIONS = {
    "--languages": "languages",
    "--map-cutoffs": "map_cutoffs",
    "--relevance": "relevance",
    "--relevance-threshold": "relevance_threshold",
    "--relevance-missing": "relevance_missing",
}
"""``hf-atr evaluate`` options of retrieval (option -> attribute), refused with ``--zero-shot``."""
ZERO_SHOT_OPTIONS = {
    "--labels": "labels",
    "--label-column": "label_column",
    "--template": "templates",
    "--min-clips": "min_clips",
}
"""``hf-atr evaluate`` options of ``--zero-shot`` (option -> attribute), refused without it."""


def add_evaluate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``hf-atr evaluate --model DIR --dataset {DIR,synthcaps}``."""
    parser = subparsers.add_parser(
        "evaluate",
        help="retrieval metrics of a model on a dataset (R@k both ways, mAP@c, MRV), or zero-shot "
        "classification metrics",
        description="Encode every clip and caption of one split once and report text-to-audio and "
        "audio-to-text R@1/5/10 and mAP@10 (--map-cutoffs for others, e.g. 10 16) and, with several "
        "--languages, per-language values and MRV. Ties count against the relevant item, so a collapsed "
        "model scores at chance or below. --relevance FILE evaluates with several relevant clips per caption "
        "(DCASE 2025 judgements: a caption,file_name,relevance CSV with --relevance-threshold, or the "
        "query,audio_filenames lists); only the judged captions are queries. --zero-shot classifies the clips "
        "of a labelled split (a `label` column, as ESC-50 and synthcaps have) by prompts of every class "
        "instead: accuracy, balanced accuracy, mAP@10. "
        "--dataset is a DatasetDict (or Dataset) saved with `save_to_disk` in the hf-atr schema "
        "(audio, audio_id, captions, optional translations and label), or `synthcaps` to generate the "
        "embedded synthetic corpus. Each clip is encoded as the model's own protocol reads it (a clip longer "
        "than the feature extractor's window is cut to it, and the cut clips are named in a warning; CLAP "
        "fusion reads the whole clip); --window-pooling embeds long clips window by window and pools them. "
        "Clips that cannot be decoded are left out with their captions (or labels) and reported, unless "
        "--strict. All of it is recorded in the protocol (--output). --report DIR also writes figures and a "
        "report.html (R@k curves, rank histograms, the transport plan of an OT-trained model; for "
        "--zero-shot the confusion matrix and per-class accuracy).",
    )
    parser.add_argument("--model", required=True, help="directory (or Hub id) of a saved model + processor")
    parser.add_argument(
        "--dataset",
        required=True,
        help="a `save_to_disk` directory, `synthcaps`, or a loader name (audiocaps, clotho, esc50, wavcaps, "
        "audiofolder) with --data-dir",
    )
    parser.add_argument(
        "--split",
        default="test",
        help="split of a DatasetDict (default: test); with --zero-shot several, comma-separated (fold2,fold4), or "
        f"`{ALL_SPLITS}` for every split: encoded once, figures per split and over all of them",
    )
    loader = parser.add_argument_group("a corpus read by its loader (--dataset audiocaps|clotho|esc50|...)")
    loader.add_argument(
        "--data-dir", default=None, help="the corpus in its official layout (WavCaps: its JSON file)"
    )
    loader.add_argument(
        "--missing",
        choices=("error", "skip"),
        default=None,
        help="rows whose audio file is missing: stop (the loader's default) or skip them with a warning",
    )
    loader.add_argument(
        "--encoding", default=None, help="text encoding of the metadata files (default: utf-8)"
    )
    parser.add_argument(
        "--num-test", type=int, default=100, help="test clips when --dataset synthcaps (default: 100)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="clips per forward pass (default: 32)")
    parser.add_argument(
        "--window-pooling",
        choices=("mean", "max"),
        default=None,
        help="embed clips longer than the feature extractor's window window by window and pool them "
        "(default: the model's own protocol, one forward pass per clip)",
    )
    _add_windowing_arguments(parser, "--window-pooling")
    parser.add_argument("--strict", action="store_true", help="stop at the first clip that cannot be decoded")
    parser.add_argument(
        "--output",
        default=None,
        help='also write {"metrics": {...}, "protocol": {...}} to this JSON file: the metrics and how they '
        "were obtained (tie rule, split, corpus and official clip count, clips, captions or classes, "
        "languages, relevance file, cutoffs, scoring, window pooling, clips cut to the window, skipped clips)",
    )
    parser.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="also write PNG figures and report.html (figures, metrics table, protocol; opens offline) to DIR; "
        "needs matplotlib: pip install 'hf-atr[plots]'",
    )
    retrieval = parser.add_argument_group("retrieval (the default)")
    retrieval.add_argument(
        "--languages",
        nargs="+",
        default=None,
        help="caption languages (ISO 639-3, e.g. eng fra deu); default English only",
    )
    retrieval.add_argument(
        "--map-cutoffs",
        type=int,
        nargs="+",
        default=None,
        help="cutoffs c of mAP@c, e.g. 10 16 (DCASE 2025 ranks by mAP@16; default: the library's, mAP@10)",
    )
    retrieval.add_argument(
        "--relevance",
        default=None,
        help="relevance judgements of the split (CSV, see docs/corpora.md): several relevant clips per caption",
    )
    retrieval.add_argument(
        "--relevance-threshold",
        type=float,
        default=None,
        help="graded judgements: a pair is relevant when its relevance is >= this value",
    )
    retrieval.add_argument(
        "--relevance-missing",
        choices=("error", "skip"),
        default=None,
        help="a judged caption or file the split lacks: stop (the default, error) or skip it and report",
    )
    zero_shot = parser.add_argument_group("zero-shot classification (--zero-shot)")
    zero_shot.add_argument(
        "--zero-shot",
        action="store_true",
        help="classify each clip into the classes of --label-column by caption prompts, instead of retrieval",
    )
    zero_shot.add_argument(
        "--labels",
        nargs="+",
        default=None,
        help="the classes to choose from (default: the dataset's class list, as the ESC-50 loader records all 50, "
        "else the split's distinct labels, with a warning); every clip's label must be one",
    )
    zero_shot.add_argument(
        "--label-column", default=None, help="the column holding each clip's class (default: label)"
    )
    zero_shot.add_argument(
        "--template",
        dest="templates",
        action="append",
        default=None,
        help="prompt template with {} or {class}; repeat to average several (default: 'This is a sound of {class}.')",
    )
    zero_shot.add_argument(
        "--min-clips",
        type=int,
        default=None,
        help="a split with fewer clips is flagged as too few to measure (default: the number of classes, one clip "
        "per class)",
    )
    parser.set_defaults(handler=run_evaluate)
    return parser


def run_index(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr index``."""
    if args.audio_dir is None and args.captions is None and args.dataset is None:
        raise SystemExit("hf-atr index: give --audio-dir, --captions or --dataset (what to index).")
    if args.dataset is not None and args.audio_dir is not None:
        raise SystemExit("hf-atr index: give either --dataset or --audio-dir, not both.")
    for flag, value in (("--save-every", args.save_every), ("--batch-size", args.batch_size)):
        if value < 1:
            raise SystemExit(f"{flag} must be at least 1, got {value}.")
    audio_dir = None if args.audio_dir is None else Path(args.audio_dir).expanduser()
    if audio_dir is not None and not audio_dir.is_dir():
        raise SystemExit(f"--audio-dir {audio_dir} is not a directory.")
    files = _audio_files(audio_dir) if audio_dir is not None else []
    if audio_dir is not None and not files:
        raise SystemExit(f"No audio files under {audio_dir}.")
    captions = _read_caption_list(args.captions, args.encoding) if args.captions else None
    dataset = _saved_split(Path(args.dataset).expanduser(), args.split)[0] if args.dataset else None
    out = Path(args.out).expanduser()
    from hf_atr.data.audio import AudioDecodeError
    from hf_atr.distributed import rank_and_world_size
    from hf_atr.pipelines.index import IndexFormatError, IndexMismatchError
    from hf_atr.pipelines.indexing import IndexingOptions, IndexingRun, indexed_files
    from hf_atr.pipelines.persistence import SKIPPED_FILENAME, holds_index

    existing = holds_index(out)
    if existing and not (args.append or args.overwrite):
        raise SystemExit(
            f"{out} already holds an index; pass --append to add the files not yet in it, or --overwrite to "
            "replace it."
        )
    with _process_group() as device:
        placement = {} if device is None else {"device": device}
        pipe = load_retrieval_pipeline(
            args.model, index_kind=args.kind, windowing=_windowing(args, args.pooling), **placement
        )
        options = IndexingOptions(
            args.batch_size,
            pool=args.pool,
            strict=args.strict,
            append=args.append,
            save_every=args.save_every,
            save_to=out,
        )
        try:
            run = IndexingRun(pipe, options)  # from the index in --out with --append, else from nothing
        except IndexMismatchError as error:
            raise SystemExit(f"hf-atr index --append: {rebuild_advice(error, args.model)}") from error
        except IndexFormatError as error:
            raise SystemExit(f"hf-atr index --append: {error}") from error
        started = time.perf_counter()
        try:
            if files:
                run.add_files(files, audio_dir)
            if dataset is not None:
                run.add_dataset(dataset)
            if captions is not None:
                run.add_captions(captions.ids, captions.captions)
        except (AudioDecodeError, KeyboardInterrupt) as error:
            if pipe.audio_index is not None or pipe.text_index is not None:
                pipe.save_index(out)
            stopped, then = (
                (
                    f"{error} (--strict)",
                    "repair or remove that file (or leave out --strict to skip such files and list them in "
                    f"{out / SKIPPED_FILENAME}), then run again with --append to add the rest",
                )
                if isinstance(error, AudioDecodeError)
                else ("interrupted", "run again with --append to add the rest")
            )
            raise SystemExit(
                f"hf-atr index: stopped: {stopped}. The {indexed_files(pipe)} file(s) indexed so far are "
                f"saved in {out}; {then}."
            ) from None
        pipe.save_index(out)
        if rank_and_world_size()[0] == 0:
            print(_index_summary(run, out, audio_dir, time.perf_counter() - started))
    return 0


def _index_summary(run: IndexingRun, out: Path, audio_dir: Path | None, seconds: float) -> str:
    """The line ``hf-atr index`` ends with: what ``run`` (an ``IndexingRun``) added, skipped and left out."""
    from hf_atr.distributed import rank_and_world_size
    from hf_atr.pipelines.indexing import indexed_files
    from hf_atr.pipelines.persistence import SKIPPED_FILENAME

    pipe = run.pipe
    parts = []
    if pipe.audio_index is not None and run.audio_given:
        source = f" from {audio_dir}" if audio_dir is not None else ""
        parts.append(
            f"Indexed {indexed_files(pipe) - run.files_before} audio file(s){source} into {out}: "
            f"the index holds {indexed_files(pipe)} file(s) in {len(pipe.audio_index)} entries"
        )
    if pipe.text_index is not None and len(pipe.text_index) > run.captions_before:
        parts.append(
            f"{'indexed' if parts else 'Indexed'} {len(pipe.text_index) - run.captions_before} caption(s) "
            f"into {out} ({len(pipe.text_index)} in the caption index)"
        )
    skipped_now = sum(item.name in run.attempted for item in pipe.skipped)
    if skipped_now:
        parts.append(
            f"skipped {skipped_now} file(s) that cannot be decoded ({len(pipe.skipped)} listed in "
            f"{out / SKIPPED_FILENAME})"
        )
    if run.already:
        parts.append(f"{run.already} already in the index")
    processes = rank_and_world_size()[1]
    on_processes = f" on {processes} processes" if processes > 1 else ""
    return "; ".join(parts) + f"; {seconds:.1f} s{on_processes}."


def _audio_files(audio_dir: Path) -> list[Path]:
    """Every file under ``audio_dir`` with an audio extension (AppleDouble ``._*`` files too: the index
    lists them as skipped), sorted."""
    from hf_atr.data.audio import AUDIO_EXTENSIONS

    return sorted(
        path for path in audio_dir.rglob("*") if path.is_file() and path.suffix.lower() in AUDIO_EXTENSIONS
    )


def _read_caption_list(path: str, encoding: str) -> Any:
    from hf_atr.data.caption_list import read_caption_list

    try:
        return read_caption_list(path, encoding=encoding)
    except (FileNotFoundError, ValueError) as error:  # CorpusFormatError, or an encoding Python does not know
        raise SystemExit(f"hf-atr index --captions: {error}") from error


def run_search(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr search``."""
    given = [name for name in ("query", "audio", "queries") if getattr(args, name) is not None]
    if len(given) != 1:
        raise SystemExit(
            "hf-atr search: give exactly one of a query, --audio FILE or --queries FILE"
            + (f" (got {', '.join(given)})." if given else ".")
        )
    queries = _read_queries(Path(args.queries).expanduser()) if args.queries else None
    if args.audio is not None and not Path(args.audio).expanduser().is_file():
        raise SystemExit(f"--audio {args.audio}: no such file.")
    index_dir = Path(args.index).expanduser()
    if not index_dir.is_dir():
        raise SystemExit(
            f"--index {index_dir}: no such directory; build the index first (`hf-atr index --model ... "
            f"--audio-dir ... --out {args.index}`)."
        )
    pipe = load_retrieval_pipeline(args.model, index_dir=index_dir)
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
    print(f"Sounds like: {args.audio}" if args.audio is not None else f"Query: {args.query!r}")
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


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr evaluate``."""
    from transformers import AutoModel, AutoProcessor

    from hf_atr.metrics.tables import format_metric

    _refuse_options_of_the_other_mode(args)
    windowing = None if args.window_pooling is None else _windowing(args, args.window_pooling)
    dataset, split = _evaluation_split(args)
    model_path = checked_model(args.model)
    model = AutoModel.from_pretrained(model_path)
    processor = AutoProcessor.from_pretrained(model_path)
    if args.zero_shot:
        return _run_zero_shot(args, model, processor, dataset, split, windowing)
    try:
        evaluator = _retrieval_evaluator(args, dataset, split, processor, windowing)
        if args.report:
            try:
                report = evaluator.report(model, args.report)
            except ImportError as error:
                raise SystemExit(f"hf-atr evaluate --report: {error}") from error
            metrics = report.metrics
        else:
            metrics = evaluator(model)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    protocol = evaluator.protocol
    relevance = (
        f"relevance judgements {protocol['relevance_file']}"
        if protocol["relevance"] == "judgements"
        else "each caption's own clip relevant"
    )
    print(
        f"Retrieval on {_evaluated_set(args, split, protocol)}, {protocol['captions']} captions, {relevance}; ties "
        "count against the relevant item); recall and mAP in %, ranks 1-based:"
    )
    width = max(len(name) for name in metrics)
    for name, value in metrics.items():
        print(f"  {name:<{width}}  {format_metric(name, value)}")
    _write_output(args, {"metrics": metrics, "protocol": protocol}, None if not args.report else report.path)
    return 0


def _run_zero_shot(
    args: argparse.Namespace, model: Any, processor: Any, dataset: Any, split: str | None, windowing: Any
) -> int:
    """``hf-atr evaluate --zero-shot``: the figures of every split evaluated (and of all of them), beside chance,
    with the splits too small to measure flagged."""
    from hf_atr.plots.canvas import require_matplotlib

    try:
        evaluator = _zero_shot_evaluator(args, dataset, split, processor, windowing)
        if args.report:
            try:
                require_matplotlib()
            except ImportError as error:
                raise SystemExit(f"hf-atr evaluate --report: {error}") from error
        predictions = evaluator.predict(model)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error
    results = evaluator.split_results(predictions)
    protocol = evaluator.protocol
    print(
        f"Zero-shot classification on {_evaluated_set(args, split, protocol)}, {protocol['classes']} classes from "
        f"{protocol['classes_from']}, templates {protocol['templates']}; a tie with the true class counts against "
        "it); in %, beside chance (the classes ranked at random):"
    )
    print("\n".join(_zero_shot_table(results, protocol["chance"])))
    flagged = [
        f"{name} ({figures['clips']} clips)" for name, figures in results.items() if figures["too_few_clips"]
    ]
    if flagged:
        print(
            f"Too few clips to measure {protocol['classes']} classes (fewer than {protocol['min_clips']}, "
            f"--min-clips): {', '.join(flagged)}; these figures are not a measurement."
        )
    report_path = evaluator.write_report(predictions, args.report).path if args.report else None
    whole = list(results.values())[-1]
    metrics = {name: value for name, value in whole.items() if name not in ("clips", "too_few_clips")}
    _write_output(args, {"metrics": metrics, "splits": results, "protocol": protocol}, report_path)
    return 0


def _zero_shot_table(results: dict[str, dict[str, Any]], chance: dict[str, float]) -> list[str]:
    """The lines of the zero-shot results: a row per metric (and the clip count), a column per split and chance."""
    from hf_atr.evaluation.zero_shot import METRIC_NAMES
    from hf_atr.metrics.tables import format_metric

    def text(name: str, value: float | None) -> str:
        return "—" if value is None else str(value) if name == "clips" else format_metric(name, value)

    names = ["clips", *METRIC_NAMES]
    columns = [*results, "chance"]
    label_width = max(len(name) for name in names)
    widths = [max(len(column), 6) for column in columns]
    lines = [
        "  " + " " * label_width + "".join(f"  {column:>{width}}" for column, width in zip(columns, widths))
    ]
    for name in names:
        cells = [text(name, figures.get(name)) for figures in results.values()]
        cells.append("" if name == "clips" else text(name, chance.get(name)))
        row = f"  {name:<{label_width}}" + "".join(f"  {cell:>{width}}" for cell, width in zip(cells, widths))
        lines.append(row.rstrip())
    return lines


def _evaluated_set(args: argparse.Namespace, split: str | None, protocol: dict[str, Any]) -> str:
    """``"esc50 (fold3, 1 clips"``: what was evaluated, for the first line of the results (its parenthesis is
    closed by the caller)."""
    skipped = f", {len(protocol['skipped_clips'])} clip(s) skipped" if protocol["skipped_clips"] else ""
    return f"{args.dataset} ({split or 'saved Dataset'}, {protocol['clips']} clips{skipped}"


def _write_output(args: argparse.Namespace, payload: dict[str, Any], report_path: Path | None) -> None:
    """Write ``--output`` and say where it and the ``--report`` page are."""
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(payload, indent=2))
        print(f"Metrics and protocol written to {args.output}")
    if report_path is not None:
        print(f"Report written to {report_path} (figures beside it)")


def _refuse_options_of_the_other_mode(args: argparse.Namespace) -> None:
    """Retrieval options with ``--zero-shot``, zero-shot options without it, and a window length or hop
    without ``--window-pooling`` end the command naming them."""
    if args.window_pooling is None and (args.window_seconds is not None or args.hop_seconds is not None):
        raise SystemExit("--window-seconds / --hop-seconds apply with --window-pooling mean|max.")
    options = RETRIEVAL_OPTIONS if args.zero_shot else ZERO_SHOT_OPTIONS
    misplaced = [option for option, name in options.items() if getattr(args, name) is not None]
    if misplaced:
        names = ", ".join(misplaced[:-1]) + (" and " if len(misplaced) > 1 else "") + misplaced[-1]
        target = "retrieval, not to --zero-shot" if args.zero_shot else "--zero-shot"
        raise SystemExit(f"hf-atr evaluate: {names} appl{'y' if len(misplaced) > 1 else 'ies'} to {target}.")


def _retrieval_evaluator(
    args: argparse.Namespace, dataset: Any, split: str | None, processor: Any, windowing: Any
) -> Any:
    from hf_atr.evaluation.evaluator import RetrievalEvaluator
    from hf_atr.metrics.retrieval import DEFAULT_MAP_CUTOFFS

    missing = {} if args.relevance_missing is None else {"relevance_missing": args.relevance_missing}
    return RetrievalEvaluator(
        dataset,
        processor,
        languages=args.languages,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
        relevance=args.relevance,
        relevance_threshold=args.relevance_threshold,
        map_cutoffs=args.map_cutoffs or DEFAULT_MAP_CUTOFFS,
        windowing=windowing,
        strict=args.strict,
        **missing,
    )


def _zero_shot_evaluator(
    args: argparse.Namespace, dataset: Any, split: str | None, processor: Any, windowing: Any
) -> Any:
    from hf_atr.evaluation.zero_shot import LABEL_COLUMN, ZeroShotEvaluator

    return ZeroShotEvaluator(
        dataset,
        processor,
        labels=args.labels,
        label_column=args.label_column or LABEL_COLUMN,
        templates=args.templates,
        batch_size=args.batch_size,
        show_progress=True,
        split=split,
        windowing=windowing,
        strict=args.strict,
        min_clips=args.min_clips,
    )


def _windowing(args: argparse.Namespace, pooling: str) -> Any:
    from hf_atr.windowing import Windowing

    try:
        return Windowing(window_seconds=args.window_seconds, hop_seconds=args.hop_seconds, pooling=pooling)
    except ValueError as error:
        raise SystemExit(f"hf-atr {args.command}: {error}") from error


@contextlib.contextmanager
def _process_group() -> Iterator[Any]:
    """Under ``accelerate launch`` / ``torchrun`` (``WORLD_SIZE`` > 1): join the process group (gloo on
    CPU-only machines, where accelerate's default would start independent processes) and yield this
    process's device; alone, yield ``None`` (the pipeline's default device)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield None
        return
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    try:
        yield state.device
    finally:
        state.destroy_process_group()


def _evaluation_split(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The dataset to evaluate and its split name (``None`` for a saved single ``Dataset``); with several splits
    (``--zero-shot``), ``{split: rows}`` in the order named and their names joined by ``+``."""
    if args.dataset == SYNTHCAPS:
        from hf_atr.data.schema import LANGUAGES
        from hf_atr.data.synthcaps import load_synthcaps

        languages = args.languages or ["eng"]
        unknown = [language for language in languages if language not in LANGUAGES]
        if unknown:
            raise SystemExit(f"synthcaps has no captions in {unknown}; choose from {list(LANGUAGES)}.")
        synthcaps = load_synthcaps(num_train=0, num_validation=0, num_test=args.num_test, languages=languages)
        return synthcaps["test"], "test"
    from datasets import DatasetDict

    from hf_atr.data.corpora import CORPUS_LOADERS

    names = _requested_splits(args)
    if args.dataset in CORPUS_LOADERS:
        return _chosen_splits(_loaded_corpus(args, names), names, f"{args.dataset} in {args.data_dir}")
    given = [flag for flag, value in (("--data-dir", args.data_dir), ("--missing", args.missing),
                                      ("--encoding", args.encoding)) if value is not None]  # fmt: skip
    if given:
        raise SystemExit(
            f"hf-atr evaluate: {', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to a corpus read by its "
            f"loader (--dataset "
            f"{'|'.join(CORPUS_LOADERS)}); --dataset {args.dataset} is read as a saved dataset."
        )
    path = Path(args.dataset).expanduser()
    loaded = _saved_dataset(path)
    if isinstance(loaded, DatasetDict):
        return _chosen_splits(loaded, names, str(path))
    return loaded, None


def _requested_splits(args: argparse.Namespace) -> list[str] | None:
    """The split names ``--split`` gives (``None``: every split); several apply to ``--zero-shot`` only."""
    if args.split == ALL_SPLITS:
        names = None
    else:
        names = list(dict.fromkeys(name.strip() for name in args.split.split(",") if name.strip()))
        if not names:
            raise SystemExit(f"hf-atr evaluate: --split {args.split!r} names no split.")
    if not args.zero_shot and (names is None or len(names) > 1):
        raise SystemExit(
            f"hf-atr evaluate: several splits (--split {args.split}) apply to --zero-shot; retrieval evaluates one "
            "split, whose clips are the gallery of its captions."
        )
    return names


def _chosen_splits(corpus: Any, names: list[str] | None, where: str) -> tuple[Any, str]:
    """The split named (its rows, its name) or the splits named (``{split: rows}``, their names joined by ``+``);
    ``None``: every split of ``corpus``."""
    names = list(corpus) if names is None else names
    absent = [name for name in names if name not in corpus]
    if absent:
        raise SystemExit(
            f"hf-atr evaluate: --split: {where} has no split(s) {absent}; its splits: {sorted(corpus)}."
        )
    if len(names) == 1:
        return corpus[names[0]], names[0]
    return {name: corpus[name] for name in names}, "+".join(names)


def _loaded_corpus(args: argparse.Namespace, names: list[str] | None) -> Any:
    """The corpus that loader ``--dataset`` reads from ``--data-dir``: only the splits named, where the loader can
    choose (``splits``, or ESC-50's ``folds``)."""
    from hf_atr.data.corpora import load_corpus, loader_options
    from hf_atr.data.esc50 import esc50_fold

    if args.data_dir is None:
        raise SystemExit(
            f"hf-atr evaluate: --dataset {args.dataset} reads the corpus in --data-dir DIR; give it."
        )
    options: dict[str, Any] = {"missing": args.missing, "encoding": args.encoding}
    try:
        if names is not None and "splits" in loader_options(args.dataset):
            options["splits"] = names
        elif names is not None and "folds" in loader_options(args.dataset):
            options["folds"] = [esc50_fold(name) for name in names]
        return load_corpus(args.dataset, args.data_dir, **options)
    # CorpusFormatError and MetadataEncodingError are ValueErrors, as is a name that is not an ESC-50 fold.
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"hf-atr evaluate: {error}") from error


def _saved_dataset(path: Path) -> Any:
    """The ``DatasetDict`` or ``Dataset`` saved in ``path``."""
    from datasets import load_from_disk

    if not path.is_dir():
        raise SystemExit(
            f"--dataset {path} is neither `synthcaps` nor a directory saved with `save_to_disk`."
        )
    return load_from_disk(str(path))


def _saved_split(path: Path, split: str) -> tuple[Any, str | None]:
    """Split ``split`` of a DatasetDict saved in ``path`` (or the saved Dataset itself, split ``None``)."""
    from datasets import DatasetDict

    loaded = _saved_dataset(path)
    if isinstance(loaded, DatasetDict):
        if split not in loaded:
            raise SystemExit(f"{path} has no split {split!r}; splits: {sorted(loaded)}.")
        return loaded[split], split
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
        help="generate synthcaps, train a tiny model, evaluate, save, index and search (offline, CPU, a few minutes)",
        description="The main job: generate the embedded synthcaps dataset, train a tiny random-init AST + BERT "
        "dual encoder, evaluate retrieval in 8 languages, save the model, write the test clips and their index "
        "(for hf-atr search and hf-atr serve) and answer example text queries.",
    )
    demo.add_argument(
        "--output-dir",
        default="outputs/demo",
        help="where metrics.json, model/, audio/ (the test clips) and index/ (their index) are written",
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
    demo.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the run (default: 1, as README's figures were measured; another count sums in "
        "another order and gives slightly different figures)",
    )
    demo.set_defaults(handler=_demo)
    add_train_parser(commands)
    add_index_parser(commands)
    add_search_parser(commands)
    add_evaluate_parser(commands)
    add_serve_parser(commands)
    add_build_dataset_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "loads_model", True):  # build-dataset loads none: it imports no transformers
        _quiet_transformers_progress_bars()
    return args.handler(args)


def _quiet_transformers_progress_bars() -> None:
    """Turn off transformers' own progress bars ("Loading weights", "Writing model shards"), which every command
    would print for loading or saving a model in a fraction of a second. transformers' switch turns off
    huggingface_hub's bars too: those (a model's first download from the Hub) are left as they were."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging

    hub_bars_shown = not are_progress_bars_disabled()
    logging.disable_progress_bar()
    if hub_bars_shown:
        enable_progress_bars()


if __name__ == "__main__":
    sys.exit(main())
