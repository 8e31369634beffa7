"""Synthesise audio moment retrieval data as Clotho-Moment was made: the captioned clips of a saved shared-schema
``DatasetDict`` laid over long background recordings, written as FLAC recordings and a ``moments_<split>_release.jsonl``
file that ``hf_atr.load_moments`` reads.

The same as ``hf-atr build-dataset moments ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_moments.py clotho_hf --backgrounds ~/field_recordings --output-dir moments \\
        --num-recordings 1000 --exclude-overlap-with clotho_test_hf
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "moments")
"""``main(argv=None) -> exit status``: the builder ``moments`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
