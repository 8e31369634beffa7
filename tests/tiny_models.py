"""Tiny random-init backbones from real transformers config classes, as transformers' own tests build them."""

from __future__ import annotations

import numpy as np
import torch
from datasets import Dataset
from transformers import (
    ASTConfig,
    ASTFeatureExtractor,
    BertConfig,
    TrainingArguments,
    WhisperConfig,
    WhisperFeatureExtractor,
    XLMRobertaConfig,
)

from hf_atr import AtrConfig, AtrDualEncoderModel, AtrProcessor
from hf_atr.models.panns.configuration_panns import PannsConfig
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.tokenization import train_caption_tokenizer

SAMPLING_RATE = 16000
CLIP_SECONDS = 1.0
WORDS = [
    "a",
    "dog",
    "barks",
    "loudly",
    "while",
    "birds",
    "sing",
    "then",
    "a",
    "car",
    "passes",
    "quietly",
    "siren",
    "wails",
    "beep",
    "tone",
    "high",
    "low",
    "noise",
    "click",
    "buzz",
    "chirp",
    "rising",
    "falling",
    "followed",
    "by",
    "together",
    "with",
    "silence",
]


def tiny_tokenizer():
    sentences = [" ".join(WORDS[i : i + 6]) for i in range(len(WORDS))]
    return train_caption_tokenizer(sentences * 3, vocab_size=200)


def tiny_panns_feature_extractor() -> PannsFeatureExtractor:
    """PANNs' 16 kHz front end (as Cnn14_16k: n_fft 512, hop 160, 50–8000 Hz) with 32 mel bins, 1-s clips."""
    return PannsFeatureExtractor(
        feature_size=32,
        sampling_rate=SAMPLING_RATE,
        fft_window_size=512,
        hop_length=160,
        frequency_min=50.0,
        frequency_max=8000.0,
        max_length_s=CLIP_SECONDS,
    )


def tiny_panns_config(architecture: str = "cnn14", **overrides) -> PannsConfig:
    """A few channels per block; 32 mel bins (CNN14: 4 blocks, pooling by 8; ResNet38: 3 stages, by 16)."""
    sizes = (
        {"conv_block_channels": [4, 8, 8, 16]}
        if architecture == "cnn14"
        else {
            "conv_block_channels": [4, 16],
            "resnet_stage_channels": [4, 8, 8],
            "resnet_stage_blocks": [2, 1, 2],
        }
    )
    return PannsConfig(architecture=architecture, num_mel_bins=32, **{**sizes, **overrides})


def tiny_feature_extractor(audio_family: str):
    if audio_family == "ast":
        return ASTFeatureExtractor(sampling_rate=SAMPLING_RATE, num_mel_bins=32, max_length=100)
    if audio_family == "panns":
        return tiny_panns_feature_extractor()
    return WhisperFeatureExtractor(
        feature_size=32, sampling_rate=SAMPLING_RATE, chunk_length=1, hop_length=160
    )


def tiny_audio_config(audio_family: str):
    if audio_family == "ast":
        return ASTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            num_mel_bins=32,
            max_length=100,
            frequency_stride=16,
            time_stride=16,
        )
    if audio_family == "panns":
        return tiny_panns_config()
    return WhisperConfig(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=32,
        max_source_positions=50,
        vocab_size=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )


def tiny_text_config(text_family: str, vocab_size: int):
    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=80,
    )
    if text_family == "bert":
        return BertConfig(**common)
    return XLMRobertaConfig(**common, pad_token_id=0)


def make_processor(audio_family: str = "ast") -> AtrProcessor:
    return AtrProcessor(tiny_feature_extractor(audio_family), tiny_tokenizer())


def make_model(
    audio_family: str = "ast",
    text_family: str = "bert",
    *,
    processor: AtrProcessor | None = None,
    seed: int = 0,
    **config_kwargs,
) -> AtrDualEncoderModel:
    processor = processor or make_processor(audio_family)
    torch.manual_seed(seed)
    config = AtrConfig(
        audio_config=tiny_audio_config(audio_family),
        text_config=tiny_text_config(text_family, len(processor.tokenizer)),
        projection_dim=config_kwargs.pop("projection_dim", 16),
        **config_kwargs,
    )
    return AtrDualEncoderModel(config)


def random_waveforms(count: int, seed: int = 0, seconds: float = CLIP_SECONDS) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (0.1 * rng.standard_normal(int(SAMPLING_RATE * seconds))).astype(np.float32) for _ in range(count)
    ]


WORD_CLASSES = ["dog", "siren", "beep", "birds", "car", "buzz", "chirp", "click"]


def feature_dataset(num_clips: int, seed: int = 0) -> Dataset:
    """Clips whose (already extracted) features carry their class as a frequency band, one caption per class."""
    rng = np.random.default_rng(seed)
    rows = {"audio_id": [], "captions": [], "input_values": []}
    for index in range(num_clips):
        label = index % len(WORD_CLASSES)
        features = 0.1 * rng.standard_normal((100, 32)).astype(np.float32)
        features[:, 4 * label : 4 * label + 4] += 2.0
        rows["audio_id"].append(f"clip{index}")
        rows["captions"].append([f"a {WORD_CLASSES[label]} sound", f"the {WORD_CLASSES[label]}"])
        rows["input_values"].append(features)
    return Dataset.from_dict(rows)


def training_args(tmp_path, **overrides) -> TrainingArguments:
    defaults = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        max_steps=12,
        logging_steps=4,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    defaults.update(overrides)
    return TrainingArguments(**defaults)


# Stand-in "translations": other word orders of the tiny tokenizer's vocabulary, one per language code.
TEMPLATES = {
    "eng": ("a {} sound", "the {}"),
    "fra": ("{} noise", "the {} loudly"),
    "deu": ("{} then silence", "a {} quietly"),
    "spa": ("{} together with noise", "{} rising"),
}


def multilingual_features(num_clips: int, *, missing: dict[int, str] | None = None, seed: int = 0) -> Dataset:
    """Clips whose features carry their class as a frequency band, with captions in four languages.

    ``missing`` maps a clip index to a language that clip has no translation in.
    """
    rng = np.random.default_rng(seed)
    missing = missing or {}
    rows = {"audio_id": [], "captions": [], "translations": [], "input_values": []}
    for index in range(num_clips):
        label = WORD_CLASSES[index % len(WORD_CLASSES)]
        features = 0.1 * rng.standard_normal((100, 32)).astype(np.float32)
        features[:, 4 * (index % 8) : 4 * (index % 8) + 4] += 2.0
        rows["audio_id"].append(f"clip{index}")
        rows["captions"].append([template.format(label) for template in TEMPLATES["eng"]])
        rows["translations"].append(
            {
                language: None
                if missing.get(index) == language
                else [template.format(label) for template in templates]
                for language, templates in TEMPLATES.items()
                if language != "eng"
            }
        )
        rows["input_values"].append(features)
    return Dataset.from_dict(rows)


LANGUAGES = list(TEMPLATES)
"""The caption languages of :func:`multilingual_features`."""
