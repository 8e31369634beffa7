"""Starting points for the commands as users have them: tower directories saved with ``save_pretrained`` (``hf-atr
train``), a saved model with its processor, a folder of audio files and a saved dataset (``index``, ``search``,
``evaluate``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms, save_towers

from hf_atr.data.audio import encode_wav


@pytest.fixture(scope="session")
def towers(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny AST audio tower and a tiny BERT text tower, each with its feature extractor or tokenizer."""
    return save_towers(tmp_path_factory.mktemp("towers"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    processor = make_processor()
    make_model(processor=processor).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("audio")
    (directory / "birds").mkdir()
    for name, waveform in zip(["dog.wav", "birds/morning.flac", "siren.wav"], random_waveforms(3)):
        subtype = "PCM_16" if name.endswith("flac") else "FLOAT"
        (directory / name).write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype=subtype))
    (directory / "notes.txt").write_text("not audio")
    return directory


@pytest.fixture(scope="module")
def saved_split(tmp_path_factory):
    """Four clips that all carry the same two captions, saved as the validation split of a DatasetDict."""
    waveforms = random_waveforms(4, seed=2)
    split = Dataset.from_dict(
        {
            "audio_id": [f"clip{i}" for i in range(4)],
            "audio": [
                {"bytes": encode_wav(w, SAMPLING_RATE, subtype="FLOAT"), "path": None} for w in waveforms
            ],
            "captions": [["a dog barks", "birds sing"]] * 4,
        }
    )
    directory = tmp_path_factory.mktemp("saved")
    DatasetDict({"validation": split}).save_to_disk(str(directory / "data"))
    return directory / "data"
