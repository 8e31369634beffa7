"""examples/train_streaming.py: shards written, streamed with on-device features and gradient caching, saved."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from safetensors.torch import load_file

SCRIPT = Path(__file__).parents[2] / "examples" / "train_streaming.py"


@pytest.mark.slow
def test_streams_synthcaps_shards_and_saves_the_model(tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    output_dir = tmp_path / "run"
    main(
        [
            "--synthcaps", "16", "--output-dir", str(output_dir), "--max-steps", "2", "--batch-size", "4",
            "--chunk-size", "2", "--workers", "2", "--save-steps", "100", "--use-cpu",
        ]
    )  # fmt: skip
    assert len(list((output_dir / "synthcaps_shards").glob("*.tar"))) == 8
    weights = load_file(output_dir / "model.safetensors")
    assert any(name.startswith("audio_projection") for name in weights)
