"""Index a folder with ``pipe.index`` and with ``hf-atr index``; run alone or under torchrun by
test_distributed_index.py.

Usage: [torchrun --standalone --nproc_per_node N] index_worker.py MODEL_DIR AUDIO_DIR OUT_DIR
Writes OUT_DIR/pipe_rank<R>.json (what ``pipe.index`` left on each process) and OUT_DIR/cli/ (the index
``hf-atr index`` saved).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import pipeline

from hf_atr.cli import main as cli_main


def main() -> None:
    model_dir, audio_dir, out_dir = (Path(argument) for argument in sys.argv[1:4])
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        PartialState(cpu=True)  # joins the gloo process group, as `hf-atr index` does under accelerate launch
    rank = int(os.environ.get("RANK", "0"))
    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    files = sorted(str(path) for path in audio_dir.iterdir())
    pipe.index(files, root=audio_dir, batch_size=2, show_progress=False)
    index = pipe.audio_index
    result = {
        "ids": index.ids,
        "spans": index.spans,
        "root": index.root,
        "embeddings": index.embeddings.tolist(),
        "skipped": [[item.name, item.reason] for item in pipe.skipped],
    }
    (out_dir / f"pipe_rank{rank}.json").write_text(json.dumps(result))
    torch.manual_seed(0)
    cli_main(["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(out_dir / "cli"),
              "--batch-size", "2", "--save-every", "3"])  # fmt: skip


if __name__ == "__main__":
    main()
