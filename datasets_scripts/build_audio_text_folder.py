"""Build a ``DatasetDict`` (shared hf-atr schema) from a folder of audio files with a ``metadata.csv`` or
``metadata.jsonl`` (the ``datasets`` AudioFolder convention) and save it.

The same as ``hf-atr build-dataset audiofolder ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_audio_text_folder.py ~/my_sounds --missing skip --output-dir my_sounds_hf
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "audiofolder")
"""``main(argv=None) -> exit status``: the builder ``audiofolder`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
