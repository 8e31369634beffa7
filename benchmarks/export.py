"""Torch against its ONNX export (float32 and int8) on CPU: text queries per second, clips per second, file sizes.

Run: ``OMP_NUM_THREADS=1 python benchmarks/export.py [--models demo clap] [--threads 1 2] [--rounds 20]`` (needs
``pip install 'hf-atr[onnx]'``; the CLAP row exports and quantises a model of 150M parameters, several minutes).

Rows, random weights (seeded):

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
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import ClapConfig, ClapFeatureExtractor

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=("demo", "clap"), default=["demo", "clap"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    for name in args.models:
        run(name, args.threads, args.rounds)


if __name__ == "__main__":
    main()
