"""The dual encoder's starting points: two saved backbones combined; the checkpoint fields a conversion fixes.

``from_clap`` and ``from_pe_audio`` are tested against their checkpoints in tests/models/clap and tests/models/pe_audio.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_model

from hf_atr import AtrDualEncoderModel
from hf_atr.model_starting_points import AtrStartingPoints, checkpoint_config_kwargs


def test_from_audio_text_pretrained_combines_saved_backbones(tmp_path, processor):
    source = make_model(processor=processor)
    source.audio_model.save_pretrained(tmp_path / "audio")
    source.text_model.save_pretrained(tmp_path / "text")
    model = AtrDualEncoderModel.from_audio_text_pretrained(
        str(tmp_path / "audio"), str(tmp_path / "text"), projection_dim=8, scoring="euclidean"
    )
    assert model.config.projection_dim == 8 and model.config.scoring == "euclidean"
    for name, tensor in source.audio_model.state_dict().items():
        torch.testing.assert_close(model.audio_model.state_dict()[name], tensor)
    for name, tensor in source.text_model.state_dict().items():
        torch.testing.assert_close(model.text_model.state_dict()[name], tensor)


def test_towers_combined_from_pretrained_keep_the_padding_mask(tmp_path, processor):
    """Building the composite config used to reset a loaded tower's attention implementation to None, so that
    eager attention received an SDPA-style mask and padded captions embedded differently."""
    source = make_model(processor=processor)
    source.audio_model.save_pretrained(tmp_path / "audio")
    source.text_model.save_pretrained(tmp_path / "text")
    model = AtrDualEncoderModel.from_audio_text_pretrained(
        str(tmp_path / "audio"), str(tmp_path / "text")
    ).eval()
    with torch.no_grad():
        padded = model.get_text_features(**processor(text=["a dog barks loudly while birds sing", "a dog"]))
        alone = model.get_text_features(**processor(text=["a dog"]))
    assert (padded[1] - alone[0]).abs().max() < 1e-6


def test_checkpoint_config_kwargs_splits_config_fields_and_refuses_the_fixed_ones():
    kwargs = {"objective": "sigmoid", "freeze_audio": True, "revision": "main"}
    assert checkpoint_config_kwargs(kwargs, ("projection_dim",), "from_clap", "CLAP") == {
        "objective": "sigmoid",
        "freeze_audio": True,
    }
    assert kwargs == {"revision": "main"}  # what is left goes to the checkpoint's from_pretrained
    with pytest.raises(ValueError, match=r"from_clap: \['projection_dim'\] are set by the CLAP checkpoint"):
        checkpoint_config_kwargs(
            {"projection_dim": 8, "scoring": "dot"}, ("projection_dim",), "from_clap", "CLAP"
        )
    assert issubclass(AtrDualEncoderModel, AtrStartingPoints)
