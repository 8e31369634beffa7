"""The data of ``hf-atr train``: the corpus, its splits, its filters and its features (``DataArguments``, a
dataclass that transformers' ``HfArgumentParser`` reads, :mod:`~hf_atr.commands.train.train_arguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_atr.data.language_codes import normalize_language_code

from ...data.corpora import CORPUS_LOADERS
from ...data.corpus_utils import MISSING_POLICIES
from ...data.overlap import OVERLAP_CRITERIA
from ...data.schema import ENGLISH
from .option_values import json_object

FEATURES_CACHE_SUBDIRECTORY = "hf_atr_features"
"""Default home of the extracted features: this folder of the datasets cache (``HF_DATASETS_CACHE``)."""


@dataclass
class DataArguments:
    """The corpus, its splits, its filters and its features."""

    _argument_group_name = "data"

    dataset: str = field(
        metadata={"help": f"a loader ({', '.join(CORPUS_LOADERS)}) with --data_dir, or a DatasetDict directory "
                  "saved with save_to_disk; for moment training, moments with --data_dir (a folder of "
                  "<corpus>_<split>_release.jsonl files) or one such .jsonl file (docs/moments.md)"},
    )  # fmt: skip
    data_dir: str | None = field(
        default=None, metadata={"help": "the corpus directory for a loader (wavcaps: its JSON file)"}
    )
    audio_dir: str | None = field(
        default=None, metadata={"help": "the loader's audio_dir, when apart from data_dir"}
    )
    missing: str = field(
        default="error",
        metadata={"help": "a missing or unreadable clip or malformed row: error (stop, naming it) or skip "
                  "(drop it and report)"},
    )  # fmt: skip
    encoding: str = field(default="utf-8", metadata={"help": "text encoding of the metadata files"})
    loader_options: dict | str | None = field(
        default=None,
        metadata={"help": 'further loader options as a JSON object, e.g. \'{"filename_pattern": "{youtube_id}.wav"}\' '
                  '(audiocaps), \'{"source": "FreeSound"}\' (wavcaps)'},
    )  # fmt: skip
    train_splits: list[str] = field(
        default_factory=lambda: ["train"],
        metadata={"help": "splits trained on, concatenated (esc50: e.g. fold1 fold2 fold3 fold4)"},
    )
    validation_split: str = field(
        default="validation",
        metadata={"help": "split evaluated during training when --eval_strategy is not 'no'"},
    )
    test_split: str = field(
        default="test", metadata={"help": "split evaluated at the end (esc50: e.g. fold5)"}
    )
    test_size: float | None = field(
        default=None,
        metadata={"help": "when the dataset has no test split: hold out this fraction (< 1) or number (>= 1) of "
                  "training clips as the test split, at random (--seed); they are saved to OUTPUT_DIR/test_split"},
    )  # fmt: skip
    test_dataset: str | None = field(
        default=None,
        metadata={"help": "take the test split from this dataset instead (a loader with --test_data_dir, or a "
                  "saved DatasetDict), e.g. train on wavcaps, test on clotho"},
    )  # fmt: skip
    test_data_dir: str | None = field(
        default=None, metadata={"help": "the corpus directory of --test_dataset"}
    )
    languages: list[str] = field(
        default_factory=lambda: [ENGLISH],
        metadata={"help": "caption languages trained and evaluated on (ISO 639-1 or 639-3: eng fra ja ...); "
                  "languages other than English come from the dataset's translations"},
    )  # fmt: skip
    exclude_test_overlap: bool = field(
        default=True,
        metadata={"help": "remove training clips that are clips of the test split (overlap filter, "
                  "--overlap_by); the card says what it removed"},
    )  # fmt: skip
    exclude_overlap_with: list[str] = field(
        default_factory=list,
        metadata={"help": "more reference datasets (save_to_disk directories, e.g. Clotho and AudioCaps test) "
                  "whose clips are removed from the training data"},
    )  # fmt: skip
    blocklist: str | None = field(
        default=None,
        metadata={"help": "a WavCaps block list JSON: its Freesound and YouTube ids are removed"},
    )
    overlap_by: list[str] = field(
        default_factory=lambda: list(OVERLAP_CRITERIA),
        metadata={
            "help": "match clips by source_id and/or content (decoded-PCM hash; reads the training audio)"
        },
    )
    feature_backend: str = field(
        default="transformers",
        metadata={
            "help": "audio features by the feature extractor (transformers) or its batched torch twin (torch)"
        },
    )
    feature_batch_size: int = field(default=32, metadata={"help": "clips per feature-extraction batch"})
    features_cache_dir: str | None = field(
        default=None,
        metadata={"help": "where extracted features are kept and reused (unset: "
                  f"$HF_DATASETS_CACHE/{FEATURES_CACHE_SUBDIRECTORY})"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("train_splits", "languages", "exclude_overlap_with", "overlap_by"):
            if isinstance(getattr(self, name), str):  # a YAML scalar for a list
                setattr(self, name, [getattr(self, name)])
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"--missing must be one of {list(MISSING_POLICIES)}, got {self.missing!r}.")
        from ...processing_atr import (
            FEATURE_BACKENDS,
        )  # the processor's module, imported once the flags parse

        if self.feature_backend not in FEATURE_BACKENDS:
            raise ValueError(
                f"--feature_backend must be one of {list(FEATURE_BACKENDS)}, got {self.feature_backend!r}."
            )
        unknown = sorted(set(self.overlap_by) - set(OVERLAP_CRITERIA))
        if unknown or not self.overlap_by:
            raise ValueError(f"--overlap_by {self.overlap_by}: choose from {list(OVERLAP_CRITERIA)}.")
        self.loader_options = json_object(self.loader_options, "--loader_options")
        self.languages = [normalize_language_code(code) for code in self.languages]


__all__ = ["FEATURES_CACHE_SUBDIRECTORY", "DataArguments"]
