"""The data of ``hf-atr train``: its training, validation and test splits from a loader, a saved dataset, a moment
dataset or shards; the language check; the overlap filter of the training clips against the test clips.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, IterableDataset, load_from_disk
from transformers.utils import logging

from ...data.corpora import CORPUS_LOADERS, combine_splits, hold_out_test_split, load_corpus
from ...data.overlap import read_wavcaps_blocklist, remove_overlap
from ...data.schema import ENGLISH, describe_dataset
from ...data.shards import load_audio_text_shards
from ..moment_data import is_moment_source, load_moment_corpus
from .data_arguments import DataArguments

logger = logging.get_logger(__name__)


@dataclass
class TrainingData:
    """The clips of each role (raw audio, shared schema) and the name of each source; ``train`` is a stream
    (``datasets.IterableDataset``) when the training data are shards."""

    train: Dataset | IterableDataset
    test: Dataset
    validation: Dataset | None
    train_name: str
    test_name: str
    held_out: bool


def load_training_data(
    data: DataArguments, *, with_validation: bool, seed: int, train_shards: Sequence[str] = ()
) -> TrainingData:
    """Load the corpus, pick the splits and filter the training clips (see :class:`DataArguments`).

    With ``train_shards`` (WebDataset or parquet files or glob patterns) the training clips are those shards,
    streamed (:func:`~hf_atr.data.shards.load_audio_text_shards`), and the corpus gives the test (and
    validation) split only.

    Raises:
        ValueError: an absent split, a test split that is also trained on, a language the data lacks, no way
            to get a test split (the message lists the ways), or with shards an option a stream cannot honour
            (a test split held out of the training clips, the overlap filter).
    """
    if train_shards:
        _check_stream_options(data)
    is_loader = data.dataset in CORPUS_LOADERS
    options = {"audio_dir": data.audio_dir, **data.loader_options}
    if is_loader:
        options.update(missing=data.missing, encoding=data.encoding)
    corpus = (
        load_moment_corpus(data.dataset, data.data_dir, audio_dir=data.audio_dir, missing=data.missing)
        if is_moment_source(data.dataset)
        else load_corpus(data.dataset, data.data_dir, **options)
    )
    if train_shards:
        translated = [language for language in data.languages if language != ENGLISH]
        train = load_audio_text_shards(list(train_shards), translation_languages=translated)
    else:
        if data.test_dataset is None and data.test_split in data.train_splits:
            raise ValueError(
                f"--test_split {data.test_split!r} is also in --train_splits {data.train_splits}."
            )
        train = combine_splits(corpus, data.train_splits, "--train_splits")
    held_out = False
    if data.test_dataset is not None:
        test_options = (
            {"missing": data.missing, "encoding": data.encoding}
            if data.test_dataset in CORPUS_LOADERS
            else {}
        )
        test_corpus = (
            load_moment_corpus(data.test_dataset, data.test_data_dir, missing=data.missing)
            if is_moment_source(data.test_dataset)
            else load_corpus(data.test_dataset, data.test_data_dir, **test_options)
        )
        test = combine_splits(test_corpus, [data.test_split], "--test_split of --test_dataset")
        test_name = data.test_dataset
    elif data.test_split in corpus:
        if data.test_size is not None:
            raise ValueError(
                f"The dataset has a {data.test_split!r} split; --test_size holds a test split out of the training "
                "clips only when it has none."
            )
        test, test_name = corpus[data.test_split], data.dataset
    elif data.test_size is not None:
        train, test = hold_out_test_split(train, data.test_size, seed=seed)
        test_name, held_out = data.dataset, True
    else:
        raise ValueError(
            f"The dataset has no split {data.test_split!r} (its splits: {sorted(corpus)}). Name one with "
            "--test_split, hold out training clips with --test_size (e.g. 0.1), or take the test split of "
            "another dataset with --test_dataset."
        )
    validation = None
    if with_validation:
        if data.validation_split not in corpus:
            raise ValueError(
                f"--eval_strategy evaluates the {data.validation_split!r} split during training, which the dataset "
                f"lacks (its splits: {sorted(corpus)}); name one with --validation_split or pass --eval_strategy no."
            )
        validation = corpus[data.validation_split]
    for role, dataset in (("training", train), ("test", test), ("validation", validation)):
        if dataset is not None:
            check_languages(dataset, data.languages, role)
    if train_shards:
        train_name = f"shards {', '.join(train_shards)}"
    else:
        train = _filter_overlap(train, test, data)
        train_name = data.dataset if is_loader else Path(data.dataset).name
    return TrainingData(
        train=train,
        test=test,
        validation=validation,
        train_name=train_name,
        test_name=describe_dataset(test, test_name),
        held_out=held_out,
    )


def _check_stream_options(data: DataArguments) -> None:
    """Refuse the data options that need the training clips at hand, which a stream of shards does not give."""
    if data.test_size is not None:
        raise ValueError(
            "--test_size holds a test split out of the training clips, which --train_shards streams: take the "
            "test split from --dataset (--test_split) or from --test_dataset."
        )
    asked = [
        option
        for option, given in (
            ("--exclude_test_overlap", data.exclude_test_overlap),
            ("--exclude_overlap_with", bool(data.exclude_overlap_with)),
            ("--blocklist", data.blocklist is not None),
        )
        if given
    ]
    if asked:
        raise ValueError(
            f"The overlap filter ({', '.join(asked)}) does not run on streamed shards. Filter the corpus before "
            "writing them (the datasets_scripts builders' --exclude-overlap-with / --blocklist, then "
            "datasets_scripts/write_shards.py), then pass --exclude_test_overlap false."
        )


def check_languages(dataset: Dataset | IterableDataset, languages: Sequence[str], role: str) -> None:
    """Raise ``ValueError`` when ``dataset`` has no captions in one of ``languages`` (English is ``captions``)."""
    translated = (dataset.features or {}).get("translations")
    available = [ENGLISH, *(translated.keys() if isinstance(translated, dict) else [])]
    absent = [language for language in languages if language not in available]
    if absent:
        raise ValueError(
            f"The {role} data has no captions in {absent}; its languages: {available} (add translations with "
            "hf_atr.data.load_translations and save the DatasetDict)."
        )


def _filter_overlap(train: Dataset, test: Dataset, data: DataArguments) -> Dataset:
    references = [test] if data.exclude_test_overlap else []
    references += [load_from_disk(str(Path(path).expanduser())) for path in data.exclude_overlap_with]
    blocked = read_wavcaps_blocklist(data.blocklist) if data.blocklist else set()
    if not references and not blocked:
        return train
    by = list(data.overlap_by)
    without_audio = [dataset for dataset in (train, *references) if "audio" not in dataset.column_names]
    if "content" in by and without_audio:
        by.remove("content")
        logger.warning(
            f"overlap filter: {len(without_audio)} of the datasets compared hold features and no audio; matching "
            f"{'by source id only' if by else 'is not possible, the training clips are not filtered'}."
        )
        if not by:
            return train
    filtered, report = remove_overlap(train, references, by=by, exclude_source_ids=blocked)
    if report.kept == 0:
        raise ValueError(f"No training clip is left: {report.summary()}")
    return filtered


__all__ = ["TrainingData", "check_languages", "load_training_data"]
