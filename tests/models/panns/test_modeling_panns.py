from __future__ import annotations

import numpy as np
import pytest
import torch
from panns_reference import (
    official_resnet38_forward,
    official_shapes,
    random_official_state_dict,
    randomise_batch_norms,
    torchlibrosa_front_end,
)
from tiny_models import tiny_panns_config, tiny_panns_feature_extractor

from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.models.panns.convert_panns_checkpoint import convert_state_dict
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.models.panns.modeling_panns import PannsForAudioClassification, PannsModel

CLIP_32K = 0.1 * np.random.default_rng(0).standard_normal((2, 32000))  # two 1-s clips at 32 kHz


@pytest.fixture(scope="module")
def official_cnn14(panns_inference_models):
    """panns_inference's Cnn14 at its published size, random weights and batch norms, float64, eval mode."""
    torch.manual_seed(0)
    model = panns_inference_models.Cnn14(32000, 1024, 320, 64, 50, 14000, 527)
    randomise_batch_norms(model)
    return model.double().eval()


@pytest.mark.slow
def test_cnn14_embedding_equals_panns_inference_in_float64(official_cnn14):
    extractor = PannsFeatureExtractor()
    ours = convert_state_dict(official_cnn14.state_dict(), PannsConfig(num_labels=527), extractor).double()
    with torch.no_grad():
        reference = official_cnn14(torch.from_numpy(CLIP_32K))
        features = torch.from_numpy(extractor.log_mel_spectrogram(list(CLIP_32K)))
        backbone = ours.panns(features)
        logits = ours(features).logits
    embedding = reference["embedding"]
    assert (embedding > 0).float().mean() > 0.2  # not a dead (all-zero) embedding
    assert backbone.last_hidden_state.shape == (2, 101 // 32, 2048)
    assert (backbone.pooler_output - embedding).abs().max() < 1e-5
    assert (torch.sigmoid(logits) - reference["clipwise_output"]).abs().max() < 1e-5


@pytest.mark.slow
def test_resnet38_shares_the_cnn14_front_end_and_head(official_cnn14):
    """Full-size ResNet38 in the official layout with CNN14's bn0, conv_block1, fc1 and fc_audioset: the
    first block's output and the head (global pool + fc1 on the last map) equal panns_inference's Cnn14."""
    cnn14_state = official_cnn14.state_dict()
    shapes = official_shapes("resnet38")
    state = random_official_state_dict(shapes, torchlibrosa_front_end(32000, 1024, 320, 64, 50.0, 14000.0))
    shared = [key for key in shapes if key.startswith(("bn0.", "conv_block1.", "fc1.", "fc_audioset."))]
    state.update({key: cnn14_state[key].float() for key in shared})
    extractor = PannsFeatureExtractor()
    ours = convert_state_dict(state, PannsConfig(architecture="resnet38", num_labels=527), extractor).double()

    first_blocks = {}
    official_cnn14.conv_block1.register_forward_hook(
        lambda module, args, out: first_blocks.update(official=out)
    )
    ours.panns.conv_block1.register_forward_hook(lambda module, args, out: first_blocks.update(ours=out))
    last_map = torch.rand(2, 2048, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    official_cnn14.conv_block6.register_forward_hook(lambda module, args, out: last_map)
    ours.panns.conv_block_after1.register_forward_hook(lambda module, args, out: last_map)
    try:
        with torch.no_grad():
            reference = official_cnn14(torch.from_numpy(CLIP_32K))
            features = torch.from_numpy(extractor.log_mel_spectrogram(list(CLIP_32K)))
            pooled = ours.panns(features).pooler_output
    finally:
        for module in (official_cnn14.conv_block1, official_cnn14.conv_block6):
            module._forward_hooks.clear()
    assert first_blocks["ours"].shape == first_blocks["official"].shape == (2, 64, 50, 32)
    assert (first_blocks["ours"] - first_blocks["official"]).abs().max() < 1e-5
    assert (pooled - reference["embedding"]).abs().max() < 1e-10


@pytest.mark.parametrize(
    ("conv_block_channels", "stage_channels"),
    [((4, 16), (4, 8, 8)), ((4, 16), (6, 8, 8))],  # the second widens in stage 1: a stride-1 shortcut
)
def test_resnet38_equals_a_functional_forward_of_the_official_layout(conv_block_channels, stage_channels):
    extractor = tiny_panns_feature_extractor()
    shapes = official_shapes(
        "resnet38",
        n_fft=512,
        mel_bins=32,
        conv_block_channels=conv_block_channels,
        stage_channels=stage_channels,
        stage_blocks=(2, 1, 2),
        classes=5,
    )
    state = random_official_state_dict(shapes, torchlibrosa_front_end(16000, 512, 160, 32, 50.0, 8000.0))
    config = tiny_panns_config(
        "resnet38", conv_block_channels=list(conv_block_channels), resnet_stage_channels=list(stage_channels)
    )
    config.num_labels = 5
    model = convert_state_dict(state, config, extractor).double()
    clips = 0.1 * np.random.default_rng(1).standard_normal((3, 16000))
    features = torch.from_numpy(extractor.log_mel_spectrogram(list(clips)))
    with torch.no_grad():
        reference = official_resnet38_forward({key: value.double() for key, value in state.items()}, features)
        embedding = model.panns(features).pooler_output
        clipwise = torch.sigmoid(model(features).logits)
    assert (reference["embedding"] > 0).float().mean() > 0.2
    assert (embedding - reference["embedding"]).abs().max() < 1e-10
    assert (clipwise - reference["clipwise_output"]).abs().max() < 1e-10


@pytest.mark.parametrize("architecture", ["cnn14", "resnet38"])
def test_published_sizes_have_the_papers_parameter_counts(architecture):
    with torch.device("meta"):
        model = PannsForAudioClassification(PannsConfig(architecture=architecture, num_labels=527))
    parameters = sum(parameter.numel() for parameter in model.parameters())
    assert round(parameters / 1e6, 1) == {"cnn14": 80.8, "resnet38": 73.8}[architecture]  # PANNs Tab. 3 / 8


@pytest.mark.parametrize("architecture", ["cnn14", "resnet38"])
def test_outputs_and_the_embedding_without_fc1(architecture):
    torch.manual_seed(0)
    features = torch.randn(2, 101, 32)
    model = PannsModel(tiny_panns_config(architecture)).eval()
    output = model(features)
    steps = 101 // model.config.downsampling_factor
    assert output.last_hidden_state.shape == (2, steps, 16) and output.pooler_output.shape == (2, 16)
    pooled = output.last_hidden_state.max(dim=1).values + output.last_hidden_state.mean(dim=1)
    torch.testing.assert_close(output.pooler_output, torch.relu(model.fc1(pooled)))
    assert torch.equal(model(features, return_dict=False)[1], output.pooler_output)

    without_fc1 = PannsModel(tiny_panns_config(architecture, use_embedding_layer=False)).eval()
    assert without_fc1.fc1 is None and not any(key.startswith("fc1") for key in without_fc1.state_dict())
    bare = without_fc1(features)
    torch.testing.assert_close(
        bare.pooler_output, bare.last_hidden_state.max(dim=1).values + bare.last_hidden_state.mean(dim=1)
    )


def test_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    model = PannsModel(tiny_panns_config("resnet38"))
    features = torch.randn(2, 101, 32)
    model.train()
    assert not torch.equal(model(features).pooler_output, model(features).pooler_output)
    model.eval()
    assert torch.equal(model(features).pooler_output, model(features).pooler_output)


def test_initialisation_is_panns_and_reproducible():
    torch.manual_seed(3)
    model = PannsModel(tiny_panns_config("resnet38"))
    torch.manual_seed(3)
    again = PannsModel(tiny_panns_config("resnet38"))
    for (name, value), other in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(value, other), name
    block = model.resnet.layer2[0]
    assert torch.all(block.bn2.weight == 0) and torch.all(block.bn1.weight == 1)
    assert torch.all(model.fc1.bias == 0) and torch.all(model.bn0.running_var == 1)
    bound = (6 / (model.fc1.in_features + model.fc1.out_features)) ** 0.5  # Xavier-uniform
    assert model.fc1.weight.abs().max() <= bound and model.fc1.weight.std() > bound / 3


@pytest.mark.parametrize("architecture", ["cnn14", "resnet38"])
def test_save_and_reload_keeps_every_weight_and_statistic(tmp_path, architecture):
    torch.manual_seed(0)
    model = PannsModel(tiny_panns_config(architecture))
    randomise_batch_norms(model)
    model.eval().save_pretrained(tmp_path)
    reloaded = PannsModel.from_pretrained(tmp_path).eval()
    for (name, value), other in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(value, other), name  # the bytes written are the bytes read
    features = torch.randn(1, 101, 32)
    with torch.no_grad():
        expected = model(features).pooler_output
        # Tensors read from safetensors sit at addresses that are not 64-byte aligned (data_ptr() % 64 == 56),
        # where torch may run another vectorised kernel: equal weights give outputs that differ in the last bit
        # (up to 6e-8), so they are compared within a tolerance 25x that, and 10x below what one weight of the
        # first convolution off by 0.01 changes (checked below).
        torch.testing.assert_close(reloaded(features).pooler_output, expected, rtol=1e-5, atol=1e-6)
        reloaded.conv_block1.conv1.weight[0, 0, 0, 0] += 0.01
        with pytest.raises(AssertionError, match="Tensor-likes are not close"):
            torch.testing.assert_close(reloaded(features).pooler_output, expected, rtol=1e-5, atol=1e-6)


def test_classification_losses():
    torch.manual_seed(0)
    config = tiny_panns_config(num_labels=3, problem_type="multi_label_classification")
    model = PannsForAudioClassification(config).eval()
    features = torch.randn(2, 101, 32)
    targets = torch.tensor([[1, 0, 1], [0, 0, 1]])
    output = model(features, labels=targets)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(output.logits, targets.float())
    torch.testing.assert_close(output.loss, expected)

    single = PannsForAudioClassification(tiny_panns_config(num_labels=3)).eval()
    output = single(features, labels=torch.tensor([2, 0]))
    torch.testing.assert_close(
        output.loss, torch.nn.functional.cross_entropy(output.logits, torch.tensor([2, 0]))
    )
    assert single(features, return_dict=False)[0].shape == (2, 3)


@pytest.mark.parametrize(
    ("features", "message"),
    [
        (torch.zeros(2, 101, 64), r"input_features of shape \(batch, frames, 32\).*got \(2, 101, 64\)"),
        (torch.zeros(2, 7, 32), "needs at least 8 frames and mel bins, got 7 frames"),
    ],
)
def test_bad_input_features_are_named(features, message):
    with pytest.raises(ValueError, match=message):
        PannsModel(tiny_panns_config())(features)
