"""One tiny model per tower family the exports cover, each with its processor and clips within its window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tiny_models import (
    PE_AUDIO_SAMPLING_RATE,
    make_model,
    make_processor,
    save_converted_pe_audio,
    save_tiny_clap_checkpoint,
    tiny_text_config,
    tiny_tokenizer,
)
from transformers import BertModel

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.demo import tiny_feature_extractor, tiny_model_config

FAMILIES = ("demo", "clap", "clap-fused", "panns", "whisper", "pe-audio", "st-text")
"""``demo``: the demo's AST + BERT; ``clap`` / ``clap-fused``: converted ``ClapModel`` checkpoints; ``panns``: CNN14;
``whisper``: Whisper's encoder; ``pe-audio``: a converted ``PeAudioModel``; ``st-text``: an AST audio tower with a
sentence-transformers text tower (mean pooling, normalised)."""

CAPTIONS = [
    "a dog barks twice",
    "birds sing",
    "a siren wails in the distance",
    "rain",
    "a car passes by",
    "beep",
    "wind",
]


def build_family(family: str, directory: Path, **config_kwargs) -> tuple[AtrDualEncoderModel, AtrProcessor]:
    """A tiny random-init model of ``family`` (see :data:`FAMILIES`) in eval mode, with its processor; seeded."""
    directory.mkdir(parents=True, exist_ok=True)
    if family == "demo":
        processor = AtrProcessor(tiny_feature_extractor(duration=1.0), tiny_tokenizer())
        torch.manual_seed(0)
        config = tiny_model_config(processor.feature_extractor, len(processor.tokenizer), hidden_size=32)
        for key, value in config_kwargs.items():
            setattr(config, key, value)
        model = AtrDualEncoderModel(config)
    elif family in ("clap", "clap-fused"):
        save_tiny_clap_checkpoint(directory / "clap", fused=family == "clap-fused")
        model = AtrDualEncoderModel.from_clap(directory / "clap", **config_kwargs)
        processor = AtrProcessor.from_clap(directory / "clap")
    elif family in ("panns", "whisper"):
        processor = make_processor(family)
        model = make_model(family, processor=processor, **config_kwargs)
    elif family == "pe-audio":
        atr_dir = save_converted_pe_audio(directory)
        model = AtrDualEncoderModel.from_pretrained(atr_dir)
        processor = AtrProcessor.from_pretrained(atr_dir)
    elif family == "st-text":
        audio_dir = directory / "audio"
        make_model().audio_model.save_pretrained(audio_dir)
        make_processor().feature_extractor.save_pretrained(audio_dir)
        text_dir = write_tiny_sentence_transformer(directory / "st")
        torch.manual_seed(0)
        model = AtrDualEncoderModel.from_audio_text_pretrained(
            str(audio_dir), str(text_dir), projection_dim=16, **config_kwargs
        )
        processor = AtrProcessor.from_audio_text_pretrained(str(audio_dir), str(text_dir))
    else:
        raise ValueError(f"No tiny model of family {family!r}; one of {FAMILIES}.")
    return model.eval(), processor


def write_tiny_sentence_transformer(directory: Path) -> Path:
    """A tiny BERT saved as a sentence-transformers directory: Transformer → mean pooling → Normalize."""
    torch.manual_seed(1)
    tokenizer = tiny_tokenizer()
    BertModel(tiny_text_config("bert", len(tokenizer))).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 32, "do_lower_case": False})
    )
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode": "mean"})
    )
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "",
            "type": "sentence_transformers.base.modules.transformer.Transformer",
        },
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
        },
        {
            "idx": 2,
            "name": "2",
            "path": "2_Normalize",
            "type": "sentence_transformers.base.modules.normalize.Normalize",
        },
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    return directory


def clips_within_window(
    processor: AtrProcessor, count: int, seconds: float, seed: int = 0
) -> list[np.ndarray]:
    """``count`` noise clips of ``seconds`` at the processor's rate (seeded)."""
    rng = np.random.default_rng(seed)
    samples = int(round(seconds * processor.sampling_rate))
    return [(0.1 * rng.standard_normal(samples)).astype(np.float32) for _ in range(count)]


def window_seconds(family: str) -> tuple[float, float]:
    """Two clip lengths within the window of ``family``'s extractor (PE-Audio has none: two lengths of audio)."""
    if family == "pe-audio":
        return 0.2, 0.32
    return 0.6, 1.0


__all__ = [
    "CAPTIONS",
    "FAMILIES",
    "PE_AUDIO_SAMPLING_RATE",
    "build_family",
    "clips_within_window",
    "window_seconds",
]
