from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_models import LANGUAGES, TEMPLATES, make_model, make_processor, multilingual_features, training_args

from hf_atr.objectives.atri import KclObjective
from hf_atr.objectives.batch import group_caption_embeds
from hf_atr.training.collator import AtrDataCollator, CaptionPairDataset
from hf_atr.training.multilingual import MultilingualCollator, RandomLanguageDataset
from hf_atr.training.trainer import AtrTrainer


def test_kcl_collator_shapes_and_row_order():
    processor = make_processor()
    clips = multilingual_features(3)
    rows = [dict(clips[0], caption_index=1), dict(clips[2], caption_index=0)]
    batch = MultilingualCollator(processor, languages=LANGUAGES)(rows)
    assert batch["input_values"].shape == (2, 100, 32)
    assert batch["input_ids"].shape[0] == batch["attention_mask"].shape[0] == 2 * 4
    assert batch["captions_per_audio"] == 4
    assert batch["language_mask"].dtype == torch.bool and batch["language_mask"].all()
    assert batch["languages"] == [LANGUAGES, LANGUAGES]
    assert batch["caption_indices"].tolist() == [1, 0]
    assert batch["audio_ids"] == ["clip0", "clip2"]
    expected = [TEMPLATES[lang][1].format("dog") for lang in LANGUAGES] + [
        TEMPLATES[lang][0].format("beep") for lang in LANGUAGES
    ]
    assert batch["input_ids"].tolist() == processor(text=expected, return_tensors="pt")["input_ids"].tolist()


def test_kcl_collator_masks_missing_translations_with_a_real_caption():
    processor = make_processor()
    clips = multilingual_features(2, missing={1: "deu"})
    rows = [dict(clips[index], caption_index=0) for index in range(2)]
    batch = MultilingualCollator(processor, languages=["eng", "fra", "deu"])(rows)
    assert batch["language_mask"].tolist() == [[True, True, True], [True, True, False]]
    # The absent German caption's slot holds the clip's English caption, never an empty string.
    tokens = batch["input_ids"].view(2, 3, -1)
    assert torch.equal(tokens[1, 2], tokens[1, 0])


def test_cacl_collator_pairs_english_with_one_other_language():
    processor = make_processor()
    clips = multilingual_features(4, missing={0: "fra", 1: "fra"})
    collator = MultilingualCollator(processor, languages=["eng", "fra", "deu"], mode="cacl")
    given = [dict(clips[2], caption_index=0, caption_language="deu"), dict(clips[3], caption_index=1)]
    torch.manual_seed(0)
    batch = collator(given)
    assert batch["input_ids"].shape[0] == 4 and batch["captions_per_audio"] == 2
    assert batch["languages"][0] == ["eng", "deu"] and batch["languages"][1][0] == "eng"
    assert batch["languages"][1][1] in ("fra", "deu") and batch["language_mask"].all()
    # A row without translations in the drawable languages keeps its audio-English pair, masked otherwise.
    lonely = collator.__class__(processor, languages=["eng", "fra"], mode="cacl")(
        [dict(clips[0], caption_index=0)]
    )
    assert lonely["language_mask"].tolist() == [[True, False]]


def test_collator_reports_bad_input():
    processor = make_processor()
    with pytest.raises(ValueError, match="mode must be one of"):
        MultilingualCollator(processor, mode="all")
    with pytest.raises(ValueError, match="needs 'eng' and at least one other language"):
        MultilingualCollator(processor, languages=["fra", "deu"], mode="cacl")
    with pytest.raises(ValueError, match=r"lists \['fra'\] more than once"):
        MultilingualCollator(processor, languages=["eng", "fra", "fra"])
    english_only = Dataset.from_dict(
        {"audio_id": ["x"], "captions": [["a dog"]], "input_values": [np.zeros((100, 32))]}
    )
    with pytest.raises(
        ValueError, match="'x': language 'fra' was requested but the row has no 'translations'"
    ):
        MultilingualCollator(processor, languages=["eng", "fra"])([english_only[0]])
    clips = multilingual_features(1)
    row = dict(clips[0], caption_index=0)
    row["translations"] = {**row["translations"], "fra": ["  ", "x"]}
    with pytest.raises(ValueError, match="'clip0': fra caption 0 is empty"):
        MultilingualCollator(processor, languages=["eng", "fra"])([row])


def languages_over_epochs(dataset: RandomLanguageDataset, epochs: int) -> np.ndarray:
    """``(epochs, items)`` languages drawn."""
    draws = []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        draws.append([dataset.language_of(index) for index in range(len(dataset))])
    return np.array(draws)


def test_random_language_dataset_is_deterministic_per_epoch_and_covers_languages():
    clips = multilingual_features(8, missing={3: "fra"})
    dataset = RandomLanguageDataset(clips, LANGUAGES, seed=1)
    assert len(dataset) == 16
    first = [dataset[index]["caption_language"] for index in range(len(dataset))]
    assert first == [
        RandomLanguageDataset(clips, LANGUAGES, seed=1)[i]["caption_language"] for i in range(16)
    ]
    dataset.set_epoch(1)
    second = [dataset[index]["caption_language"] for index in range(len(dataset))]
    assert first != second
    draws = languages_over_epochs(dataset, 20)
    assert set(draws[:, 0]) == set(LANGUAGES)
    assert "fra" not in set(draws[:, 6]) | set(draws[:, 7])  # clip 3 has no French
    assert [dataset[i]["caption_index"] for i in range(4)] == [0, 1, 0, 1]
    others = RandomLanguageDataset(clips, LANGUAGES, include_english=False)
    assert {others.language_of(i) for i in range(16)} <= {"fra", "deu", "spa"}
    # Rows feed the stock collator (random_language) and the CACL collator.
    processor = make_processor()
    assert AtrDataCollator(processor)([dataset[0], dataset[1]])["languages"] == [
        dataset.language_of(0),
        dataset.language_of(1),
    ]
    cacl = MultilingualCollator(processor, languages=LANGUAGES, mode="cacl")([others[0]])
    assert cacl["languages"] == [["eng", others.language_of(0)]]


def test_random_language_dataset_reports_bad_input():
    english_only = Dataset.from_dict({"audio_id": ["x"], "captions": [["a dog"]]})
    with pytest.raises(ValueError, match="no 'translations' column"):
        RandomLanguageDataset(english_only, ["eng", "fra"])
    with pytest.raises(ValueError, match="no language to draw from"):
        RandomLanguageDataset(english_only, ["eng"], include_english=False)
    with pytest.raises(ValueError, match="have no captions in column 'captions'"):
        RandomLanguageDataset(Dataset.from_dict({"audio_id": ["y"], "captions": [[]]}), ["eng"])


def test_xlm_roberta_kcl_step_through_the_model_lowers_the_loss():
    """One embedding call for B×K captions, grouped to (B, K, D), trains under kcl (no trainer involved)."""
    processor = make_processor()
    model = make_model(text_family="xlm-roberta", processor=processor)
    clips = multilingual_features(8, missing={2: "spa"})
    collator = MultilingualCollator(processor, languages=LANGUAGES)
    batch = collator([dict(clips[index], caption_index=0) for index in range(8)])
    metadata = {
        key: batch.pop(key)
        for key in ("audio_ids", "caption_indices", "languages", "captions_per_audio", "language_mask")
    }
    objective = KclObjective(temperature=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        outputs = model(**batch)
        text_embeds = group_caption_embeds(outputs.text_embeds, outputs.audio_embeds.shape[0], metadata)
        loss = objective(outputs.audio_embeds, text_embeds, batch=metadata, model=model).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_xlm_roberta_trains_with_kcl_through_atr_trainer(tmp_path):
    processor = make_processor()
    model = make_model(text_family="xlm-roberta", processor=processor, objective={"name": "kcl"})
    args = training_args(tmp_path, max_steps=12)
    trainer = AtrTrainer(
        model=model,
        args=args,
        train_dataset=multilingual_features(32, missing={5: "deu"}),
        processing_class=processor,
        data_collator=MultilingualCollator(processor, languages=LANGUAGES),
    )
    assert isinstance(trainer.train_dataset, CaptionPairDataset)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]
    assert any("kcl/present_fraction" in entry for entry in trainer.state.log_history)
