from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from tiny_models import make_model, make_processor

from hf_atr.encoding import encode_text
from hf_atr.evaluation.multilingual import (
    embedding_gap,
    language_consistency,
    mean_embedding_distance,
)


def test_gap_and_distance_on_hand_made_embeddings():
    english = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    translated = torch.tensor([[0.0, 1.0], [0.0, -1.0]])
    # Centroids (0.5, 0.5) and (0, 0): gap (0.5, 0.5); distances sqrt(2) and 2.
    assert embedding_gap(english, translated).tolist() == pytest.approx([0.5, 0.5])
    assert mean_embedding_distance(english, translated).item() == pytest.approx((2**0.5 + 2) / 2)
    # A permutation of the same embeddings keeps the centroid (gap 0) but not the pairing (dis > 0).
    assert embedding_gap(english, english.flip(0)).abs().max() == 0
    assert mean_embedding_distance(english, english.flip(0)).item() == pytest.approx(2**0.5)


def test_gap_and_distance_reject_misaligned_inputs():
    with pytest.raises(ValueError, match="same shape, row i of each the same caption"):
        embedding_gap(torch.zeros(3, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="non-empty"):
        mean_embedding_distance(torch.zeros(0, 2), torch.zeros(0, 2))


def multilingual_clips() -> Dataset:
    return Dataset.from_dict(
        {
            "audio_id": ["c0", "c1", "c2"],
            "captions": [
                ["a dog barks", "birds sing"],
                ["a car passes", "siren wails"],
                ["beep tone", "click buzz"],
            ],
            "translations": [
                {"fra": ["dog barks loudly", "birds sing then"], "deu": ["a dog", "the birds"]},
                {"fra": None, "deu": ["car passes quietly", "a siren"]},
                {"fra": ["high beep tone", "click"], "deu": None},
            ],
        }
    )


def test_language_consistency_pairs_translations_with_their_english_caption():
    processor = make_processor()
    model = make_model(processor=processor)
    clips = multilingual_clips()
    metrics = language_consistency(model, processor, clips, ["eng", "fra", "deu"])
    for language, clip_indices in (("fra", [0, 2]), ("deu", [0, 1])):
        english = [caption for index in clip_indices for caption in clips[index]["captions"]]
        translated = [caption for index in clip_indices for caption in clips[index]["translations"][language]]
        english_embeds = encode_text(model, processor, english).double().numpy()
        translated_embeds = encode_text(model, processor, translated).double().numpy()
        gap = np.linalg.norm(english_embeds.mean(axis=0) - translated_embeds.mean(axis=0))
        dis = np.mean([np.linalg.norm(e - t) for e, t in zip(english_embeds, translated_embeds)])
        assert metrics[f"gap/{language}"] == pytest.approx(gap, rel=1e-4, abs=1e-6)
        assert metrics[f"dis/{language}"] == pytest.approx(dis, rel=1e-4)
        assert metrics[f"pairs/{language}"] == 4
    assert metrics["gap"] == pytest.approx((metrics["gap/fra"] + metrics["gap/deu"]) / 2)
    with pytest.raises(ValueError, match="at least one language besides English"):
        language_consistency(model, processor, clips, ["eng"])
