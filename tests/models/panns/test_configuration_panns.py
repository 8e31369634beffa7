from __future__ import annotations

import pytest

from hf_atr.models.panns.configuration_panns import PannsConfig


def test_defaults_are_the_published_networks():
    cnn14 = PannsConfig()
    assert cnn14.conv_block_channels == [64, 128, 256, 512, 1024, 2048]
    assert cnn14.hidden_size == 2048 and cnn14.downsampling_factor == 32 and cnn14.num_mel_bins == 64
    resnet38 = PannsConfig(architecture="resnet38")
    assert resnet38.conv_block_channels == [64, 2048] and resnet38.resnet_stage_blocks == [3, 4, 6, 3]
    assert resnet38.resnet_stage_channels == [64, 128, 256, 512]
    assert resnet38.hidden_size == 2048 and resnet38.downsampling_factor == 32


def test_json_round_trip(tmp_path):
    config = PannsConfig(
        architecture="resnet38",
        resnet_stage_channels=[4, 8],
        resnet_stage_blocks=[1, 2],
        conv_block_channels=[4, 16],
        use_embedding_layer=False,
    )
    config.save_pretrained(tmp_path)
    reloaded = PannsConfig.from_pretrained(tmp_path)
    assert reloaded.to_dict() == config.to_dict()
    assert reloaded.hidden_size == 16 and reloaded.downsampling_factor == 8
    assert "hidden_size" not in (tmp_path / "config.json").read_text()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"architecture": "cnn10"}, r"`architecture` must be one of \('cnn14', 'resnet38'\), got 'cnn10'"),
        ({"resnet_stage_blocks": [1]}, "`resnet_stage_blocks` applies to architecture='resnet38' only"),
        ({"conv_block_channels": [64]}, "cnn14 needs at least 2 ConvBlocks"),
        ({"architecture": "resnet38", "conv_block_channels": [4, 8, 16]}, "exactly two conv_block_channels"),
        ({"architecture": "resnet38", "resnet_stage_channels": [4, 8]}, "need one entry per stage"),
        ({"conv_block_channels": [4, 0]}, "`conv_block_channels` must hold positive integers"),
        ({"block_dropout_prob": 1.0}, r"`block_dropout_prob` must be in \[0, 1\)"),
        ({"num_mel_bins": 0}, "`num_mel_bins` must be positive"),
    ],
)
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PannsConfig(**kwargs)
