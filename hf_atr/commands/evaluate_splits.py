"""Which rows ``hf-atr evaluate`` evaluates: the split (or, ``--zero-shot``, the splits) of a saved dataset,
``synthcaps`` or a corpus read by its loader, checked against what ``--split`` names, and how the results name them.

Everything heavy (datasets) is imported inside the functions, so building the parser stays light."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import saved_dataset

SYNTHCAPS = "synthcaps"
"""``hf-atr evaluate --dataset synthcaps``: the embedded synthetic corpus, generated."""
ALL_SPLITS = "all"
"""``hf-atr evaluate --zero-shot --split all``: every split of the dataset."""


def evaluation_split(args: argparse.Namespace) -> tuple[Any, str | None]:
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


def evaluated_set(args: argparse.Namespace, split: str | None, protocol: dict[str, Any]) -> str:
    """``"esc50 (fold3, 1 clips"``: what was evaluated, for the first line of the results (its parenthesis is
    closed by the caller)."""
    skipped = f", {len(protocol['skipped_clips'])} clip(s) skipped" if protocol["skipped_clips"] else ""
    return f"{args.dataset} ({split or 'saved Dataset'}, {protocol['clips']} clips{skipped}"


__all__ = [
    "ALL_SPLITS",
    "SYNTHCAPS",
    "evaluated_set",
    "evaluation_split",
]
