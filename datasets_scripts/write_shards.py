"""Write the splits of a shared-schema DatasetDict (saved by any ``build_*.py`` script) as WebDataset tar shards in
the LAION-CLAP layout or as parquet shards, for streamed training (``AtrTrainer`` with
``hf_atr.data.shards.load_audio_text_shards``).

The same as ``hf-atr build-dataset shards ...``: the same options (``--help``) and output.

Example::

    python datasets_scripts/build_wavcaps.py ... --output-dir wavcaps_freesound
    python datasets_scripts/write_shards.py wavcaps_freesound --output-dir wavcaps_shards --num-shards 64
    # wavcaps_shards/train/shard-00000.tar ... shard-00063.tar, sizes.json

Choose ``--num-shards`` as a multiple of the number of training processes, and at least the processes times the
DataLoader workers: each process streams its own shards, each worker its own part of them.
"""

from __future__ import annotations

from functools import partial

from hf_atr.commands.build_dataset.command import build_dataset

main = partial(build_dataset, "shards")
"""``main(argv=None) -> exit status``: the builder ``shards`` of :mod:`hf_atr.commands.build_dataset.dataset_builders`."""

if __name__ == "__main__":
    raise SystemExit(main())
