"""What users saved with an earlier hf-atr still loads, with identical embeddings and search results.

``tests/fixtures/format_v0`` holds two tiny models (cosine + contrastive, Mahalanobis + iot) with their
processors and retrieval indexes, written by ``make_fixture.py`` with the code before hf-atr
versioned its saved formats, and the embeddings and search hits that code produced. The fixture is never regenerated.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoProcessor, pipeline

import hf_atr  # noqa: F401  (registers the Auto classes and the pipeline)
from hf_atr.configuration_atr import FORMAT_VERSION

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "format_v0"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
EMBEDDINGS = load_file(FIXTURE / "expected_embeddings.safetensors")
MODELS = sorted(EXPECTED["results"])


@pytest.fixture
def fixture_copy(tmp_path) -> Path:
    """The fixture copied to a temporary folder, so that nothing a test does can touch the originals."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "format_v0"))


@pytest.mark.parametrize("name", MODELS)
def test_saved_model_and_processor_give_the_same_embeddings(name, fixture_copy):
    model_dir = fixture_copy / f"model_{name}"
    model = AutoModel.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    saved = json.loads((model_dir / "config.json").read_text())
    assert "format_version" not in saved and model.config.format_version == FORMAT_VERSION  # migrated
    assert model.config.objective == saved["objective"]
    clips = [str(fixture_copy / clip) for clip in EXPECTED["clips"]]
    with torch.no_grad():
        audio_embeds = model.get_audio_features(**processor(audio=clips))
        text_embeds = model.get_text_features(**processor(text=EXPECTED["captions"]))
    torch.testing.assert_close(audio_embeds, EMBEDDINGS[f"{name}/audio_embeds"], rtol=0, atol=1e-5)
    torch.testing.assert_close(text_embeds, EMBEDDINGS[f"{name}/text_embeds"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_saved_index_loads_and_gives_the_same_search_results(name, fixture_copy):
    pipe = pipeline("audio-text-retrieval", model=str(fixture_copy / f"model_{name}"))
    assert pipe.audio_index is not None and pipe.text_index is not None  # loaded from retrieval_index/
    expected = EXPECTED["results"][name]
    queries = [(query, hits) for query, hits in expected["text_queries"].items()]
    queries += [(str(fixture_copy / clip), hits) for clip, hits in expected["audio_queries"].items()]
    for query, expected_hits in queries:
        hits = pipe(query, top_k=3)
        assert [hit["id"] for hit in hits] == [hit["id"] for hit in expected_hits], query
        np.testing.assert_allclose(
            [hit["score"] for hit in hits], [hit["score"] for hit in expected_hits], rtol=0, atol=1e-5
        )


def test_the_mahalanobis_head_scores_the_saved_matrix_as_the_format_0_code_did(fixture_copy):
    """The distance now expands with ``(M + Mᵀ)/2`` (its gradient is exact); on the saved matrix,
    which the ``iot`` trainer kept PSD, it equals the format-0 expansion ``xᵀMx + yᵀMy − 2xᵀMy``."""
    model = AutoModel.from_pretrained(fixture_copy / "model_mahalanobis")
    metric = model.scoring_head.metric_matrix.detach()
    assert not torch.equal(metric, torch.eye(metric.shape[0]))  # a trained matrix, not the initial one
    text, audio = EMBEDDINGS["mahalanobis/text_embeds"], EMBEDDINGS["mahalanobis/audio_embeds"]
    squared = (
        ((text @ metric) * text).sum(-1)[:, None]
        + ((audio @ metric) * audio).sum(-1)[None, :]
        - 2 * (text @ metric) @ audio.T
    )
    with torch.no_grad():
        distance = model.scoring_head.distance(text, audio)
    torch.testing.assert_close(distance, squared.clamp(min=1e-12).sqrt(), rtol=1e-5, atol=1e-6)
