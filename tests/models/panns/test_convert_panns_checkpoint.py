from __future__ import annotations

import pytest
import torch
from panns_reference import TINY_CLASSES as CLASSES
from panns_reference import tiny_official_state
from tiny_models import tiny_panns_config, tiny_panns_feature_extractor
from transformers import AutoFeatureExtractor, AutoModel, AutoModelForAudioClassification

import hf_atr  # noqa: F401  (registers the Auto classes)
from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.models.panns.convert_panns_checkpoint import (
    PannsCheckpointError,
    convert_panns_checkpoint,
    load_official_state_dict,
    main,
    read_audioset_labels,
)
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.models.panns.modeling_panns import PannsForAudioClassification, PannsModel


def convert(path, out, architecture="cnn14", **kwargs):
    return convert_panns_checkpoint(
        path,
        out,
        architecture=architecture,
        config=tiny_panns_config(architecture),
        feature_extractor=kwargs.pop("feature_extractor", tiny_panns_feature_extractor()),
        **kwargs,
    )


@pytest.mark.parametrize("architecture", ["cnn14", "resnet38"])
def test_every_official_key_lands_in_the_saved_model(tmp_path, architecture):
    state = tiny_official_state(architecture)
    torch.save({"model": state, "iteration": 660000}, tmp_path / "checkpoint.pth")
    convert(tmp_path / "checkpoint.pth", tmp_path / "out", architecture)
    assert (tmp_path / "out" / "model.safetensors").is_file()

    classifier = AutoModelForAudioClassification.from_pretrained(tmp_path / "out")
    assert type(classifier) is PannsForAudioClassification
    assert classifier.config.num_labels == CLASSES
    assert classifier.config.problem_type == "multi_label_classification"
    saved = classifier.state_dict()
    front_end = {"spectrogram_extractor.stft.conv_real.weight", "spectrogram_extractor.stft.conv_imag.weight",
                 "logmel_extractor.melW"}  # fmt: skip
    weights = {key: value for key, value in state.items() if key not in front_end}
    assert len(saved) == len(weights)
    for key, value in weights.items():
        hf_key = (
            key.replace("fc_audioset.", "classifier.") if key.startswith("fc_audioset.") else f"panns.{key}"
        )
        assert torch.equal(saved[hf_key], value), key

    backbone = AutoModel.from_pretrained(tmp_path / "out")
    assert type(backbone) is PannsModel
    for key, value in backbone.state_dict().items():
        assert torch.equal(value, state[key]), key
    extractor = AutoFeatureExtractor.from_pretrained(tmp_path / "out")
    assert type(extractor) is PannsFeatureExtractor
    assert extractor.to_dict() == tiny_panns_feature_extractor().to_dict()


def test_a_plain_state_dict_file_converts(tmp_path):
    torch.save(tiny_official_state("cnn14"), tmp_path / "plain.pth")
    model = convert(tmp_path / "plain.pth", tmp_path / "out")
    assert model.config.num_labels == CLASSES


def test_missing_unexpected_and_mismatched_keys_are_all_named(tmp_path):
    state = tiny_official_state("cnn14")
    del state["conv_block2.bn1.running_var"]
    state["conv_block9.conv1.weight"] = torch.zeros(3, 3, 3, 3)
    state["fc1.weight"] = torch.zeros(16, 8)
    torch.save({"model": state}, tmp_path / "bad.pth")
    with pytest.raises(PannsCheckpointError) as error:
        convert(tmp_path / "bad.pth", tmp_path / "out")
    message = str(error.value)
    assert "bad.pth" in message
    assert "missing keys: conv_block2.bn1.running_var" in message
    assert "unexpected keys: conv_block9.conv1.weight" in message
    assert "mismatched shapes: fc1.weight (checkpoint (16, 8) vs model (16, 16))" in message
    assert not (tmp_path / "out").exists()


def test_a_resnet38_checkpoint_is_not_taken_for_cnn14(tmp_path):
    torch.save(tiny_official_state("resnet38"), tmp_path / "resnet38.pth")
    with pytest.raises(PannsCheckpointError, match=r"unexpected keys: .*resnet\.layer1\.0\.conv1\.weight"):
        convert(tmp_path / "resnet38.pth", tmp_path / "out", "cnn14")


def test_a_front_end_other_than_the_feature_extractors_is_named(tmp_path):
    torch.save(tiny_official_state("cnn14"), tmp_path / "checkpoint.pth")
    other_range = PannsFeatureExtractor(
        feature_size=32, sampling_rate=16000, fft_window_size=512, hop_length=160, frequency_max=7000.0
    )
    with pytest.raises(
        PannsCheckpointError, match=r"front end differs: logmel_extractor\.melW \(max"
    ) as error:
        convert(tmp_path / "checkpoint.pth", tmp_path / "out", feature_extractor=other_range)
    assert "conv_real" not in str(error.value)
    other_fft = PannsFeatureExtractor(
        feature_size=32, sampling_rate=16000, fft_window_size=256, frequency_max=8000.0
    )
    with pytest.raises(PannsCheckpointError, match=r"conv_real\.weight \(checkpoint shape \(257, 1, 512\)"):
        convert(tmp_path / "checkpoint.pth", tmp_path / "out", feature_extractor=other_fft)


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.pth does not exist"):
        load_official_state_dict(tmp_path / "nothing.pth")
    (tmp_path / "garbage.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(PannsCheckpointError, match="Cannot load .*garbage.pth .*weights_only=True"):
        load_official_state_dict(tmp_path / "garbage.pth")
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    with pytest.raises(PannsCheckpointError, match="list.pth holds a list"):
        load_official_state_dict(tmp_path / "list.pth")
    torch.save({"model": {"fc1.weight": torch.zeros(1), "step": 3}}, tmp_path / "mixed.pth")
    with pytest.raises(PannsCheckpointError, match=r"not tensors: \['step'\]"):
        load_official_state_dict(tmp_path / "mixed.pth")


def test_label_names_from_the_audioset_csv(tmp_path):
    torch.save(tiny_official_state("cnn14"), tmp_path / "checkpoint.pth")
    names = ["Speech", "Dog", "Siren", "Music", "Silence"]
    rows = "".join(f'{index},/m/{index},"{name}"\n' for index, name in enumerate(names))
    (tmp_path / "labels.csv").write_text("index,mid,display_name\n" + rows)
    model = convert(tmp_path / "checkpoint.pth", tmp_path / "out", labels_csv=tmp_path / "labels.csv")
    assert model.config.id2label == dict(enumerate(names)) and model.config.label2id["Siren"] == 2
    (tmp_path / "short.csv").write_text("index,mid,display_name\n" + rows.split("\n", 1)[1])
    with pytest.raises(ValueError, match=r"short.csv has 4 labels .*classifier has 5 rows"):
        convert(tmp_path / "checkpoint.pth", tmp_path / "out2", labels_csv=tmp_path / "short.csv")


def test_bad_label_files_are_named(tmp_path):
    (tmp_path / "columns.csv").write_text("id,name\n0,Speech\n")
    with pytest.raises(ValueError, match="columns.csv needs the columns index and display_name"):
        read_audioset_labels(tmp_path / "columns.csv")
    (tmp_path / "index.csv").write_text("index,mid,display_name\n0,/m/0,Speech\nx,/m/1,Dog\n")
    with pytest.raises(ValueError, match="index.csv, line 3: index 'x' is not an integer"):
        read_audioset_labels(tmp_path / "index.csv")


def test_config_and_extractor_must_agree_on_mel_bins(tmp_path):
    torch.save(tiny_official_state("cnn14"), tmp_path / "checkpoint.pth")
    with pytest.raises(ValueError, match="num_mel_bins=64 but the feature extractor makes 32 mel bins"):
        convert_panns_checkpoint(
            tmp_path / "checkpoint.pth",
            tmp_path / "out",
            config=PannsConfig(conv_block_channels=[4, 8, 8, 16]),
            feature_extractor=tiny_panns_feature_extractor(),
        )


def test_command_line(tmp_path, capsys):
    torch.save({"model": tiny_official_state("resnet38")}, tmp_path / "checkpoint.pth")
    tiny_panns_config("resnet38").to_json_file(tmp_path / "config.json")
    main(
        ["--checkpoint", str(tmp_path / "checkpoint.pth"), "--architecture", "resnet38", "--out",
         str(tmp_path / "out"), "--config", str(tmp_path / "config.json"), "--sample-rate", "16000",
         "--window-size", "512", "--hop-size", "160", "--mel-bins", "32", "--fmax", "8000"]
    )  # fmt: skip
    assert "PANNs resnet38" in capsys.readouterr().out
    assert type(AutoModel.from_pretrained(tmp_path / "out")) is PannsModel
    assert AutoFeatureExtractor.from_pretrained(tmp_path / "out").hop_length == 160
