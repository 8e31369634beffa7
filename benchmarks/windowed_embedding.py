"""Cost of embedding long recordings whole (windowed) against the model's own truncated path, per minute of audio.

Side by side in one run, on the Clotho validation recordings under ``--real-audio`` (15-30 s, 44.1 kHz,
names with spaces), for two random-init AST + BERT dual encoders (the cost does not depend on the weights):

- ``demo``: the ``hf-atr demo`` model (64 mel bins, 2-s window, 2 layers of width 64);
- ``stock window``: a stock ``ASTFeatureExtractor`` (128 mel bins, 1024 frames = 10.24 s) in front of the
  same small transformer, so that the window is the one released AST checkpoints read.

For each, :func:`hf_atr.audio_encoding.encode_audio_windows` over every recording:

1. ``truncated``: no windowing, one forward pass per clip of what the processor prepares (the clip cut to the
   window: what every path did before windowed embedding, and the evaluator's default);
2. ``windowed, hop 50 %``: every window of every clip (the index's default, and what pooling embeds);
3. ``windowed, hop 100 %``: windows without overlap.

Decoding and resampling (44.1 -> 16 kHz) are part of every path and are also timed alone. Times are medians
over ``--rounds`` rounds in which the paths alternate, with one torch thread, reported as seconds per
minute of audio and as ratios to the truncated path.

    OMP_NUM_THREADS=1 python benchmarks/windowed_embedding.py

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from real_audio import add_real_audio_argument
from transformers import ASTConfig, ASTFeatureExtractor, BertConfig
from transformers.utils import logging

from hf_atr import AtrConfig, AtrDualEncoderModel, AtrProcessor
from hf_atr.audio_encoding import encode_audio_windows
from hf_atr.data.audio import decode_audio
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.tokenization import train_caption_tokenizer
from hf_atr.windowing import Windowing, extractor_window

CLOTHO_SAMPLE = Path("clotho-validation-sample") / "validation"
"""Where, under ``--real-audio``, the Clotho validation sample's WAV files are (Clotho's official layout)."""
REAL_AUDIO_HELP = (
    "folder of real recordings whose Clotho validation sample (clotho-validation-sample/validation/*.wav, "
    "Clotho's official layout) is measured; it may also hold AudioCaps samples and labelled Freesound clips "
    "(default: the samples kept beside the checkout, if any)"
)


def models() -> dict[str, tuple[AtrDualEncoderModel, AtrProcessor]]:
    tokenizer = train_caption_tokenizer(["a dog barks", "rain falls on a roof"] * 4, vocab_size=60)
    torch.manual_seed(0)
    demo_extractor = tiny_feature_extractor()
    demo = AtrDualEncoderModel(tiny_model_config(demo_extractor, len(tokenizer))).eval()
    stock_extractor = ASTFeatureExtractor()
    stock_config = AtrConfig(
        audio_config=ASTConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            num_mel_bins=stock_extractor.num_mel_bins,
            max_length=stock_extractor.max_length,
        ),
        text_config=BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=128,
        ),
        projection_dim=64,
    )
    stock = AtrDualEncoderModel(stock_config).eval()
    return {
        "demo": (demo, AtrProcessor(demo_extractor, tokenizer)),
        "stock window": (stock, AtrProcessor(stock_extractor, tokenizer)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    add_real_audio_argument(parser, "--real-audio", help=REAL_AUDIO_HELP)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.set_verbosity_error()  # the truncated path names its cut clips on every round
    clotho = args.real_audio / CLOTHO_SAMPLE
    files = sorted(str(path) for path in clotho.glob("*.wav"))
    if not files:
        raise SystemExit(f"No recordings in {clotho}; this benchmark measures real Clotho recordings.")
    rows = [{"audio": path, "audio_id": Path(path).name} for path in files]
    minutes = sum(len(decode_audio(path)) / 44100 for path in files) / 60
    print(
        f"{len(files)} Clotho recordings, {minutes:.2f} min of 44.1-kHz audio; 1 torch thread, batches of {args.batch_size}"
    )
    for name, (model, processor) in models().items():
        window = extractor_window(processor.feature_extractor)
        paths: dict[str, Callable[[], object]] = {
            "decode + resample only": lambda processor=processor: [
                decode_audio(path, processor.sampling_rate) for path in files
            ],
            "truncated (model's own)": lambda model=model, processor=processor: encode_audio_windows(
                model, processor, rows, batch_size=args.batch_size
            ),
            "windowed, hop 50 %": lambda model=model, processor=processor: encode_audio_windows(
                model, processor, rows, windowing=Windowing(), batch_size=args.batch_size
            ),
            "windowed, hop 100 %": lambda model=model, processor=processor, window=window: (
                encode_audio_windows(
                    model,
                    processor,
                    rows,
                    windowing=Windowing(hop_seconds=window.seconds),
                    batch_size=args.batch_size,
                )
            ),
        }
        entries = {
            label: len(
                encode_audio_windows(
                    model, processor, rows, windowing=windowing, batch_size=args.batch_size
                ).embeddings
            )
            for label, windowing in (
                ("windowed, hop 50 %", Windowing()),
                ("windowed, hop 100 %", Windowing(hop_seconds=window.seconds)),
            )
        }
        entries["truncated (model's own)"] = len(files)
        times: dict[str, list[float]] = {label: [] for label in paths}
        for _ in range(args.rounds):
            for label, run in paths.items():
                started = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - started)
        medians = {label: statistics.median(values) for label, values in times.items()}
        print(f"\n{name}: window {window.seconds:.2f} s ({type(processor.feature_extractor).__name__})")
        print("| path | forward passes | s per min of audio | / truncated |")
        print("|---|---|---|---|")
        for label, seconds in medians.items():
            passes = entries.get(label, "-")
            ratio = seconds / medians["truncated (model's own)"]
            print(f"| {label} | {passes} | {seconds / minutes:.3f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
