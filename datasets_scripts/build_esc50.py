"""Build an ESC-50 ``DatasetDict`` (shared hf-atr schema, one split per fold) from a local ESC-50
directory and save it.

The same as ``hf-atr build-dataset esc50 ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_esc50.py ~/data/ESC-50-master --output-dir esc50_hf \\
        --template "This is a sound of {class}." --template "A recording of {class}."
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "esc50")
"""``main(argv=None) -> exit status``: the builder ``esc50`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
