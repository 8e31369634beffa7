"""``hf-atr evaluate``: retrieval metrics (R@k both ways, mAP@c, MRV) or zero-shot classification metrics of a model
on one split (or, zero-shot, several) of a saved dataset, ``synthcaps`` or a corpus read by its loader, with the
protocol (``--output``) and a report (``--report``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import (
    add_dtype_argument,
    add_windowing_arguments,
    checked_model,
    model_dtype_arguments,
    parsed_windowing,
    saved_dataset,
    write_evaluation_output,
)
from .evaluate_moments import add_moment_evaluation_arguments, run_moment_evaluation

SYNTHCAPS = "synthcaps"

ALL_SPLITS = "all"
"""``hf-atr evaluate --zero-shot --split all``: every split of the dataset."""


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
    add_dtype_argument(parser)
    parser.add_argument(
        "--window-pooling",
        choices=("mean", "max"),
        default=None,
        help="embed clips longer than the feature extractor's window window by window and pool them "
        "(default: the model's own protocol, one forward pass per clip)",
    )
    add_windowing_arguments(parser, "--window-pooling")
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
    add_moment_evaluation_arguments(parser)
    parser.set_defaults(handler=run_evaluate)
    return parser


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``hf-atr evaluate``."""
    if args.moments:
        return run_moment_evaluation(args)
    from transformers import AutoModel, AutoProcessor

    from hf_atr.metrics.tables import format_metric

    _refuse_options_of_the_other_mode(args)
    windowing = None if args.window_pooling is None else parsed_windowing(args, args.window_pooling)
    dataset, split = _evaluation_split(args)
    model_path = checked_model(args.model)
    model = AutoModel.from_pretrained(model_path, **model_dtype_arguments(args))
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
    write_evaluation_output(
        args, {"metrics": metrics, "protocol": protocol}, None if not args.report else report.path
    )
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
    write_evaluation_output(args, {"metrics": metrics, "splits": results, "protocol": protocol}, report_path)
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
    from hf_atr.metrics.ranks import DEFAULT_MAP_CUTOFFS

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
    loaded = saved_dataset(path)
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


__all__ = [
    "ALL_SPLITS",
    "RETRIEVAL_OPTIONS",
    "SYNTHCAPS",
    "ZERO_SHOT_OPTIONS",
    "add_evaluate_parser",
    "run_evaluate",
]
