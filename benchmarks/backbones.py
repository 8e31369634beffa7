"""Training-step time of pretrained-size audio towers against the tiny demo model (issue 14).

Run: ``OMP_NUM_THREADS=1 python benchmarks/backbones.py [--quick] [--threads N]`` on CPU (a few minutes),
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

The ``params`` column counts the audio tower, ``total`` the whole model.

One step = forward of a batch of precomputed features (feature extraction runs once per dataset with
``Dataset.map``, not per step) and ``batch_size`` random 16-token captions, the contrastive objective,
backward, and an AdamW step. Clips of ``--seconds`` (default 2 s, the demo's length) for every row. Steps
are timed in interleaved rounds after one warm-up step; printed: median and minimum in ms, and the minimum
relative to ``demo``'s minimum in the same rounds (the minimum is the least disturbed by other processes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import BertConfig, ClapConfig, ClapFeatureExtractor

from hf_atr.configuration_atr import AtrConfig
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.models.clap.convert_clap_checkpoint import atr_config_kwargs_from_clap
from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
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


def build_clap_base(batch_size: int, seconds: float) -> tuple[AtrDualEncoderModel, dict[str, torch.Tensor]]:
    """CLAP at laion/clap-htsat-unfused's sizes, random weights, on its own (unfused) log-mel features."""
    extractor = ClapFeatureExtractor()  # 48 kHz, hop 480, 64 mel bins
    model = AtrDualEncoderModel(AtrConfig(**atr_config_kwargs_from_clap(ClapConfig())))
    frames = 1 + int(round(seconds * extractor.sampling_rate)) // extractor.hop_length
    features = torch.randn(batch_size, 1, frames, extractor.feature_size)
    return model, {"input_features": features}


BACKBONES: dict[str, ModelBuilder] = {
    "demo": build_demo,
    "panns-cnn14": panns_builder("cnn14"),
    "panns-resnet38": panns_builder("resnet38"),
    "clap-htsat-unfused": build_clap_base,
}


def make_step(
    model: AtrDualEncoderModel, audio_inputs: dict[str, torch.Tensor], batch_size: int, device: torch.device
) -> Callable[[], None]:
    """One training step (forward, contrastive loss, backward, AdamW) on fixed inputs."""
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
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_size = args.batch_size or (4 if args.quick else 8)
    rounds = args.rounds or (2 if args.quick else 3)
    device = torch.device(args.device)
    names = ["demo", *[name for name in (args.only or BACKBONES) if name != "demo"]]

    steps, parameters, totals, peak_memory = {}, {}, {}, {}
    for name in names:
        torch.manual_seed(0)
        model, audio_inputs = BACKBONES[name](batch_size, args.seconds)
        parameters[name] = sum(parameter.numel() for parameter in model.audio_model.parameters())
        totals[name] = sum(parameter.numel() for parameter in model.parameters())
        steps[name] = make_step(model, audio_inputs, batch_size, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        steps[name]()  # warm-up (allocates the optimizer state)
        if device.type == "cuda":
            peak_memory[name] = torch.cuda.max_memory_allocated(device) / 2**30
    timings: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            started = time.perf_counter()
            steps[name]()
            timings[name].append(1000 * (time.perf_counter() - started))

    print(
        f"Training step, batch {batch_size}, {args.seconds:g}-s clips, {device}, "
        f"{torch.get_num_threads()} threads, {rounds} rounds"
    )
    header = f"{'model':<20}{'params':>9}{'total':>9}{'median ms':>12}{'min ms':>10}{'min / demo':>12}"
    print(header + ("   peak GiB" if peak_memory else ""))
    baseline = min(timings["demo"])
    for name in names:
        row = (
            f"{name:<20}{parameters[name] / 1e6:>8.2f}M{totals[name] / 1e6:>8.2f}M"
            f"{statistics.median(timings[name]):>12.1f}"
            f"{min(timings[name]):>10.1f}{min(timings[name]) / baseline:>11.1f}x"
        )
        print(row + (f"{peak_memory[name]:>11.2f}" if peak_memory else ""))


if __name__ == "__main__":
    main()
