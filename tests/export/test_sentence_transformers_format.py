"""A model exported for sentence-transformers 6 encodes as hf-atr encodes, for every tower family."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from export_models import CAPTIONS, FAMILIES, build_family, clips_within_window

from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio import resample
from hf_atr.encoding import encode_text
from hf_atr.export.sentence_transformers_format import (
    SIMILARITY_FUNCTIONS,
    export_sentence_transformers,
    metric_square_root,
    similarity_function_name,
)

SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer

PARITY_BOUND = 1e-5
ST_FAMILIES = [family for family in FAMILIES if family != "whisper"]


def _exported(family: str, tmp_path: Path, **config_kwargs):
    model, processor = build_family(family, tmp_path / "source", **config_kwargs)
    out = export_sentence_transformers(model, processor, tmp_path / "exported")
    return model, processor, out, SentenceTransformer(str(out), device="cpu")


def _other_rate(processor) -> int:
    return 32000 if processor.sampling_rate != 32000 else 16000


@pytest.mark.parametrize("family", ST_FAMILIES)
def test_encode_equals_hf_atr_encoders(family, tmp_path):
    """Text, a file path, a 1-D array at the processor's rate and ``{"array", "sampling_rate"}`` at another rate."""
    model, processor, _, exported = _exported(family, tmp_path)
    assert exported.similarity_fn_name == SIMILARITY_FUNCTIONS[model.config.scoring]
    # transformers' fusion extractor marks one random clip of a batch of short clips `is_longer`: one clip per call
    clips = clips_within_window(processor, 2, 0.8 if family != "pe-audio" else 0.3)[
        : 1 if family == "clap-fused" else 2
    ]
    clips = clips + clips_within_window(processor, 1, 0.8 if family != "pe-audio" else 0.3, seed=1)
    path = tmp_path / "clip.wav"
    soundfile.write(path, clips[0], processor.sampling_rate, subtype="FLOAT")
    rate = _other_rate(processor)
    at_other_rate = {"array": resample(clips[-1], processor.sampling_rate, rate), "sampling_rate": rate}

    text = exported.encode(CAPTIONS, convert_to_tensor=True)
    assert (text - encode_text(model, processor, CAPTIONS)).abs().max() < PARITY_BOUND
    for given in ([str(path)], clips[:-1], [at_other_rate]):
        audio = exported.encode(given, convert_to_tensor=True)
        reference = encode_audio(model, processor, [{"audio": item} for item in given])
        assert (audio - reference).abs().max() < PARITY_BOUND
    # the rate is honoured: read at the processor's rate, the same samples embed differently
    misread = encode_audio(model, processor, [{"audio": at_other_rate["array"]}])
    assert (exported.encode([at_other_rate], convert_to_tensor=True) - misread).abs().max() > 1e-3


def test_dot_scoring_pe_audio_gets_dot_similarity(tmp_path):
    model, _, out, exported = _exported("pe-audio", tmp_path)
    assert model.config.scoring == "dot" and exported.similarity_fn_name == "dot"
    assert json.loads((out / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "dot"


@pytest.mark.parametrize("scoring", ["euclidean", "mahalanobis"])
def test_distance_scorings_rank_as_the_scoring_head(scoring, tmp_path):
    model, processor = build_family("demo", tmp_path / "source", scoring=scoring)
    if scoring == "mahalanobis":
        with torch.no_grad():
            factor = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
            model.scoring_head.metric_matrix.copy_(factor @ factor.T / 64)
    out = export_sentence_transformers(model, processor, tmp_path / "exported")
    exported = SentenceTransformer(str(out), device="cpu")
    assert similarity_function_name(model) == exported.similarity_fn_name == "euclidean"
    clips = clips_within_window(processor, 3, 0.9)
    text_embeds = encode_text(model, processor, CAPTIONS[:4])
    audio_embeds = encode_audio(model, processor, [{"audio": clip} for clip in clips])
    expected = model.scoring_head.similarity(text_embeds, audio_embeds)
    got = exported.similarity(
        exported.encode(CAPTIONS[:4], convert_to_tensor=True), exported.encode(clips, convert_to_tensor=True)
    )
    assert (got - expected).abs().max() < PARITY_BOUND
    assert (metric_square_root(model) is None) == (scoring == "euclidean")


LOADING = {
    "import": "import hf_atr\nmodel = SentenceTransformer({out!r}, device='cpu')",
    "remote code": "model = SentenceTransformer({out!r}, device='cpu', trust_remote_code=True)",
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(LOADING))
def test_loads_in_a_fresh_interpreter(how, tmp_path):
    model, processor, out, _ = _exported("demo", tmp_path)
    expected = encode_text(model, processor, CAPTIONS[:2]).numpy()
    np.save(tmp_path / "expected.npy", expected)
    script = (
        "import sys\nimport numpy as np\nfrom sentence_transformers import SentenceTransformer\n"
        + LOADING[how].format(out=str(out))
        + f"\nerror = abs(model.encode({CAPTIONS[:2]!r}) - np.load({str(tmp_path / 'expected.npy')!r})).max()"
        + "\nprint(error, 'hf_atr' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=_offline_env(), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    error, imported = result.stdout.split()[-2:]
    assert float(error) < PARITY_BOUND and imported == "True"


@pytest.mark.slow
def test_without_hf_atr_or_remote_code_loading_asks_for_trust_remote_code(tmp_path):
    _, _, out, _ = _exported("demo", tmp_path)
    script = f"from sentence_transformers import SentenceTransformer\nSentenceTransformer({str(out)!r}, device='cpu')"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=_offline_env(), cwd=tmp_path
    )
    assert result.returncode != 0 and "trust_remote_code=True" in result.stderr


def _offline_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
