"""References for the PANNs tests, written from the official code (qiuqiangkong/audioset_tagging_cnn,
pytorch/models.py) and independent of hf_atr: official checkpoint key names and shapes, random
official-layout state dicts, a functional ResNet38 forward, and a safe import of ``panns_inference``."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from torch.nn import functional

AUDIOSET_CLASSES = 527


def _batch_norm_shapes(prefix: str, channels: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.weight": (channels,),
        f"{prefix}.bias": (channels,),
        f"{prefix}.running_mean": (channels,),
        f"{prefix}.running_var": (channels,),
        f"{prefix}.num_batches_tracked": (),
    }


def _conv_block_shapes(prefix: str, in_channels: int, out_channels: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.conv1.weight": (out_channels, in_channels, 3, 3),
        **_batch_norm_shapes(f"{prefix}.bn1", out_channels),
        f"{prefix}.conv2.weight": (out_channels, out_channels, 3, 3),
        **_batch_norm_shapes(f"{prefix}.bn2", out_channels),
    }


def official_shapes(
    architecture: str,
    *,
    n_fft: int = 1024,
    mel_bins: int = 64,
    conv_block_channels: tuple[int, ...] | None = None,
    stage_channels: tuple[int, ...] = (64, 128, 256, 512),
    stage_blocks: tuple[int, ...] = (3, 4, 6, 3),
    classes: int = AUDIOSET_CLASSES,
) -> dict[str, tuple[int, ...]]:
    """Key → shape of an official Cnn14 / ResNet38 state dict (defaults: the published networks)."""
    frequencies = n_fft // 2 + 1
    shapes = {
        "spectrogram_extractor.stft.conv_real.weight": (frequencies, 1, n_fft),
        "spectrogram_extractor.stft.conv_imag.weight": (frequencies, 1, n_fft),
        "logmel_extractor.melW": (frequencies, mel_bins),
        **_batch_norm_shapes("bn0", mel_bins),
    }
    if architecture == "cnn14":
        channels = conv_block_channels or (64, 128, 256, 512, 1024, 2048)
        for index, (in_channels, out_channels) in enumerate(zip((1, *channels[:-1]), channels), start=1):
            shapes.update(_conv_block_shapes(f"conv_block{index}", in_channels, out_channels))
    else:
        channels = conv_block_channels or (64, 2048)
        shapes.update(_conv_block_shapes("conv_block1", 1, channels[0]))
        in_channels = channels[0]
        for stage, (planes, blocks) in enumerate(zip(stage_channels, stage_blocks), start=1):
            for block in range(blocks):
                prefix = f"resnet.layer{stage}.{block}"
                shapes[f"{prefix}.conv1.weight"] = (planes, in_channels, 3, 3)
                shapes.update(_batch_norm_shapes(f"{prefix}.bn1", planes))
                shapes[f"{prefix}.conv2.weight"] = (planes, planes, 3, 3)
                shapes.update(_batch_norm_shapes(f"{prefix}.bn2", planes))
                if block == 0 and stage > 1:  # _make_layer(stride=2): AvgPool2d, conv1x1, BatchNorm2d
                    shapes[f"{prefix}.downsample.1.weight"] = (planes, in_channels, 1, 1)
                    shapes.update(_batch_norm_shapes(f"{prefix}.downsample.2", planes))
                elif block == 0 and in_channels != planes:  # stride 1, new width: conv1x1, BatchNorm2d
                    shapes[f"{prefix}.downsample.0.weight"] = (planes, in_channels, 1, 1)
                    shapes.update(_batch_norm_shapes(f"{prefix}.downsample.1", planes))
                in_channels = planes
        shapes.update(_conv_block_shapes("conv_block_after1", in_channels, channels[1]))
    hidden = channels[-1]
    shapes.update(
        {
            "fc1.weight": (hidden, hidden),
            "fc1.bias": (hidden,),
            "fc_audioset.weight": (classes, hidden),
            "fc_audioset.bias": (classes,),
        }
    )
    return shapes


def torchlibrosa_front_end(sampling_rate: int, n_fft: int, hop: int, mel_bins: int, fmin: float, fmax: float):
    """The official front end modules (torchlibrosa, with the settings of the PANNs code)."""
    stft = pytest.importorskip("torchlibrosa.stft", reason="torchlibrosa (the [dev] extra) is the reference")
    LogmelFilterBank, Spectrogram = stft.LogmelFilterBank, stft.Spectrogram

    spectrogram = Spectrogram(
        n_fft=n_fft,
        hop_length=hop,
        win_length=n_fft,
        window="hann",
        center=True,
        pad_mode="reflect",
        freeze_parameters=True,
    )
    logmel = LogmelFilterBank(
        sr=sampling_rate,
        n_fft=n_fft,
        n_mels=mel_bins,
        fmin=fmin,
        fmax=fmax,
        ref=1.0,
        amin=1e-10,
        top_db=None,
        freeze_parameters=True,
    )
    return spectrogram, logmel


def random_official_state_dict(
    shapes: dict[str, tuple[int, ...]], front_end: tuple[torch.nn.Module, torch.nn.Module], seed: int = 0
) -> dict[str, torch.Tensor]:
    """Random float32 tensors under the official names; the front end weights from torchlibrosa.

    Batch norms get random scales, shifts and running statistics so that no layer is the identity.
    """
    generator = torch.Generator().manual_seed(seed)
    spectrogram, logmel = front_end
    fixed = {
        "spectrogram_extractor.stft.conv_real.weight": spectrogram.stft.conv_real.weight,
        "spectrogram_extractor.stft.conv_imag.weight": spectrogram.stft.conv_imag.weight,
        "logmel_extractor.melW": logmel.melW,
    }
    state = {}
    for key, shape in shapes.items():
        if key in fixed:
            state[key] = fixed[key].detach().clone()
        elif key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(1000, dtype=torch.long)
        elif key.endswith("running_var"):
            state[key] = 0.5 + torch.rand(shape, generator=generator)
        elif key.endswith(("running_mean", "bias")):
            state[key] = 0.1 * torch.randn(shape, generator=generator)
        elif len(shape) == 1:  # batch-norm scale
            state[key] = 0.5 + torch.rand(shape, generator=generator)
        else:  # Xavier-like scale keeps activations of order one through the depth
            fan_in = shape[1] * (shape[2] * shape[3] if len(shape) == 4 else 1)
            state[key] = torch.randn(shape, generator=generator) * (2.0 / fan_in) ** 0.5
    return state


def randomise_batch_norms(module: torch.nn.Module, seed: int = 0) -> None:
    """Random affine parameters and running statistics for every batch norm of ``module`` (in place)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for submodule in module.modules():
            if isinstance(submodule, torch.nn.BatchNorm2d):
                channels = submodule.num_features
                submodule.weight.copy_(0.5 + torch.rand(channels, generator=generator))
                submodule.bias.copy_(0.1 * torch.randn(channels, generator=generator))
                submodule.running_mean.copy_(0.1 * torch.randn(channels, generator=generator))
                submodule.running_var.copy_(0.5 + torch.rand(channels, generator=generator))


TINY_CHANNELS = {
    "cnn14": {"conv_block_channels": (4, 8, 8, 16)},
    "resnet38": {"conv_block_channels": (4, 16), "stage_channels": (4, 8, 8), "stage_blocks": (2, 1, 2)},
}
"""Official-layout sizes matching ``tiny_models.tiny_panns_config``."""
TINY_CLASSES = 5


def tiny_official_state(architecture: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """A tiny checkpoint in the official layout for ``tiny_models``' 16 kHz front end (torchlibrosa weights)."""
    shapes = official_shapes(
        architecture, n_fft=512, mel_bins=32, classes=TINY_CLASSES, **TINY_CHANNELS[architecture]
    )
    return random_official_state_dict(shapes, torchlibrosa_front_end(16000, 512, 160, 32, 50.0, 8000.0), seed)


def official_resnet38_forward(
    state: dict[str, torch.Tensor], logmel: torch.Tensor
) -> dict[str, torch.Tensor]:
    """ResNet38.forward of the PANNs code in eval mode, from log-mel ``(batch, frames, mel)`` and the
    official state dict (functional: every layer read by its official key)."""

    def batch_norm(x, prefix):
        return functional.batch_norm(
            x,
            state[f"{prefix}.running_mean"],
            state[f"{prefix}.running_var"],
            state[f"{prefix}.weight"],
            state[f"{prefix}.bias"],
            training=False,
            eps=1e-5,
        )

    def conv_block(x, prefix, pool):
        x = functional.relu(
            batch_norm(functional.conv2d(x, state[f"{prefix}.conv1.weight"], padding=1), f"{prefix}.bn1")
        )
        x = functional.relu(
            batch_norm(functional.conv2d(x, state[f"{prefix}.conv2.weight"], padding=1), f"{prefix}.bn2")
        )
        return functional.avg_pool2d(x, kernel_size=pool)

    x = logmel[:, None]
    x = batch_norm(x.transpose(1, 3), "bn0").transpose(1, 3)
    x = conv_block(x, "conv_block1", 2)
    stage = 1
    while f"resnet.layer{stage}.0.conv1.weight" in state:
        block = 0
        while f"resnet.layer{stage}.{block}.conv1.weight" in state:
            prefix = f"resnet.layer{stage}.{block}"
            strided = stage > 1 and block == 0
            out = functional.avg_pool2d(x, 2) if strided else x
            out = functional.relu(
                batch_norm(
                    functional.conv2d(out, state[f"{prefix}.conv1.weight"], padding=1), f"{prefix}.bn1"
                )
            )
            out = batch_norm(
                functional.conv2d(out, state[f"{prefix}.conv2.weight"], padding=1), f"{prefix}.bn2"
            )
            if strided:
                identity = functional.conv2d(
                    functional.avg_pool2d(x, 2), state[f"{prefix}.downsample.1.weight"]
                )
                identity = batch_norm(identity, f"{prefix}.downsample.2")
            elif f"{prefix}.downsample.0.weight" in state:
                identity = batch_norm(
                    functional.conv2d(x, state[f"{prefix}.downsample.0.weight"]), f"{prefix}.downsample.1"
                )
            else:
                identity = x
            x = functional.relu(out + identity)
            block += 1
        stage += 1
    x = functional.avg_pool2d(x, 2)
    x = conv_block(x, "conv_block_after1", 1)
    x = x.mean(dim=3)
    x = x.max(dim=2).values + x.mean(dim=2)
    embedding = functional.relu(functional.linear(x, state["fc1.weight"], state["fc1.bias"]))
    logits = functional.linear(embedding, state["fc_audioset.weight"], state["fc_audioset.bias"])
    return {"embedding": embedding, "clipwise_output": torch.sigmoid(logits)}


@pytest.fixture(scope="session")
def panns_inference_models(tmp_path_factory):
    """``panns_inference.models``, imported under a temporary HOME holding a stub label CSV.

    ``panns_inference`` downloads ``~/panns_data/class_labels_indices.csv`` when imported unless it exists.
    """
    home = tmp_path_factory.mktemp("panns_home")
    labels = Path(home, "panns_data", "class_labels_indices.csv")
    labels.parent.mkdir(parents=True)
    labels.write_text("index,mid,display_name\n0,/m/09x0r,Speech\n1,/m/05zppz,Male speech\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        pytest.importorskip("panns_inference", reason="panns-inference (the [dev] extra) is the reference")
        return importlib.import_module("panns_inference.models")
