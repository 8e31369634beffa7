"""What ``hf_atr`` exports: each name is the object of the module that defines it and is put to work by a test.

Some names (the evaluators, ``encode_audio`` / ``encode_text``, ``EmbeddingIndex``,
``KnowledgeBase``) are used here through the package; every other name is used by the tests of its module, which
:func:`test_every_exported_name_is_used_by_a_test` checks by reading the tests.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch
from ranking_margin import clear_argmax
from tiny_models import make_model, make_processor, raw_audio_dataset

import hf_atr

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def encoded():
    processor = make_processor()
    model = make_model(processor=processor).eval()  # a forward pass without dropout, as the encoders run it
    clips = raw_audio_dataset([1.0, 1.5, 0.5, 2.0], labels=True)
    captions = [row[0] for row in clips["captions"]]
    audio = hf_atr.encode_audio(model, processor, clips)
    text = hf_atr.encode_text(model, processor, captions)
    return model, processor, clips, audio, text


def test_encode_audio_and_text_are_the_models_projected_embeddings(encoded):
    model, processor, clips, audio, text = encoded
    assert audio.shape == text.shape == (4, model.config.projection_dim) and audio.dtype == torch.float32
    inputs = processor(text=[clips[0]["captions"][0]], return_tensors="pt")
    with torch.no_grad():
        output = model(**inputs)
    assert isinstance(output, hf_atr.AtrOutput)
    torch.testing.assert_close(text[:1], output.text_embeds)


def test_the_retrieval_evaluator_scores_what_the_encoders_give(encoded):
    model, processor, clips, audio, _ = encoded
    first_captions = clips.map(lambda row: {"captions": row["captions"][:1]})
    text = hf_atr.encode_text(model, processor, [row[0] for row in first_captions["captions"]])
    metrics = hf_atr.RetrievalEvaluator(first_captions, processor, split="test")(model)
    expected = hf_atr.retrieval_metrics(model.scoring_head.similarity(text, audio).detach(), torch.arange(4))
    assert metrics == pytest.approx(expected)


def test_the_zero_shot_evaluator_classifies_every_clip_among_the_labels(encoded):
    model, processor, clips, audio, _ = encoded
    evaluator = hf_atr.ZeroShotEvaluator(clips, processor, labels=["dog", "siren", "beep", "birds"])
    predictions = evaluator.predict(model)
    assert predictions.scores.shape == (4, 4) and predictions.clip_rows.tolist() == [0, 1, 2, 3]
    assert set(evaluator(model)) == {"accuracy", "balanced_accuracy", "mAP@10", "class_to_audio_mAP@10"}


def test_the_embedding_index_finds_what_brute_force_finds(encoded):
    _, _, clips, audio, text = encoded
    index = hf_atr.EmbeddingIndex(audio.shape[1])
    index.add(audio, clips["audio_id"])
    scores, positions = index.search(text, top_k=2)
    brute_force = (text @ audio.T).numpy()
    np.testing.assert_array_equal(positions[:, 0], clear_argmax(brute_force))
    np.testing.assert_allclose(scores[:, 0], brute_force.max(axis=1), rtol=1e-5)


def test_the_knowledge_base_returns_the_nearest_pair(encoded):
    _, _, clips, audio, text = encoded
    base = hf_atr.KnowledgeBase.from_embeddings(audio, text, audio_ids=clips["audio_id"], num_prototypes=2)
    assert (base.num_pairs, base.num_prototypes) == (4, 2)
    scores, indices = base.search(text, modality="audio", k=1)
    unit_audio = torch.nn.functional.normalize(audio, dim=1)
    expected = torch.nn.functional.normalize(text, dim=1) @ unit_audio.T
    assert indices[:, 0].tolist() == clear_argmax(expected).tolist()
    torch.testing.assert_close(scores[:, 0], expected.max(dim=1).values)


def test_moment_retrieval_metrics_score_a_predicted_moment():
    # IoU([2, 6], [2, 7]) = 4 / 5: R1 and AP reach every threshold up to 0.80, 7 of the 10 that mAP averages.
    metrics = hf_atr.moment_retrieval_metrics(
        [{"qid": 1, "pred_relevant_windows": [[2.0, 6.0, 0.9]]}],
        [{"qid": 1, "relevant_windows": [[2.0, 7.0]]}],
    )
    assert metrics == pytest.approx(
        {"R1@0.5": 1.0, "R1@0.7": 1.0, "mAP@0.5": 1.0, "mAP@0.75": 1.0, "mAP": 0.7}
    )


def test_every_exported_name_is_the_object_its_module_defines():
    for name, module in hf_atr._LAZY_NAMES.items():
        assert getattr(hf_atr, name) is getattr(importlib.import_module(module, "hf_atr"), name), name


def import_paths(name: str) -> set[str]:
    """``hf_atr``, the module its table names (``hf_atr.model_card.card``) and the packages between them."""
    parts = f"hf_atr{hf_atr._LAZY_NAMES[name]}".split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts) + 1)}


@pytest.mark.slow
def test_every_exported_name_is_used_by_a_test():
    """A test file that imports the name (from ``hf_atr``, the module the table names or a package above that
    module) and uses it beyond the import, or uses ``hf_atr.<name>``: an exported name nobody exercises is dead
    surface."""
    unused = set(hf_atr.__all__)
    for path in TESTS_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0
            for alias in node.names
            if alias.name in unused and node.module in import_paths(alias.name)
        }
        loaded = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        }
        attributes = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "hf_atr"
        }
        unused -= (imported & loaded) | attributes
    assert not unused, f"exported by hf_atr but used by no test: {sorted(unused)}"
