"""Torch against its ONNX export (float32 and int8) on CPU: speed and file sizes, and retrieval on the demo's test split.

Run: ``OMP_NUM_THREADS=1 python benchmarks/export.py [--parts speed retrieval] [--models demo clap] [--threads 1 2]
[--rounds 20] [--demo-dir outputs/demo]`` (needs ``pip install 'hf-atr[onnx]'``; the CLAP row of the speed part
exports and quantises a model of 150M parameters, several minutes; ``--parts retrieval`` skips it).

**Speed** (``--parts speed``), rows of random weights (seeded):

* ``demo``: the tiny AST + BERT of ``hf-atr demo`` (hidden 64, 2 layers each, projection 64), 2-s clips at 16 kHz;
* ``clap``: the whole CLAP model at ``laion/clap-htsat-unfused``'s sizes (``ClapConfig()``: HTS-AT 2-2-6-2 and
  RoBERTa-base, projections to 512) converted as :meth:`~hf_atr.AtrDualEncoderModel.from_clap` converts a
  checkpoint, on its unfused extractor (48 kHz, 10-s window, 64 mel bins).

Each model is exported by :func:`hf_atr.export.onnx_graphs.export_onnx` with ``quantize="int8"`` (which checks the
float32 graphs against torch). Timed on precomputed inputs (the processor's work is the same for every backend): one
query = one 12-token caption (batch 1); clips = a batch of 8 clips of the window's length. Torch runs with
``torch.set_num_threads(n)``, ONNX Runtime with ``intra_op_num_threads = n``; the backends alternate round by round and
the minimum over rounds is reported (the least disturbed by other processes), with its ratio to torch's.
Agreement: max |ONNX − torch| of the float32 graphs; for int8, the mean cosine of each embedding to its float32 self,
and recall@10 of int8's top-10 clips against float32's for 32 captions over 64 clips (random weights: this measures
how far int8 moves rankings, not retrieval quality).

**Retrieval** (``--parts retrieval``): the trained model of ``hf-atr demo`` in ``--demo-dir`` (built first with the
demo's defaults when the folder holds none) is exported with ``quantize="int8"`` into a temporary folder, and the
torch model, the float32 graphs and the int8 graphs are each run behind the retrieval pipeline (``backend="onnx"``
for the graphs), on the CPU with the torch thread count. For each, ``demo_retrieval.py`` measures R@1 and R@10 in both
directions on the demo's test split and the top-10 overlap with torch float32's (``|top-10 ∩ torch's top-10| / 10``,
every caption searching clips, every clip searching captions) in the test split's index rebuilt by that backend; and
the same queries are searched in the demo's saved index (built by torch), against torch's top-10 there.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from demo_retrieval import TABLE_COLUMNS, demo_split, ensure_demo, measure, overlap, table_cells, top_ids
from transformers import ClapConfig, ClapFeatureExtractor, pipeline
from transformers.utils import logging as transformers_logging

import hf_atr  # noqa: F401  (registers the audio-text-retrieval task)
from hf_atr.configuration_atr import AtrConfig
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.export.onnx_encoder import OnnxDualEncoder
from hf_atr.export.onnx_graphs import export_onnx
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.models.clap.convert_clap_checkpoint import atr_config_kwargs_from_clap
from hf_atr.processing_atr import AtrProcessor
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.windowing import extractor_window

WORDS = [
    "a",
    "dog",
    "barks",
    "while",
    "birds",
    "sing",
    "and",
    "a",
    "car",
    "passes",
    "on",
    "the",
    "wet",
    "road",
    "near",
    "a",
    "siren",
    "in",
    "the",
    "rain",
    "at",
    "night",
]
CLIP_BATCH = 8
RANKING_CAPTIONS, RANKING_CLIPS = 32, 64


def caption_tokenizer():
    sentences = [" ".join(WORDS[start:] + WORDS[:start]) for start in range(len(WORDS))]
    return train_caption_tokenizer(sentences * 4, vocab_size=300)


def build(name: str) -> tuple[AtrDualEncoderModel, AtrProcessor]:
    torch.manual_seed(0)
    tokenizer = caption_tokenizer()
    if name == "demo":
        extractor = tiny_feature_extractor(16000, 2.0)
        return AtrDualEncoderModel(tiny_model_config(extractor, len(tokenizer))).eval(), AtrProcessor(
            extractor, tokenizer
        )
    extractor = ClapFeatureExtractor(truncation="rand_trunc")  # the unfused checkpoints' front end
    model = AtrDualEncoderModel(AtrConfig(**atr_config_kwargs_from_clap(ClapConfig()))).eval()
    return model, AtrProcessor(extractor, tokenizer)


def inputs_for(processor: AtrProcessor, count: int, seed: int) -> tuple[dict, dict]:
    """Text inputs for ``count`` captions and audio inputs for ``count`` window-length noise clips."""
    rng = np.random.default_rng(seed)
    captions = [" ".join(rng.choice(WORDS, size=12)) for _ in range(count)]
    samples = extractor_window(processor.feature_extractor).samples or 2 * processor.sampling_rate
    clips = [(0.1 * rng.standard_normal(samples)).astype(np.float32) for _ in range(count)]
    audio = {k: v for k, v in processor(audio=clips, return_tensors="pt").items() if k != "is_longer"}
    return dict(processor(text=captions, return_tensors="pt")), audio


def best_seconds(function, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def directory_size(paths: list[Path]) -> float:
    return sum(path.stat().st_size for path in paths) / 2**20


def run(name: str, thread_counts: list[int], rounds: int) -> None:
    model, processor = build(name)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory)
        start = time.perf_counter()
        report = export_onnx(model, processor, out, quantize="int8")
        export_seconds = time.perf_counter() - start
        torch_mb = parameters * 4 / 2**20
        float_mb = directory_size([out / graph.file for graph in report.graphs.values()])
        int8_mb = directory_size([out / file for file in report.quantized.values()])
        print(
            f"\n## {name}: {parameters / 1e6:.1f}M parameters; export + checks + int8 in {export_seconds:.0f} s; "
            f"probe parity text {report.graphs['text'].max_abs_error:.1e}, audio {report.graphs['audio'].max_abs_error:.1e}"
        )
        print(
            f"size (MiB): torch float32 weights {torch_mb:.1f}, ONNX float32 {float_mb:.1f}, ONNX int8 {int8_mb:.1f}"
        )
        query_text, _ = inputs_for(processor, 1, seed=1)
        _, clip_audio = inputs_for(processor, CLIP_BATCH, seed=2)
        ranking_text, _ = inputs_for(processor, RANKING_CAPTIONS, seed=3)
        _, ranking_audio = inputs_for(processor, RANKING_CLIPS, seed=4)
        float32, int8 = OnnxDualEncoder(out), OnnxDualEncoder(out, precision="int8")
        with torch.no_grad():
            reference_text = model.get_text_features(**ranking_text)
            reference_audio = torch.cat(
                [
                    model.get_audio_features(**{k: v[i : i + 8] for k, v in ranking_audio.items()})
                    for i in range(0, RANKING_CLIPS, 8)
                ]
            )
        float_text, float_audio = (
            float32.get_text_features(**ranking_text),
            float32.get_audio_features(**ranking_audio),
        )
        int8_text, int8_audio = (
            int8.get_text_features(**ranking_text),
            int8.get_audio_features(**ranking_audio),
        )
        float_top = (float_text @ float_audio.T).topk(10, dim=-1).indices
        int8_top = (int8_text @ int8_audio.T).topk(10, dim=-1).indices
        overlap = np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(float_top, int8_top)])
        print(
            f"agreement: float32 max |ONNX - torch| text {(float_text - reference_text).abs().max():.1e}, audio "
            f"{(float_audio - reference_audio).abs().max():.1e}; int8 mean cosine to float32 text "
            f"{torch.nn.functional.cosine_similarity(int8_text, float_text).mean():.4f}, audio "
            f"{torch.nn.functional.cosine_similarity(int8_audio, float_audio).mean():.4f}; int8 recall@10 of "
            f"float32's top-10 clips {overlap:.3f}"
        )
        print("| threads | backend | queries/s | × torch | clips/s | × torch |")
        print("|---|---|---|---|---|---|")
        for threads in thread_counts:
            torch.set_num_threads(threads)
            backends = {
                "torch": model,
                "ONNX float32": OnnxDualEncoder(out, threads=threads),
                "ONNX int8": OnnxDualEncoder(out, precision="int8", threads=threads),
            }
            query_times = {label: [] for label in backends}
            clip_times = {label: [] for label in backends}
            with torch.no_grad():
                for encoder in backends.values():  # warm-up: sessions built, first-call costs paid
                    encoder.get_text_features(**query_text)
                    encoder.get_audio_features(**clip_audio)
                for _ in range(rounds):
                    for label, encoder in backends.items():
                        query_times[label].append(
                            best_seconds(lambda e=encoder: e.get_text_features(**query_text), 1)
                        )
                        clip_times[label].append(
                            best_seconds(lambda e=encoder: e.get_audio_features(**clip_audio), 1)
                        )
            torch_query, torch_clips = min(query_times["torch"]), min(clip_times["torch"])
            for label in backends:
                query, clips = min(query_times[label]), min(clip_times[label])
                print(
                    f"| {threads} | {label} | {1 / query:.1f} | {torch_query / query:.2f} | "
                    f"{CLIP_BATCH / clips:.1f} | {torch_clips / clips:.2f} |"
                )


def retrieval(demo_dir: Path) -> None:
    """The retrieval part: torch float32, ONNX float32 and ONNX int8 of the trained demo model on its test split."""
    ensure_demo(demo_dir)
    split = demo_split(demo_dir)
    _, files, _, captions, _ = split
    threads = torch.get_num_threads()
    model_dir = demo_dir / "model"
    model = AtrDualEncoderModel.from_pretrained(model_dir).eval()
    processor = AtrProcessor.from_pretrained(model_dir)
    print(
        f"\n## retrieval: the demo model {model_dir} ({threads} thread(s)); test split: {len(files)} clips, "
        f"{len(captions)} English captions"
    )
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory)
        export_onnx(model, processor, out, quantize="int8")
        onnx_processor = AtrProcessor.from_pretrained(out)
        pipes = {
            "torch float32": pipeline("audio-text-retrieval", model=str(model_dir)),
            **{
                f"ONNX {precision}": pipeline(
                    "audio-text-retrieval",
                    model=OnnxDualEncoder(out, precision=precision, threads=threads),
                    processor=onnx_processor,
                    tokenizer=onnx_processor.tokenizer,
                    feature_extractor=onnx_processor.feature_extractor,
                    backend="onnx",
                )
                for precision in ("float32", "int8")
            },
        }
        results = {name: measure(pipe, split) for name, pipe in pipes.items()}
        for name, pipe in pipes.items():
            pipe.load_index(demo_dir / "index")  # the demo's saved index, built by the torch model
            results[name]["t2a_saved"] = top_ids(pipe, captions)
            results[name]["a2t_saved"] = top_ids(pipe, [str(path) for path in files])
    reference = results["torch float32"]
    columns = [column.format(reference="torch float32") for column in TABLE_COLUMNS]
    columns += ["in the demo's saved index: T2A", "A2T"]
    print("| backend | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, result in results.items():
        saved = [f"{overlap(result[f'{way}_saved'], reference[way]):.3f}" for way in ("t2a", "a2t")]
        print(f"| {name} | " + " | ".join([*table_cells(result, reference), *saved]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("speed", "retrieval"), default=["speed", "retrieval"])
    parser.add_argument(
        "--models", nargs="+", choices=("demo", "clap"), default=["demo", "clap"], help="speed: the rows"
    )
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="speed: thread counts")
    parser.add_argument("--rounds", type=int, default=20, help="speed: rounds, the minimum reported")
    parser.add_argument(
        "--demo-dir", default="outputs/demo", help="retrieval: hf-atr demo's output (built when missing)"
    )
    args = parser.parse_args()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    if "speed" in args.parts:
        for name in args.models:
            run(name, args.threads, args.rounds)
    if "retrieval" in args.parts:
        retrieval(Path(args.demo_dir))


if __name__ == "__main__":
    main()
