from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_models import make_processor, random_waveforms

from hf_atr import AtrDataCollator
from hf_atr.audio_batches import stack_feature
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


def _extracted_clips(tmp_path, processor, seconds):
    """Clips of ``seconds`` through ``extract_audio_features``, saved and loaded back (memory-mapped)."""
    from datasets import load_from_disk
    from tiny_models import SAMPLING_RATE

    waveforms = [random_waveforms(1, seed=index, seconds=length)[0] for index, length in enumerate(seconds)]
    clips = Dataset.from_dict(
        {
            "audio_id": [f"clip{index}" for index in range(len(seconds))],
            "audio": [{"array": waveform, "sampling_rate": SAMPLING_RATE} for waveform in waveforms],
            "captions": [[f"a dog barks {index}", f"a siren wails {index}"] for index in range(len(seconds))],
        }
    )
    processor.extract_audio_features(clips, batch_size=2).save_to_disk(str(tmp_path / "features"))
    return load_from_disk(str(tmp_path / "features")), waveforms


def test_a_gathered_batch_equals_the_batch_of_python_rows_bitwise(tmp_path):
    """One gather of ``Array2D`` rows (``__getitems__``, what the DataLoader calls) against the rows as a row-by-row loader
    reads them: one ``dict(clips[i])`` per item, features as Python lists."""
    processor = make_processor()
    clips, _ = _extracted_clips(tmp_path, processor, [1.0] * 5)
    pairs = CaptionPairDataset(clips)
    indices = [7, 2, 3, 0, 9, 2]
    old_rows = []
    for index in indices:
        clip_index, _, slot = (int(value) for value in pairs.pairs[index])
        old_rows.append(
            {**dict(clips[clip_index]), "caption_language": "eng", "caption_index": slot, "epoch": 0}
        )
    assert isinstance(old_rows[0]["input_values"], list)
    collator = AtrDataCollator(processor)
    gathered, expected = collator(pairs.__getitems__(indices)), collator(old_rows)
    assert gathered.keys() == expected.keys()
    for name, value in expected.items():
        if torch.is_tensor(value):
            assert value.dtype == gathered[name].dtype and torch.equal(value, gathered[name]), name
        else:
            assert value == gathered[name], name
    assert [pairs[index]["audio_id"] for index in indices] == gathered["audio_ids"]


def test_frames_that_vary_are_padded_as_the_extractor_pads_a_batch(tmp_path):
    """wav2vec2's features are the samples themselves: stored with a dynamic first dimension, padded by the
    collator with the extractor's ``padding_value`` and a zero mask, as the extractor pads a batch itself."""
    from tiny_models import SAMPLING_RATE, tiny_tokenizer
    from transformers import Wav2Vec2FeatureExtractor

    from hf_atr import AtrProcessor

    extractor = Wav2Vec2FeatureExtractor(
        sampling_rate=SAMPLING_RATE, return_attention_mask=True, padding_value=0.5
    )
    processor = AtrProcessor(extractor, tiny_tokenizer())
    assert processor.varying_frame_inputs() == {"input_values", "audio_attention_mask"}
    clips, waveforms = _extracted_clips(tmp_path, processor, [0.3, 0.5, 0.2])
    pairs = CaptionPairDataset(clips)
    batch = AtrDataCollator(processor)(pairs.__getitems__([0, 2, 4]))
    reference = extractor(waveforms, sampling_rate=SAMPLING_RATE, padding=True, return_tensors="np")
    assert batch["input_values"].shape == (3, int(0.5 * SAMPLING_RATE))
    torch.testing.assert_close(batch["input_values"], torch.from_numpy(reference["input_values"]))
    assert torch.equal(batch["audio_attention_mask"], torch.from_numpy(reference["attention_mask"]).long())
    assert float(batch["input_values"][2, -1]) == 0.5


def test_captions_tokenised_through_numpy_equal_the_processors_tensors_bitwise():
    from hf_atr.training.collator import pair_batch

    processor = make_processor()
    captions = ["a dog barks", "a siren wails in the distance far away", "rain"]
    batch = pair_batch(processor, {}, ["a", "b", "c"], captions, [0, 0, 0], ["eng"] * 3, max_length=6)
    expected = processor(text=captions, max_length=6, return_tensors="pt")
    assert set(expected) <= set(batch)
    for name, value in expected.items():
        assert batch[name].dtype == value.dtype and torch.equal(batch[name], value), name
    assert batch["input_ids"].shape == (3, 6)  # truncated to max_length, padded to the longest
