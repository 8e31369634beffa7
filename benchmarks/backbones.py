"""Training-step time of pretrained-size audio towers against the tiny demo model.

Run: ``OMP_NUM_THREADS=1 python benchmarks/backbones.py [--quick] [--threads N]`` on CPU (a few minutes; the
``pe-av-large`` row needs about 11 GB at batch 4 × 2 s: ``--only pe-av-large --batch-size 4`` runs it alone),
or ``python benchmarks/backbones.py --device cuda --batch-size 256 --seconds 10`` on a GPU (also prints
peak GPU memory per step).

Every row is an :class:`~hf_atr.AtrDualEncoderModel` with random weights (seeded) and the demo's tiny BERT
text tower (hidden 64, 2 layers, projection 64), so the rows differ only in the audio tower:

* ``demo``: the tiny AST of ``hf-atr demo`` (hidden 64, 2 layers) on its 16 kHz log-mel features;
* ``panns-cnn14``: PANNs CNN14 at its published size (80.8M parameters with the AudioSet head; 79.7M
  without it, as here) on 32 kHz log-mel features, ``audio_pooling="pooler"`` (PANNs' embedding);
* ``panns-resnet38``: PANNs ResNet38 at its published size (the m-LTM audio encoder);
* ``clap-htsat-unfused``: the whole CLAP model at ``laion/clap-htsat-unfused``'s sizes (``ClapConfig()``'s
  defaults: HTS-AT with depths 2-2-6-2 on a 256 × 256 spectrogram image of 48 kHz, 64-bin log-mel features,
  and RoBERTa-base), converted as :meth:`~hf_atr.AtrDualEncoderModel.from_clap` converts a checkpoint (two-layer
  projections to 512, two logit scales). This row differs in both towers: its text tower is RoBERTa-base.
* ``clap-htsat-unfused-sdpa``: the same model with ``audio_window_attention="sdpa"``: HTS-AT's window attention
  through ``scaled_dot_product_attention`` (the same outputs and gradients; flash attention cannot take its
  additive mask, the memory-efficient kernel can), so that the two rows say which is faster on the device;
* ``pe-av-large``: the whole PE-Audio model at ``PeAudioConfig()``'s defaults, which its docstring gives as
  ``facebook/pe-av-large``'s configuration (a DAC-style waveform encoder and a 1792-wide transformer, ModernBERT
  with 22 layers; 606M parameters), converted as :meth:`~hf_atr.AtrDualEncoderModel.from_pe_audio` converts a
  checkpoint (dot scoring, raw scale and bias), on raw 48-kHz waveforms reflect-padded to the hop (1920 samples)
  with their padding mask, trained with its default objective, ``sigmoid``. It differs in both towers too.

The ``params`` column counts the audio tower, ``total`` the whole model.

One step = forward of a batch of precomputed features (feature extraction runs once per dataset with
``Dataset.map``, not per step) and ``batch_size`` random 16-token captions, the model's objective (contrastive;
``sigmoid`` for ``pe-av-large``), backward, and an AdamW step. Clips of ``--seconds`` (default 2 s, the demo's
length) for every row. Each row runs in a process of its own (the large rows' memory is returned between
rows), beside the demo: their steps are timed in interleaved rounds after one warm-up step; printed: median and
minimum in ms, the minimum relative to ``demo``'s minimum in the same rounds of the same process (the minimum is
the least disturbed by other processes), and the process's peak resident memory (CPU) or peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from transformers import BertConfig, ClapConfig, ClapFeatureExtractor, PeAudioConfig, PeAudioFeatureExtractor

from hf_atr.audio_batches import model_audio_inputs
from hf_atr.configuration_atr import AtrConfig
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.models.clap.convert_clap_checkpoint import atr_config_kwargs_from_clap
from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.models.pe_audio import PE_AUDIO_DEFAULT_OBJECTIVE, atr_config_kwargs_from_pe_audio
from hf_atr.objectives.registry import build_objective

VOCAB_SIZE = 1000
CAPTION_TOKENS = 16
DEMO_SAMPLING_RATE = 16000

ModelBuilder = Callable[[int, float], tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]]


def demo_text_config() -> BertConfig:
    """The demo's text tower (the same in every row)."""
    extractor = tiny_feature_extractor(DEMO_SAMPLING_RATE, 2.0)
    return tiny_model_config(extractor, VOCAB_SIZE).text_config


def build_demo(batch_size: int, seconds: float) -> tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]:
    extractor = tiny_feature_extractor(DEMO_SAMPLING_RATE, seconds)
    model = AtrDualEncoderModel(tiny_model_config(extractor, VOCAB_SIZE))
    features = torch.randn(batch_size, extractor.max_length, extractor.num_mel_bins)
    return model, {"input_values": features}


def panns_builder(architecture: str) -> ModelBuilder:
    def build(batch_size: int, seconds: float) -> tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]:
        extractor = PannsFeatureExtractor()
        config = AtrConfig(
            audio_config=PannsConfig(architecture=architecture, num_mel_bins=extractor.feature_size),
            text_config=demo_text_config(),
            projection_dim=64,
            audio_pooling="pooler",
        )
        frames = 1 + int(round(seconds * extractor.sampling_rate)) // extractor.hop_length
        features = torch.randn(batch_size, frames, extractor.feature_size)
        return AtrDualEncoderModel(config), {"input_features": features}

    return build


def clap_builder(window_attention: str) -> ModelBuilder:
    def build(batch_size: int, seconds: float) -> tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]:
        """CLAP at laion/clap-htsat-unfused's sizes, random weights, on its own (unfused) log-mel features."""
        extractor = ClapFeatureExtractor()  # 48 kHz, hop 480, 64 mel bins
        config = AtrConfig(
            **atr_config_kwargs_from_clap(ClapConfig()), audio_window_attention=window_attention
        )
        frames = 1 + int(round(seconds * extractor.sampling_rate)) // extractor.hop_length
        features = torch.randn(batch_size, 1, frames, extractor.feature_size)
        return AtrDualEncoderModel(config), {"input_features": features}

    return build


def build_pe_audio_large(
    batch_size: int, seconds: float
) -> tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]:
    """PE-Audio at ``PeAudioConfig()``'s (pe-av-large's) sizes, random weights, on its extractor's waveforms."""
    extractor = PeAudioFeatureExtractor()  # 48 kHz, reflect-pads to a multiple of 1920 samples
    config = AtrConfig(
        **atr_config_kwargs_from_pe_audio(PeAudioConfig()), objective=PE_AUDIO_DEFAULT_OBJECTIVE
    )
    waveforms = np.random.default_rng(0).standard_normal((batch_size, int(seconds * extractor.sampling_rate)))
    features = extractor(
        list(0.1 * waveforms.astype(np.float32)), sampling_rate=extractor.sampling_rate, return_tensors="pt"
    )
    return AtrDualEncoderModel(config), model_audio_inputs(features)


BACKBONES: dict[str, ModelBuilder] = {
    "demo": build_demo,
    "panns-cnn14": panns_builder("cnn14"),
    "panns-resnet38": panns_builder("resnet38"),
    "clap-htsat-unfused": clap_builder("eager"),
    "clap-htsat-unfused-sdpa": clap_builder("sdpa"),
    "pe-av-large": build_pe_audio_large,
}


def make_step(
    model: AtrDualEncoderModel, audio_inputs: dict[str, torch.Tensor], batch_size: int, device: torch.device
) -> Callable[[], None]:
    """One training step (forward, the model's objective, backward, AdamW) on fixed inputs."""
    model.to(device).train()
    objective = build_objective(model.config.objective).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(1)
    inputs = {
        **{name: value.to(device) for name, value in audio_inputs.items()},
        "input_ids": torch.randint(5, VOCAB_SIZE, (batch_size, CAPTION_TOKENS), generator=generator).to(
            device
        ),
        "attention_mask": torch.ones(batch_size, CAPTION_TOKENS, dtype=torch.long, device=device),
    }

    def step() -> None:
        outputs = model(**inputs)
        loss = objective(outputs.audio_embeds, outputs.text_embeds, model=model).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def measure_row(name: str, args: argparse.Namespace) -> dict[str, object]:
    """Row ``name`` and the demo in this process: sizes, step times in interleaved rounds, peak memory in GiB."""
    device = torch.device(args.device)
    steps, result = {}, {"name": name, "threads": torch.get_num_threads()}
    for row in dict.fromkeys(["demo", name]):
        torch.manual_seed(0)
        model, audio_inputs = BACKBONES[row](args.batch_size, args.seconds)
        if row == name:
            result["params"] = sum(parameter.numel() for parameter in model.audio_model.parameters())
            result["total"] = sum(parameter.numel() for parameter in model.parameters())
        steps[row] = make_step(model, audio_inputs, args.batch_size, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        steps[row]()  # warm-up (allocates the optimizer state)
        if device.type == "cuda" and row == name:
            result["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    timings: dict[str, list[float]] = {row: [] for row in steps}
    for _ in range(args.rounds):
        for row, step in steps.items():
            started = time.perf_counter()
            step()
            timings[row].append(1000 * (time.perf_counter() - started))
    if device.type != "cuda":  # Linux reports the peak resident set in KiB
        result["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {**result, "timings": timings[name], "demo_min": min(timings["demo"])}


def run_row_process(name: str, args: argparse.Namespace) -> dict[str, object]:
    """:func:`measure_row` in a fresh interpreter (``--row``), so that no two large models share the memory."""
    command = [sys.executable, __file__, "--row", name, "--batch-size", str(args.batch_size)]
    command += ["--seconds", str(args.seconds), "--rounds", str(args.rounds), "--device", args.device]
    command += ["--threads", str(args.threads)] if args.threads else []
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:  # e.g. killed for memory: the other rows still print
        return {"name": name, "error": f"exit code {completed.returncode}: {completed.stderr.strip()[-300:]}"}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="batch 4, 2 rounds")
    parser.add_argument("--batch-size", type=int, default=None, help="default 8 (quick 4)")
    parser.add_argument("--seconds", type=float, default=2.0, help="clip length for every row")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds (default 3, quick 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--only", nargs="*", choices=sorted(BACKBONES), help="rows to run (demo is always run)"
    )
    parser.add_argument("--row", choices=sorted(BACKBONES), help=argparse.SUPPRESS)  # one row's own process
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.batch_size = args.batch_size or (4 if args.quick else 8)
    args.rounds = args.rounds or (2 if args.quick else 3)
    if args.row:
        print(json.dumps(measure_row(args.row, args)))
        return
    names = ["demo", *[name for name in (args.only or BACKBONES) if name != "demo"]]
    results = [run_row_process(name, args) for name in names]

    threads = next((result["threads"] for result in results if "threads" in result), "?")
    print(
        f"Training step, batch {args.batch_size}, {args.seconds:g}-s clips, {args.device}, {threads} threads, "
        f"{args.rounds} rounds; each row in its own process beside the demo"
    )
    memory = "peak GPU GiB" if args.device.startswith("cuda") else "peak RSS GiB"
    print(
        f"{'model':<25}{'params':>9}{'total':>9}{'median ms':>12}{'min ms':>10}{'min / demo':>12}{memory:>14}"
    )
    for result in results:
        if "error" in result:
            print(f"{result['name']:<25}failed ({result['error']})")
            continue
        timings = result["timings"]
        print(
            f"{result['name']:<25}{result['params'] / 1e6:>8.2f}M{result['total'] / 1e6:>8.2f}M"
            f"{statistics.median(timings):>12.1f}{min(timings):>10.1f}"
            f"{min(timings) / result['demo_min']:>11.1f}x{result['peak_gib']:>14.2f}"
        )


if __name__ == "__main__":
    main()
