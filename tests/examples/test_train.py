"""examples/train.py: the same --seed gives the same weights, run after run."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from safetensors.torch import load_file

from hf_atr.data.synthcaps import load_synthcaps

SCRIPT = Path(__file__).parents[2] / "examples" / "train.py"


@pytest.mark.slow
def test_same_seed_gives_identical_weights(tmp_path):
    corpus_dir = tmp_path / "corpus"
    load_synthcaps(num_train=8, num_validation=2, num_test=4, languages=("eng",)).save_to_disk(
        str(corpus_dir)
    )
    main = runpy.run_path(str(SCRIPT))["main"]
    weights = []
    for run in range(2):  # the second run starts from whatever random state the first one left
        output_dir = tmp_path / f"run{run}"
        main(
            [
                "--dataset", str(corpus_dir), "--output-dir", str(output_dir), "--max-steps", "2",
                "--per-device-batch-size", "4", "--save-steps", "100", "--use-cpu", "--seed", "3",
            ]
        )  # fmt: skip
        weights.append(load_file(output_dir / "model.safetensors"))
    assert weights[0].keys() == weights[1].keys()
    assert all(weights[0][name].equal(weights[1][name]) for name in weights[0])
