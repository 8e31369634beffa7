"""Build a WavCaps ``DatasetDict`` (shared hf-atr schema, one ``train`` split) from one WavCaps JSON file and
its audio, optionally without the clips of evaluation sets, and save it.

Example::

    python datasets_scripts/build_clotho.py ~/data/clotho --splits evaluation --output-dir clotho_test
    python datasets_scripts/build_wavcaps.py ~/data/WavCaps/json_files/FreeSound/fsd_final.json \\
        --audio-dir ~/data/WavCaps/Audio/FreeSound --missing skip \\
        --exclude-overlap-with clotho_test --output-dir wavcaps_freesound
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hf_atr.data.corpus_utils import (
    MISSING_POLICIES,
    add_export_arguments,
    add_overlap_arguments,
    apply_overlap_arguments,
    check_export_arguments,
    expand_path,
    export_dataset_dict,
)
from hf_atr.data.wavcaps import WAVCAPS_OFFICIAL_CLIPS, load_wavcaps


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Turn a WavCaps JSON file ({'data': [{'id', 'caption', 'audio', ...}]}) and its audio into a "
        "datasets.DatasetDict, optionally removing evaluation clips (overlap filter).",
    )
    parser.add_argument(
        "json_file", type=expand_path, help="fsd_final.json, bbc_final.json, sb_final.json or as_final.json."
    )
    parser.add_argument(
        "--audio-dir", type=expand_path, help="The source's audio folder (default: the JSON's folder)."
    )
    parser.add_argument(
        "--source", choices=list(WAVCAPS_OFFICIAL_CLIPS), help="WavCaps source (default: from the file name)."
    )
    parser.add_argument(
        "--missing", choices=MISSING_POLICIES, default="error", help="Raise on or skip bad clips/records."
    )
    add_overlap_arguments(parser)
    add_export_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_export_arguments(parser, args)
    dataset = load_wavcaps(args.json_file, audio_dir=args.audio_dir, source=args.source, missing=args.missing)
    dataset, overlap_summaries = apply_overlap_arguments(dataset, args)
    for split, summary in overlap_summaries.items():
        print(f"{split}: {summary}")
    written = export_dataset_dict(dataset, args)
    print(f"{dataset}\nwritten: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
