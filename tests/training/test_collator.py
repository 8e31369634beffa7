from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_models import make_processor, random_waveforms

from hf_atr import AtrDataCollator
from hf_atr.processing_atr import stack_feature
from hf_atr.training.collator import CaptionPairDataset


def _rows(n=4, captions_per_clip=3):
    return [
        {
            "audio_id": f"clip{i % 3}",
            "captions": [f"caption {j} of clip {i % 3}" for j in range(captions_per_clip)],
            "input_values": np.full((100, 32), float(i), dtype=np.float64),
        }
        for i in range(n)
    ]


def test_batch_shapes_types_and_duplicate_ids_are_carried():
    collator = AtrDataCollator(make_processor(), caption_selection="first")
    batch = collator(_rows())
    assert batch["input_values"].shape == (4, 100, 32) and batch["input_values"].dtype == torch.float32
    assert batch["input_ids"].shape[0] == 4 and batch["attention_mask"].shape == batch["input_ids"].shape
    assert batch["audio_ids"] == ["clip0", "clip1", "clip2", "clip0"]
    assert batch["caption_indices"].tolist() == [0, 0, 0, 0]


def test_caption_index_of_a_pair_row_wins():
    processor = make_processor()
    rows = _rows(2)
    rows[0]["caption_index"], rows[1]["caption_index"] = 2, 1
    batch = AtrDataCollator(processor)(rows)
    assert batch["caption_indices"].tolist() == [2, 1]
    expected = processor(text=[rows[0]["captions"][2], rows[1]["captions"][1]], return_tensors="pt")
    assert torch.equal(batch["input_ids"], expected["input_ids"])


def test_random_selection_draws_from_the_torch_generator():
    collator = AtrDataCollator(make_processor())
    torch.manual_seed(0)
    first = collator(_rows(8))["caption_indices"]
    torch.manual_seed(0)
    assert torch.equal(collator(_rows(8))["caption_indices"], first)
    assert set(first.tolist()) <= {0, 1, 2}


def test_raw_audio_rows_are_featurised_on_the_fly():
    processor = make_processor()
    rows = [
        {"audio_id": "a", "captions": ["a beep"], "audio": {"array": w, "sampling_rate": 16000}}
        for w in random_waveforms(2)
    ]
    batch = AtrDataCollator(processor)(rows)
    assert batch["input_values"].shape == (2, 100, 32)


@pytest.mark.parametrize(
    ("row_update", "message"),
    [
        ({"captions": []}, "Clip 'clip0' has no captions in captions"),
        ({"captions": ["  "]}, "Clip 'clip0': eng caption 0 is empty"),
        ({"input_values": np.zeros((50, 32))}, "(50, 32) for ['clip0']"),
    ],
)
def test_bad_rows_are_named(row_update, message):
    rows = _rows(2)
    rows[0].update(row_update)
    with pytest.raises(ValueError) as error:
        AtrDataCollator(make_processor(), caption_selection="first")(rows)
    assert message in str(error.value)


def test_rows_without_audio_are_rejected_with_the_columns():
    with pytest.raises(ValueError, match="neither precomputed audio features"):
        AtrDataCollator(make_processor())([{"audio_id": "a", "captions": ["x"]}])


def test_unknown_caption_selection_is_rejected():
    with pytest.raises(ValueError, match="caption_selection must be 'random' or 'first'"):
        AtrDataCollator(make_processor(), caption_selection="all")


def test_caption_pair_dataset_enumerates_every_caption_once():
    clips = Dataset.from_dict({"audio_id": ["a", "b"], "captions": [["a1", "a2"], ["b1", "b2", "b3"]]})
    pairs = CaptionPairDataset(clips)
    assert len(pairs) == 5
    assert [(pairs[i]["audio_id"], pairs[i]["captions"][pairs[i]["caption_index"]]) for i in range(5)] == [
        ("a", "a1"),
        ("a", "a2"),
        ("b", "b1"),
        ("b", "b2"),
        ("b", "b3"),
    ]


def test_caption_pair_dataset_names_clips_without_captions():
    clips = Dataset.from_dict({"audio_id": ["a", "b"], "captions": [["a1"], []]})
    with pytest.raises(ValueError, match=r"1 clip\(s\) have no captions in column 'captions', e.g. \['b'\]"):
        CaptionPairDataset(clips)


def test_stack_feature_keeps_integer_dtypes():
    stacked = stack_feature([[1, 0], [1, 1]], "audio_attention_mask", ["a", "b"])
    assert stacked.dtype == torch.int64


def test_caption_pair_dataset_enumerates_translations_and_skips_missing_ones():
    clips = Dataset.from_dict(
        {
            "audio_id": ["a", "b"],
            "captions": [["a1"], ["b1"]],
            "translations": [{"fra": ["a1-fr"], "deu": None}, {"fra": None, "deu": ["b1-de"]}],
        }
    )
    pairs = CaptionPairDataset(clips, languages=["eng", "fra", "deu"])
    assert [(pairs[i]["audio_id"], pairs[i]["caption_language"]) for i in range(len(pairs))] == [
        ("a", "eng"),
        ("a", "fra"),
        ("b", "eng"),
        ("b", "deu"),
    ]
    processor = make_processor()
    batch = AtrDataCollator(processor)([dict(pairs[i], input_values=np.zeros((100, 32))) for i in range(4)])
    assert batch["languages"] == ["eng", "fra", "eng", "deu"]
    expected = processor(text=["a1", "a1-fr", "b1", "b1-de"], return_tensors="pt")["input_ids"]
    assert torch.equal(batch["input_ids"], expected)


def test_caption_pair_dataset_needs_translations_for_other_languages():
    clips = Dataset.from_dict({"audio_id": ["a"], "captions": [["a1"]]})
    with pytest.raises(
        ValueError, match=r"Languages \['fra'\] were requested but the dataset has no 'translations'"
    ):
        CaptionPairDataset(clips, languages=["eng", "fra"])
