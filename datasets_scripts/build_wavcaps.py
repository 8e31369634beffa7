"""Build a WavCaps ``DatasetDict`` (shared hf-atr schema, one ``train`` split) from one WavCaps JSON file and
its audio, optionally without the clips of evaluation sets, and save it.

The same as ``hf-atr build-dataset wavcaps ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_clotho.py ~/data/clotho --splits evaluation --output-dir clotho_test
    python datasets_scripts/build_wavcaps.py ~/data/WavCaps/json_files/FreeSound/fsd_final.json \\
        --audio-dir ~/data/WavCaps/Audio/FreeSound --missing skip \\
        --exclude-overlap-with clotho_test --output-dir wavcaps_freesound
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "wavcaps")
"""``main(argv=None) -> exit status``: the builder ``wavcaps`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
