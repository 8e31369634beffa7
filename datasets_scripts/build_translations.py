"""Add caption translations to a DatasetDict saved by another ``build_*.py`` script and save the result.

The same as ``hf-atr build-dataset translations ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_translations.py audiocaps_hf \\
        --translation fra=~/data/audiocaps_fra/val_fra.csv --translation validation:deu=val_deu.csv \\
        --output-dir audiocaps_multilingual
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "translations")
"""``main(argv=None) -> exit status``: the builder ``translations`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
