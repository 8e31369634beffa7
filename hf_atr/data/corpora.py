"""Corpora by name: the loaders behind one call, split selection and a held-out test split.

``load_corpus("clotho", "~/data/clotho", missing="skip")`` calls :func:`~hf_atr.data.clotho.load_clotho`;
``load_corpus("runs/clotho_ds")`` reads a ``DatasetDict`` saved with ``save_to_disk``. This is how
``hf-atr train`` reads its ``--dataset`` and ``--test_dataset``.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, concatenate_datasets, load_from_disk

from hf_atr.data.audio_text_folder import load_audio_text_folder
from hf_atr.data.audiocaps import load_audiocaps
from hf_atr.data.clotho import load_clotho
from hf_atr.data.esc50 import load_esc50
from hf_atr.data.schema import class_list, corpus_provenance, record_filter, set_corpus_provenance
from hf_atr.data.wavcaps import load_wavcaps

CORPUS_LOADERS: dict[str, Callable[..., DatasetDict]] = {
    "audiocaps": load_audiocaps,
    "clotho": load_clotho,
    "esc50": load_esc50,
    "wavcaps": load_wavcaps,
    "audiofolder": load_audio_text_folder,
}
"""Loader name -> loader. Each takes the corpus location first (WavCaps: its JSON file) and options by keyword."""

SAVED_SPLIT = "train"
"""The split name a saved single ``Dataset`` (not a ``DatasetDict``) gets."""

HELD_OUT_FILTER = "held_out_test_split"
"""``name`` of the provenance records :func:`hold_out_test_split` writes."""


def loader_options(name: str) -> list[str]:
    """The keyword options of loader ``name`` (everything but the corpus location)."""
    return list(inspect.signature(CORPUS_LOADERS[name]).parameters)[1:]


def load_corpus(
    source: str | os.PathLike, data_dir: str | os.PathLike | None = None, /, **options: Any
) -> DatasetDict:
    """A corpus as a ``DatasetDict`` in the shared schema.

    Args:
        source: a loader name (:data:`CORPUS_LOADERS`: ``audiocaps``, ``clotho``, ``esc50``, ``wavcaps``,
            ``audiofolder``), or a directory written by ``save_to_disk`` (a ``DatasetDict``, or a ``Dataset``,
            which becomes the split ``train``).
        data_dir: the corpus location for a loader (the directory; WavCaps: its JSON file).
        options: the loader's keyword options (``audio_dir``, ``missing``, ``encoding``, ``splits``, WavCaps'
            ``source``, ...); ``None`` values are left out, so the loader's default applies. ``source`` and
            ``data_dir`` are positional-only, so that a loader option may share their names.

    Raises:
        ValueError: an unknown loader or option, a loader without ``data_dir``, options for a saved dataset,
            or a ``source`` that is neither a loader name nor a directory.
    """
    options = {key: value for key, value in options.items() if value is not None}
    name = str(source)
    if name in CORPUS_LOADERS:
        if data_dir is None:
            location = "its JSON file" if name == "wavcaps" else "its directory"
            raise ValueError(f"Loader {name!r} needs the corpus location ({location}) as data_dir.")
        unknown = sorted(set(options) - set(loader_options(name)))
        if unknown:
            raise ValueError(
                f"Loader {name!r} takes no option(s) {unknown}; its options: {loader_options(name)}."
            )
        return CORPUS_LOADERS[name](data_dir, **options)
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"{name!r} is neither a loader ({', '.join(CORPUS_LOADERS)}) nor a directory saved with save_to_disk."
        )
    if options or data_dir is not None:
        given = sorted([*options, *(["data_dir"] if data_dir is not None else [])])
        raise ValueError(f"{path} is a saved dataset; loader options {given} do not apply to it.")
    loaded = load_from_disk(str(path))
    return loaded if isinstance(loaded, DatasetDict) else DatasetDict({SAVED_SPLIT: loaded})


def combine_splits(corpus: DatasetDict, splits: Sequence[str], role: str = "splits") -> Dataset:
    """The named splits of ``corpus`` as one ``Dataset`` (concatenated in order when several).

    The provenance of a concatenation lists each split's (:func:`~hf_atr.data.schema.corpus_provenance`).

    Args:
        role: what the splits are for, named in the error (e.g. ``"--train_splits"``).

    Raises:
        ValueError: a split ``corpus`` does not have, or no split named.
    """
    if not splits:
        raise ValueError(f"{role}: name at least one split; the dataset has {sorted(corpus)}.")
    absent = [split for split in splits if split not in corpus]
    if absent:
        raise ValueError(f"{role}: the dataset has no split(s) {absent}; its splits: {sorted(corpus)}.")
    if len(splits) == 1:
        return corpus[splits[0]]
    return concatenate_datasets([corpus[split] for split in splits])


def hold_out_test_split(dataset: Dataset, size: float, seed: int = 0) -> tuple[Dataset, Dataset]:
    """Split ``dataset`` into ``(train, test)`` clips at random (seeded), recording it in both provenances.

    Whole clips are held out (every caption of a test clip stays out of training). The training part's
    provenance gets a ``held_out_test_split`` filter record (``held_out``, ``clips_before``, ``seed``,
    ``clips_after``); the test part gets a provenance of its own, with the same record: split ``test``, layout
    ``held out at random from `<split>` (seed <seed>)``, ``official_clips`` ``None`` (no official release has
    this split), ``classes`` the source's class list (``None`` without one) and ``held_out_from`` the source's
    provenance. The input's provenance is unchanged.

    Args:
        size: a fraction in (0, 1), or a whole number of clips (>= 1).

    Raises:
        ValueError: a size that leaves no training or no test clip.
    """
    clips = len(dataset)
    if 0 < size < 1:
        held_out = math.ceil(size * clips)
    elif size >= 1 and float(size).is_integer():
        held_out = int(size)
    else:
        held_out = 0
    if not 0 < held_out < clips:
        raise ValueError(
            f"test size {size!r} must be a fraction in (0, 1) or a whole number of clips that leaves at least one "
            f"clip for training and one for testing (the dataset has {clips} clips)."
        )
    parts = dataset.train_test_split(test_size=held_out, shuffle=True, seed=seed)
    train, test = parts["train"], parts["test"]
    record = {"name": HELD_OUT_FILTER, "held_out": held_out, "clips_before": clips, "seed": seed}
    record_filter(train, {**record, "clips_after": len(train)})
    set_corpus_provenance(
        test, _held_out_provenance(corpus_provenance(dataset), {**record, "clips_after": len(test)})
    )
    return train, test


def _held_out_provenance(source: dict[str, Any] | None, record: dict[str, Any]) -> dict[str, Any]:
    parts = (source or {}).get("concatenated") or [source or {}]
    corpus = " + ".join(dict.fromkeys(part["corpus"] for part in parts if part.get("corpus"))) or None
    splits = ", ".join(dict.fromkeys(f"`{part['split']}`" for part in parts if part.get("split")))
    return {
        "corpus": corpus,
        "layout": f"held out at random from {splits or 'the training data'} (seed {record['seed']})",
        "split": "test",
        "corpus_split": None,
        "official_release": None,
        "official_clips": None,
        "clips_found": record["clips_after"],
        "skipped": None,
        "classes": class_list(source),
        "held_out_from": source,
        "filters": [record],
    }


__all__ = [
    "CORPUS_LOADERS",
    "combine_splits",
    "hold_out_test_split",
    "load_corpus",
    "loader_options",
]
