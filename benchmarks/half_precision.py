"""Inference in half precision: what bfloat16 and float16 cost in rankings, and what they gain in speed.

Run: ``OMP_NUM_THREADS=1 python benchmarks/half_precision.py [--demo-dir outputs/demo] [--model DIR] [--device cuda]``.

The demo model (built first with ``hf-atr demo``'s defaults when ``--demo-dir`` holds none) is loaded in float32,
bfloat16 and float16 (``pipeline(..., dtype=...)``) in one run, and for each:

1. R@1 and R@10 in both directions on the demo's test split (its clips and English captions, as the demo's index
   holds them), by :class:`hf_atr.evaluation.evaluator.RetrievalEvaluator`: the model's own protocol;
2. the demo index rebuilt in that precision (``pipe.index`` over the test clips and their captions): every caption
   searched for its top-10 clips, every clip for its top-10 captions, and the overlap ``|top-10 ∩ float32's top-10| /
   10`` averaged over the queries; and the same queries searched in the demo's saved float32 index (a query of
   another dtype than the index's: it runs, with one notice);
3. speed, the three precisions in turn, best of ``--rounds``: clips/s of building the index (decoding, features,
   model), queries/s of one text query at a time (``pipe(caption, top_k=10)``: tokens, model, search), and the
   model alone on precomputed inputs (clips/s in batches of 32, captions/s in batches of 256), each with its ratio
   to float32 measured in this run.

``--device cuda`` runs the model there (the search stays faiss on the CPU), which is where half precision is fast;
on CPUs without bfloat16/float16 matrix units it is emulated and may be slower than float32.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import torch
from demo_retrieval import (
    TABLE_COLUMNS,
    TOP_K,
    demo_split,
    ensure_demo,
    measure,
    overlap,
    table_cells,
    top_ids,
)
from transformers import pipeline
from transformers.utils import logging as transformers_logging

import hf_atr  # noqa: F401  (registers the audio-text-retrieval task)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def seconds(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def model_alone(pipe, files: list[Path], captions: list[str], device: str) -> tuple[float, float]:
    """clips/s (batches of 32) and captions/s (batches of 256) of the model on inputs computed beforehand."""
    processor, model = pipe.processor, pipe.model
    audio = [processor(audio=[str(path) for path in files[start : start + 32]], return_tensors="pt")
             for start in range(0, len(files), 32)]  # fmt: skip
    text = [
        processor(text=captions[start : start + 256], return_tensors="pt")
        for start in range(0, len(captions), 256)
    ]

    def run(batches, embed):
        with torch.no_grad():
            for batch in batches:
                embed(**{name: value.to(device) for name, value in batch.items()})
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    run(audio[:1], model.get_audio_features)  # warm-up
    run(text[:1], model.get_text_features)
    return (
        len(files) / seconds(lambda: run(audio, model.get_audio_features)),
        len(captions) / seconds(lambda: run(text, model.get_text_features)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--demo-dir", default="outputs/demo", help="hf-atr demo's output (built when missing)"
    )
    parser.add_argument("--model", default=None, help="the model to measure (default: the demo's)")
    parser.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda)")
    parser.add_argument(
        "--queries", type=int, default=None, help="search only this many captions (default: all)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="speed: best of this many rounds (default: 3)")
    parser.add_argument(
        "--timed-queries", type=int, default=100, help="speed: text queries timed per round (default: 100)"
    )
    args = parser.parse_args()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    logging.getLogger("hf_atr").setLevel(logging.ERROR)
    demo_dir = Path(args.demo_dir)
    ensure_demo(demo_dir)
    model_dir = args.model or str(demo_dir / "model")
    split = demo_split(demo_dir)
    audio_dir, files, _, captions, _ = split
    queries = captions[: args.queries]
    print(
        f"Model {model_dir} on {args.device} ({torch.get_num_threads()} torch thread(s), torch {torch.__version__}); "
        f"test split: {len(files)} clips, {len(captions)} English captions; {len(queries)} text and "
        f"{len(files)} audio queries, top-{TOP_K}."
    )
    results = {}
    pipes = {}
    for name, dtype in DTYPES.items():
        pipe = pipes[name] = pipeline(
            "audio-text-retrieval", model=model_dir, dtype=dtype, device=args.device
        )
        results[name] = {
            **measure(pipe, split, queries),
            "memory": sum(p.numel() * p.element_size() for p in pipe.model.parameters()) / 2**20,
            "speed": [0.0] * 4,
        }
    for name, pipe in pipes.items():
        pipe.load_index(demo_dir / "index")  # the demo's float32 index, queried in this precision
        results[name]["t2a_saved"] = top_ids(pipe, queries)
    timed_queries = queries[: args.timed_queries]
    for _ in range(
        args.rounds
    ):  # the precisions in turn, best of the rounds: a shared machine's load evens out
        for name, pipe in pipes.items():
            speed = (
                len(files)
                / seconds(lambda pipe=pipe: pipe.index(files, root=audio_dir, show_progress=False)),
                len(timed_queries) / seconds(lambda pipe=pipe: top_ids(pipe, timed_queries)),
                *model_alone(pipe, files, captions, args.device),
            )
            results[name]["speed"] = [max(best, now) for best, now in zip(results[name]["speed"], speed)]
    reference = results["float32"]
    columns = [column.format(reference="float32") for column in TABLE_COLUMNS] + ["T2A in the float32 index"]
    print("\n| dtype | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, result in results.items():
        saved = f"{overlap(result['t2a_saved'], reference['t2a']):.3f}"
        print(f"| {name} | " + " | ".join([*table_cells(result, reference), saved]) + " |")

    def rate(value: float, base: float) -> str:
        return f"{value:.1f} ({value / base:.2f}×)"

    print(
        f"\n| dtype | weights MiB | index build, clips/s | text queries/s | model alone ({args.device}): clips/s | "
        "captions/s |\n|---|---|---|---|---|---|"
    )
    for name, result in results.items():
        cells = [rate(value, base) for value, base in zip(result["speed"], reference["speed"])]
        print(f"| {name} | {result['memory']:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
