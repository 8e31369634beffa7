from __future__ import annotations

import pytest
import torch
from tiny_models import LANGUAGES, make_processor, multilingual_features

from hf_atr.objectives.batch import (
    CAPTIONS_PER_AUDIO,
    LANGUAGE_MASK,
    METADATA_KEYS,
    group_caption_embeds,
    other_copies_mask,
    pop_batch_metadata,
    same_clip_mask,
)
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.multilingual import MultilingualCollator


def test_group_caption_embeds_reshapes_clip_major_rows():
    text_embeds = torch.arange(12.0).view(6, 2)
    grouped = group_caption_embeds(text_embeds, 2, {"captions_per_audio": 3})
    assert grouped.shape == (2, 3, 2) and torch.equal(grouped[1, 0], text_embeds[3])
    assert group_caption_embeds(text_embeds, 6, {"audio_ids": ["a"] * 6}) is text_embeds
    with pytest.raises(ValueError, match=r"captions_per_audio=4 for 2 clips.*expected \(8, dim\)"):
        group_caption_embeds(text_embeds, 2, {"captions_per_audio": 4})


def test_other_copies_are_the_same_clip_off_the_diagonal():
    audio_ids = ["a", "b", "a", "c", "a"]
    expected = torch.tensor(
        [[audio_ids[i] == audio_ids[j] and i != j for j in range(5)] for i in range(5)], dtype=torch.bool
    )
    assert torch.equal(other_copies_mask(audio_ids, 5), expected)
    assert torch.equal(
        other_copies_mask(audio_ids, 5) | torch.eye(5, dtype=torch.bool), same_clip_mask(audio_ids, 5)
    )
    assert not other_copies_mask(None, 3).any()
    with pytest.raises(ValueError, match=r"batch\['audio_ids'\] has 5 entries but the batch has 4 rows"):
        other_copies_mask(audio_ids, 4)


def test_the_collators_write_the_metadata_the_objectives_read_and_it_pops_off_the_model_inputs():
    processor = make_processor()
    clips = multilingual_features(3, missing={1: "spa"})
    pairs = AtrDataCollator(processor, caption_selection="first")([clips[index] for index in range(3)])
    multilingual = MultilingualCollator(processor, languages=LANGUAGES)(
        [dict(clips[index], caption_index=0) for index in range(3)]
    )
    pair_metadata = pop_batch_metadata(pairs)
    assert set(pair_metadata) == set(METADATA_KEYS) - {CAPTIONS_PER_AUDIO, LANGUAGE_MASK}
    metadata = pop_batch_metadata(multilingual)
    assert set(metadata) == set(METADATA_KEYS)
    for model_inputs in (pairs, multilingual):
        assert set(model_inputs) == {"input_values", "input_ids", "attention_mask"}
    assert metadata[LANGUAGE_MASK][1].tolist() == [language != "spa" for language in LANGUAGES]
    text_embeds = torch.randn(multilingual["input_ids"].shape[0], 8)
    assert group_caption_embeds(text_embeds, 3, metadata).shape == (3, len(LANGUAGES), 8)
