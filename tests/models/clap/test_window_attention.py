"""CLAP's HTS-AT window attention through SDPA against transformers' ``ClapAudioSelfAttention``: the same outputs
and gradients (float32 on CPU) on tiny towers with shifted windows, on converted tiny CLAP models and at
``laion/clap-htsat-unfused``'s sizes, and the switch that selects it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tiny_models import (
    random_waveforms,
    save_tiny_clap_checkpoint,
    tiny_clap_config,
    tiny_clap_feature_extractor,
)
from transformers import ClapAudioConfig, ClapAudioModel
from transformers.models.clap.modeling_clap import ClapAudioSelfAttention

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.models.clap.window_attention import ClapAudioSdpaSelfAttention, use_sdpa_window_attention

PARITY_BOUND = 1e-5


def randomise_position_biases(tower: torch.nn.Module, seed: int = 0) -> None:
    """transformers starts the relative position bias tables at zero, where a misplaced bias would not show."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in tower.named_parameters():
            if name.endswith("relative_position_bias_table"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator))


def tiny_audio_config(fused: bool, depths: list[int]) -> ClapAudioConfig:
    """The tiny CLAP test tower's audio config; ``depths`` of 2 give each stage a block with shifted windows."""
    return ClapAudioConfig(**{**tiny_clap_config(fused).audio_config.to_dict(), "depths": depths})


def audio_inputs(fused: bool, count: int = 3) -> dict[str, torch.Tensor]:
    np.random.seed(0)  # CLAP's extractor draws the fused "is_longer" clip at random
    waveforms = random_waveforms(count - 1) + random_waveforms(1, seed=1, seconds=2.5)  # one longer clip
    features = tiny_clap_feature_extractor(fused)(waveforms, sampling_rate=16000, return_tensors="pt")
    return {"input_features": features["input_features"], "is_longer": features["is_longer"]}


def eager_and_sdpa(tower: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``tower`` (randomised position biases) and a copy whose window attention goes through SDPA."""
    randomise_position_biases(tower)
    sdpa = copy.deepcopy(tower)
    assert use_sdpa_window_attention(sdpa) == sum(
        isinstance(module, ClapAudioSelfAttention) for module in tower.modules()
    )
    return tower, sdpa


def assert_same_outputs_and_gradients(
    eager: torch.nn.Module, sdpa: torch.nn.Module, forward: str, inputs: dict[str, torch.Tensor]
) -> None:
    """``getattr(model, forward)(**inputs)`` agree within :data:`PARITY_BOUND`; so do the gradients of a random
    weighting of them, relative to the largest gradient. (The bias of ``key`` gets a gradient of exactly 0 in exact
    arithmetic, since the softmax ignores a constant added to a row: both give rounding noise there.)"""
    outputs = [getattr(model, forward)(**inputs) for model in (eager, sdpa)]
    tensors = [output if isinstance(output, torch.Tensor) else output.last_hidden_state for output in outputs]
    weights = torch.randn(tensors[0].shape, generator=torch.Generator().manual_seed(1))
    assert (tensors[0] - tensors[1]).abs().max() < PARITY_BOUND
    for tensor in tensors:
        (tensor * weights).sum().backward()
    gradients = [
        {name: parameter.grad for name, parameter in model.named_parameters() if parameter.grad is not None}
        for model in (eager, sdpa)
    ]
    assert gradients[0].keys() == gradients[1].keys()
    assert any(name.endswith("relative_position_bias_table") for name in gradients[0])
    largest = max(gradient.abs().max() for gradient in gradients[0].values())
    for name, gradient in gradients[0].items():
        assert (gradient - gradients[1][name]).abs().max() <= PARITY_BOUND * largest, name


@pytest.mark.parametrize("depths", [[1, 1], [2, 2]], ids=["windows", "shifted-windows"])
@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_sdpa_equals_transformers_on_tiny_towers(fused, depths):
    torch.manual_seed(0)
    eager, sdpa = eager_and_sdpa(ClapAudioModel(tiny_audio_config(fused, depths)).eval())
    inputs = audio_inputs(fused)
    if fused:
        assert inputs["is_longer"].any() and not inputs["is_longer"].all()
    assert_same_outputs_and_gradients(eager, sdpa, "forward", inputs)
    shifted = [layer.shift_size > 0 for stage in eager.audio_encoder.layers for layer in stage.blocks]
    assert any(shifted) == (depths == [2, 2])  # the shifted-window mask was used where the depths ask for it


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_converted_tiny_clap_models_embed_and_learn_alike(fused, tmp_path):
    save_tiny_clap_checkpoint(tmp_path, fused=fused)
    eager = AtrDualEncoderModel.from_clap(tmp_path).eval()
    sdpa = AtrDualEncoderModel.from_clap(tmp_path, audio_window_attention="sdpa").eval()
    for model in (eager, sdpa):
        randomise_position_biases(model)
    kinds = {
        type(module) for module in sdpa.audio_model.modules() if isinstance(module, ClapAudioSelfAttention)
    }
    assert kinds == {ClapAudioSdpaSelfAttention}
    assert not any(isinstance(module, ClapAudioSdpaSelfAttention) for module in eager.modules())
    processor = AtrProcessor.from_clap(tmp_path)
    np.random.seed(0)
    features = processor(audio=random_waveforms(3), return_tensors="pt")
    inputs = {"input_features": features["input_features"], "is_longer": features["is_longer"]}
    assert_same_outputs_and_gradients(eager, sdpa, "get_audio_features", inputs)


@pytest.mark.slow
def test_sdpa_equals_transformers_at_clap_htsat_unfused_sizes():
    config = ClapAudioConfig()  # laion/clap-htsat-unfused's audio tower: window 8, depths 2-2-6-2, 768 wide
    assert (config.window_size, list(config.depths), config.hidden_size) == (8, [2, 2, 6, 2], 768)
    torch.manual_seed(0)
    eager, sdpa = eager_and_sdpa(ClapAudioModel(config).eval())
    features = torch.randn(1, 1, 1001, config.num_mel_bins, generator=torch.Generator().manual_seed(2))
    assert_same_outputs_and_gradients(eager, sdpa, "forward", {"input_features": features})


def test_the_switch_keeps_the_weights_and_goes_both_ways():
    torch.manual_seed(0)
    tower, sdpa = eager_and_sdpa(ClapAudioModel(tiny_audio_config(False, [2, 2])).eval())
    assert sdpa.state_dict().keys() == tower.state_dict().keys()
    assert all(torch.equal(sdpa.state_dict()[name], value) for name, value in tower.state_dict().items())
    features = audio_inputs(False)["input_features"]
    with torch.no_grad():
        # SDPA gives no probabilities: asked for them, the module computes as transformers' does.
        expected, given = (
            model(input_features=features, output_attentions=True).attentions for model in (tower, sdpa)
        )
        assert len(expected) == len(given) and all(torch.equal(a, b) for a, b in zip(expected, given))
        assert use_sdpa_window_attention(sdpa, enabled=False) == 4
        assert not any(isinstance(module, ClapAudioSdpaSelfAttention) for module in sdpa.modules())
        assert torch.equal(
            sdpa(input_features=features).last_hidden_state, tower(input_features=features).last_hidden_state
        )
    assert use_sdpa_window_attention(torch.nn.Linear(2, 2)) == 0


def test_a_saved_model_keeps_its_window_attention(tmp_path):
    save_tiny_clap_checkpoint(tmp_path / "clap")
    AtrDualEncoderModel.from_clap(tmp_path / "clap", audio_window_attention="sdpa").save_pretrained(
        tmp_path / "atr"
    )
    reloaded = AtrDualEncoderModel.from_pretrained(tmp_path / "atr")
    assert reloaded.config.audio_window_attention == "sdpa"
    assert any(isinstance(module, ClapAudioSdpaSelfAttention) for module in reloaded.audio_model.modules())
