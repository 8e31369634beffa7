"""hf_atr.commands.build_dataset.dataset_output: what the output options write."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, load_from_disk

from hf_atr.commands.build_dataset.dataset_output import export_dataset_dict


def _split(rows: int) -> Dataset:
    return Dataset.from_dict({"audio_id": [str(index) for index in range(rows)]})


def test_export_never_writes_an_empty_split(tmp_path, caplog):
    args = argparse.Namespace(output_dir=tmp_path / "out", parquet=False, embed_audio=False, push_to_hub=None)
    with caplog.at_level(logging.WARNING):
        export_dataset_dict(DatasetDict({"train": _split(2), "test": _split(0)}), args)
    assert "Not writing empty split(s) ['test']" in caplog.text
    assert list(load_from_disk(str(Path(args.output_dir)))) == ["train"]
    with pytest.raises(ValueError, match="Every split is empty"):
        export_dataset_dict(DatasetDict({"test": _split(0)}), args)
