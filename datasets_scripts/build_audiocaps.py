"""Build an AudioCaps ``DatasetDict`` (shared hf-atr schema) from a local AudioCaps directory and save it.

The same as ``hf-atr build-dataset audiocaps ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_audiocaps.py ~/data/audiocaps --missing skip --output-dir audiocaps_hf
    python datasets_scripts/build_audiocaps.py ~/data/audiocaps --filename-pattern "Y{youtube_id}.wav" \\
        --output-dir audiocaps_parquet --parquet --embed-audio
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "audiocaps")
"""``main(argv=None) -> exit status``: the builder ``audiocaps`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
