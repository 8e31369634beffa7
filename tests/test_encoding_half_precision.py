"""Encoding with a model loaded in bfloat16 or float16, for every tower family: the processor's float32 features are
cast at the model's door, and the embeddings leave as float32 (unit vectors where the head normalises them), close
to the float32 model's."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tiny_models import (
    make_model,
    make_processor,
    save_tiny_clap_checkpoint,
    save_tiny_pe_audio_checkpoint,
)

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.audio_encoding import encode_audio, encode_audio_windows, float32_embeddings
from hf_atr.encoding import encode_labels, encode_text
from hf_atr.model_layers import at_model_dtype
from hf_atr.windowing import Windowing

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

HALF_DTYPES = [torch.bfloat16, torch.float16]
FAMILIES = [
    "ast+bert",
    "whisper+xlm-roberta",
    "panns+bert",
    "clap",
    "clap-fused",
    "pe-audio",
    "pe-audio-frames",
]
CAPTIONS = ["a dog barks loudly", "a siren wails", "a high beep tone"]
MIN_COSINE = 0.98
"""Half-precision embeddings of these tiny random models point where float32's do (measured: above 0.995)."""


def build(family: str, directory) -> tuple[AtrDualEncoderModel, AtrProcessor]:
    """A tiny float32 model of ``family`` and its processor (CLAP and PE-Audio converted from their checkpoints)."""
    if family.startswith("clap"):
        save_tiny_clap_checkpoint(directory, fused=family == "clap-fused")
        return AtrDualEncoderModel.from_clap(directory), AtrProcessor.from_clap(directory)
    if family.startswith("pe-audio"):
        save_tiny_pe_audio_checkpoint(directory, frame_level=family == "pe-audio-frames")
        return AtrDualEncoderModel.from_pe_audio(directory), AtrProcessor.from_pe_audio(directory)
    audio_family, text_family = family.split("+")
    processor = make_processor(audio_family)
    return make_model(audio_family, text_family, processor=processor), processor


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``family -> (model, processor)``, each built once."""
    built = {}

    def get(family: str):
        if family not in built:
            built[family] = build(family, tmp_path_factory.mktemp(family))
        return built[family]

    return get


def clips(processor: AtrProcessor, count: int = 3, seconds: float = 1.0) -> list[dict]:
    """Clips of exactly the extractor's window at the processor's rate (no random crop: both precisions read the
    same samples)."""
    rate = processor.sampling_rate
    rng = np.random.default_rng(0)
    return [
        {"audio": {"array": (0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32), "sampling_rate": rate},
         "audio_id": f"clip{index}"}
        for index in range(count)
    ]  # fmt: skip


def encoded_audio(model: AtrDualEncoderModel, processor: AtrProcessor, rows: list[dict]) -> torch.Tensor:
    """``encode_audio`` with the random numbers seeded: CLAP's fusion extractor marks a random clip of a batch
    ``is_longer`` when none is (transformers' ``ClapFeatureExtractor`` and its batched twin)."""
    random.seed(0)
    np.random.seed(0)
    return encode_audio(model, processor, rows)


def half_copy(model: AtrDualEncoderModel, dtype: torch.dtype) -> AtrDualEncoderModel:
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    return copy.to(dtype).eval()


def assert_close_float32(half: torch.Tensor, full: torch.Tensor, normalized: bool) -> None:
    assert half.dtype == torch.float32 and half.device.type == "cpu" and torch.isfinite(half).all()
    if normalized:
        torch.testing.assert_close(half.norm(dim=-1), torch.ones(len(half)), atol=1e-6, rtol=0)
    cosines = torch.nn.functional.cosine_similarity(half, full, dim=-1)
    assert cosines.min() > MIN_COSINE, cosines


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_tower_family_encodes_in_half_precision_to_float32(models, family, dtype):
    model, processor = models(family)
    rows = clips(processor)
    half = half_copy(model, dtype)
    normalized = model.scoring_head.normalizes_embeddings
    assert_close_float32(
        encoded_audio(half, processor, rows), encoded_audio(model, processor, rows), normalized
    )
    assert_close_float32(
        encode_text(half, processor, CAPTIONS), encode_text(model, processor, CAPTIONS), normalized
    )
    labels = encode_labels(half, processor, ["dog", "siren"], ["a {} sound", "the {}"])
    assert labels.dtype == torch.float32 and torch.isfinite(labels).all()
    assert {parameter.dtype for parameter in half.parameters()} == {
        dtype
    }  # encoding leaves the model as it was


@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_windows_and_frames_leave_as_float32(models, dtype):
    model, processor = models("pe-audio-frames")
    rows = clips(processor, count=1, seconds=3.0)
    half = half_copy(model, dtype)
    windowing = Windowing(window_seconds=1.0, frame_seconds=0.2)
    frames_half = encode_audio_windows(half, processor, rows, windowing=windowing)
    frames_full = encode_audio_windows(model, processor, rows, windowing=windowing)
    assert frames_half.starts.tolist() == frames_full.starts.tolist()
    assert_close_float32(frames_half.embeddings, frames_full.embeddings, normalized=False)
    ast_model, ast_processor = models("ast+bert")
    windows_half = encode_audio_windows(
        half_copy(ast_model, dtype), ast_processor, clips(ast_processor, 2, 2.5), windowing=Windowing()
    )
    windows_full = encode_audio_windows(
        ast_model, ast_processor, clips(ast_processor, 2, 2.5), windowing=Windowing()
    )
    assert_close_float32(windows_half.embeddings, windows_full.embeddings, normalized=True)


def test_features_are_cast_at_the_model_door_and_masks_pass():
    tower = torch.nn.Linear(2, 2).to(torch.bfloat16)
    features = torch.ones(3, 2)
    assert at_model_dtype(features, tower).dtype == torch.bfloat16
    mask, flags = torch.ones(3, 2, dtype=torch.long), torch.zeros(3, 1, dtype=torch.bool)
    assert at_model_dtype(mask, tower) is mask and at_model_dtype(flags, tower) is flags
    assert at_model_dtype(None, tower) is None
    assert at_model_dtype(features, torch.nn.ReLU()) is features  # no weights: nothing to match


def test_a_half_precision_model_takes_float32_features_in_get_audio_features():
    processor = make_processor()
    model = make_model(processor=processor).to(torch.bfloat16).eval()
    features = processor(audio=[np.zeros(16000, np.float32)], return_tensors="pt")
    assert features["input_values"].dtype == torch.float32
    with torch.no_grad():
        assert (
            model.get_audio_features(**features).dtype == torch.bfloat16
        )  # the model's own output, as transformers'


def test_float32_embeddings_renormalise_and_refuse_overflow():
    model = make_model()
    rounded = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1).to(torch.bfloat16)
    out = float32_embeddings(rounded, model)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(4), atol=1e-6, rtol=0)
    assert rounded.float().norm(dim=-1).sub(1).abs().max() > 1e-4  # what re-normalising repairs
    full = torch.randn(2, 16)
    assert torch.equal(float32_embeddings(full, model), full)  # a float32 model's embeddings as they are
    overflowed = torch.tensor([[float("inf")] + [0.0] * 15], dtype=torch.float16)
    with pytest.raises(ValueError, match=r"non-finite embeddings in float16 .*load it in bfloat16"):
        float32_embeddings(overflowed, model)
