"""The ``moments`` row of ``hf-atr build-dataset``: captioned clips of a saved ``DatasetDict`` laid over long
background recordings (:func:`hf_atr.data.moment_synthesis.synthesize_moments`), the overlap filter applied to the
clips first."""

from __future__ import annotations

import argparse

from datasets import DatasetDict

from hf_atr.commands.build_dataset.builder_options import OVERLAP_OPTIONS, option, path_argument
from hf_atr.commands.build_dataset.builder_rows import Builder
from hf_atr.commands.build_dataset.dataset_output import apply_overlap_arguments, exit_on_input_error
from hf_atr.data.corpora import load_corpus
from hf_atr.data.corpus_utils import MISSING_POLICIES, expand_path
from hf_atr.data.moment_synthesis import DEFAULT_SAMPLING_RATE, synthesize_moments


def build_moments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run of ``moments``: the source split, without the clips of the overlap filter's references, laid over the
    backgrounds (:func:`hf_atr.data.moment_synthesis.synthesize_moments`)."""
    with exit_on_input_error(parser):
        source = load_corpus(str(args.dataset_dir))
        if args.source_split not in source:
            parser.error(f"{args.dataset_dir} has no split {args.source_split!r}; it has {sorted(source)}.")
        clips, summaries = apply_overlap_arguments(
            DatasetDict({args.source_split: source[args.source_split]}), args
        )
        for summary in summaries.values():
            print(f"{args.source_split}: {summary}")
        report = synthesize_moments(
            clips[args.source_split],
            args.backgrounds,
            args.output_dir,
            args.num_recordings,
            duration_range=tuple(args.duration),
            events_range=tuple(args.events),
            snr_db=tuple(args.snr_db),
            sampling_rate=args.sampling_rate,
            seed=args.seed,
            split=args.split,
            missing=args.missing,
        )
    print(report.summary())
    for problem in report.skipped:
        print(f"  skipped {problem}")
    return 0


MOMENTS_BUILDER = Builder(
    help="synthesise moment-retrieval data (Clotho-Moment style): captioned clips over long backgrounds",
    description="Lay the captioned clips of a saved shared-schema DatasetDict over background recordings at random, "
    "non-overlapping times (seeded, SNR range, RMS levels) and write the recordings (<output-dir>/audio/*.flac) and "
    "their moments (<output-dir>/moments_<split>_release.jsonl, readable by hf_atr.load_moments).",
    arguments=(
        path_argument(
            "dataset_dir", "A DatasetDict saved with save_to_disk (e.g. by build_clotho.py): the events."
        ),
        option(
            "--source-split",
            default="train",
            help="Its split whose clips become events (default: train).",
        ),
        option(
            "--backgrounds",
            nargs="+",
            type=expand_path,
            required=True,
            metavar="PATH",
            help="Background audio files or folders; recordings shorter than a synthesised one are joined.",
        ),
        option("--output-dir", type=expand_path, required=True, help="Folder for audio/ and the JSONL file."),
        option("--split", default="train", help="Split named in the JSONL file name: train, val or test."),
        option("--num-recordings", type=int, default=100, help="Recordings to synthesise (default: 100)."),
        option(
            "--duration",
            type=float,
            nargs=2,
            default=[30.0, 300.0],
            metavar=("MIN", "MAX"),
            help="Shortest and longest recording in seconds (default: 30 300).",
        ),
        option(
            "--events",
            type=int,
            nargs=2,
            default=[1, 5],
            metavar=("MIN", "MAX"),
            help="Fewest and most events per recording (default: 1 5).",
        ),
        option(
            "--snr-db",
            type=float,
            nargs=2,
            default=[0.0, 20.0],
            metavar=("MIN", "MAX"),
            help="Range of an event's RMS level over the background's, in dB (default: 0 20).",
        ),
        option(
            "--sampling-rate",
            type=int,
            default=DEFAULT_SAMPLING_RATE,
            help=f"Rate of the written recordings (default: {DEFAULT_SAMPLING_RATE}).",
        ),
        option(
            "--seed",
            type=int,
            default=0,
            help="Seed: the output is a function of the inputs and the seed.",
        ),
        option(
            "--missing",
            choices=MISSING_POLICIES,
            default="skip",
            help="Skip (default) or raise on unreadable clips and backgrounds.",
        ),
        *OVERLAP_OPTIONS,
    ),
    run=build_moments,
)
"""``hf-atr build-dataset moments`` and ``datasets_scripts/build_moments.py``."""


__all__ = ["MOMENTS_BUILDER", "build_moments"]
