"""hf_atr.dataset_features: a dataset featurised by the given ``featurize``, undecodable clips left out and named."""

from __future__ import annotations

import logging

import numpy as np
from datasets import Dataset
from tiny_models import SAMPLING_RATE, make_processor, random_waveforms

from hf_atr.data.audio import encode_wav
from hf_atr.dataset_features import DECODE_ERROR_COLUMN, FAILED_CLIPS_NAMED, extract_split


def test_extract_split_featurises_each_batch_with_featurize_and_leaves_out_what_cannot_be_decoded(caplog):
    processor = make_processor()
    clips = [{"bytes": encode_wav(w, SAMPLING_RATE), "path": None} for w in random_waveforms(2)]
    bad = [{"bytes": b"", "path": f"empty{index}.wav"} for index in range(FAILED_CLIPS_NAMED + 1)]
    dataset = Dataset.from_dict(
        {"audio_id": ["a", "b", *(f"e{i}" for i in range(len(bad)))], "audio": [*clips, *bad]}
    )
    seen = []

    def featurize(arrays, names):
        seen.append(list(names))
        return {
            "input_values": np.stack([processor(audio=array)["input_values"][0].numpy() for array in arrays])
        }

    with caplog.at_level(logging.WARNING):
        features = extract_split(
            processor, featurize, dataset, split="train", audio_column="audio", batch_size=4, num_proc=None,
            keep_audio=False, strict=False, cache_file_name=None,
        )  # fmt: skip
    assert (
        features.column_names == ["audio_id", "input_values"]
        and DECODE_ERROR_COLUMN not in features.column_names
    )
    assert features["audio_id"] == ["a", "b"] and seen[0] == ["a", "b", "e0", "e1"]
    assert f"{len(bad)} of {len(dataset)} clip(s) of split 'train' cannot be decoded" in caplog.text
    assert "e9 (the audio file is empty (0 bytes).) and 1 more." in caplog.text
