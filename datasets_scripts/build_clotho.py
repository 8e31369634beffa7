"""Build a Clotho ``DatasetDict`` (shared hf-atr schema; splits train/validation/test for Clotho's
development/validation/evaluation) from a local Clotho v2 directory and save it.

The same as ``hf-atr build-dataset clotho ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_clotho.py ~/data/clotho --output-dir clotho_hf
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "clotho")
"""``main(argv=None) -> exit status``: the builder ``clotho`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
