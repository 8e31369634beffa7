"""Tiny random-init backbones from real transformers config classes, as transformers' own tests build them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from synthetic_audio import synthetic_clip
from tokenizers.pre_tokenizers import ByteLevel
from transformers import (
    ASTConfig,
    ASTFeatureExtractor,
    BertConfig,
    ClapConfig,
    ClapFeatureExtractor,
    ClapModel,
    ClapProcessor,
    PeAudioConfig,
    PeAudioFeatureExtractor,
    PeAudioFrameLevelModel,
    PeAudioModel,
    PeAudioProcessor,
    RobertaTokenizer,
    TrainingArguments,
    WhisperConfig,
    WhisperFeatureExtractor,
    XLMRobertaConfig,
)

from hf_atr import AtrConfig, AtrDualEncoderModel, AtrProcessor
from hf_atr.data.audio import encode_wav
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


ROBERTA_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
"""RoBERTa's special tokens at ids 0–4 (ClapTextConfig: bos 0, pad 1, eos 2)."""


def tiny_roberta_tokenizer() -> RobertaTokenizer:
    """A byte-level BPE tokenizer of CLAP's kind (RoBERTa) without merges: every byte is one token."""
    alphabet = sorted(ByteLevel.alphabet())
    vocab = {token: index for index, token in enumerate([*ROBERTA_SPECIAL_TOKENS, *alphabet])}
    return RobertaTokenizer(vocab=vocab, merges=[], model_max_length=64)


def tiny_clap_feature_extractor(fused: bool = False) -> ClapFeatureExtractor:
    """CLAP's front end at 16 kHz with 1-s clips (LAION: 48 kHz, 10 s) and LAION's 64 mel bins (the fusion
    path of ``ClapFeatureExtractor`` assumes 64).

    As the LAION checkpoints: ``truncation="fusion"`` (4 stacked mel views and ``is_longer``) for the fused
    model, ``"rand_trunc"`` (one view) for the unfused one.
    """
    return ClapFeatureExtractor(
        truncation="fusion" if fused else "rand_trunc",
        feature_size=64,
        sampling_rate=SAMPLING_RATE,
        hop_length=160,
        max_length_s=1,
        fft_window_size=400,
        frequency_max=8000,
    )


def tiny_clap_config(fused: bool = False) -> ClapConfig:
    """HTS-AT with two Swin stages on a 128 × 128 spectrogram image (64 mel bins × 2 time folds; LAION: 256 ×
    256, 4 folds), a one-layer RoBERTa.

    ``fused`` builds the feature-fusion variant of ``laion/clap-htsat-fused`` (``aff_2d``).
    """
    audio_config = dict(
        spec_size=128,
        num_mel_bins=64,
        window_size=4,
        patch_size=4,
        patch_stride=[4, 4],
        patch_embeds_hidden_size=16,
        hidden_size=32,
        depths=[1, 1],
        num_attention_heads=[2, 2],
        enable_fusion=fused,
        fusion_type="aff_2d" if fused else None,
    )
    text_config = dict(
        vocab_size=len(ROBERTA_SPECIAL_TOKENS) + 256,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=80,
    )
    return ClapConfig(audio_config=audio_config, text_config=text_config, projection_dim=24)


def save_tiny_clap_checkpoint(directory, fused: bool = False, seed: int = 0) -> ClapModel:
    """A random-init ``ClapModel`` and its ``ClapProcessor`` saved as the LAION checkpoints are laid out."""
    torch.manual_seed(seed)
    clap = ClapModel(tiny_clap_config(fused)).eval()
    with torch.no_grad():  # distinct scales, so a swap of logit_scale_a / logit_scale_t shows
        clap.logit_scale_a.fill_(np.log(20.0))
        clap.logit_scale_t.fill_(np.log(8.0))
    clap.save_pretrained(directory)
    ClapProcessor(tiny_clap_feature_extractor(fused), tiny_roberta_tokenizer()).save_pretrained(directory)
    return clap


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


CLIP_WORDS = ("loudly", "quietly", "rising", "falling", "together", "high", "low", "then")


def clip_words(index: int) -> str:
    """Words of the tiny tokenizer's vocabulary that tell clip ``index``'s captions apart from every other clip's
    (``index`` written in base 8 with :data:`CLIP_WORDS` as digits). The tokenizer reads no digits, and captions
    that tokenise alike score alike: tied exactly on one CPU, to rounding on another."""
    words = [CLIP_WORDS[index % len(CLIP_WORDS)]]
    while index >= len(CLIP_WORDS):
        index //= len(CLIP_WORDS)
        words.insert(0, CLIP_WORDS[index % len(CLIP_WORDS)])
    return " ".join(words)


def raw_audio_dataset(
    lengths_seconds: list[float], broken: set[int] | tuple = (), labels: bool = False
) -> Dataset:
    """Clips of raw WAV audio (lengths in seconds) with two captions each (and a ``label`` from
    :data:`WORD_CLASSES` with ``labels``); the rows in ``broken`` hold bytes that are not audio."""
    audio = [
        {"bytes": b"not audio", "path": f"clip{row}.wav"}
        if row in broken
        else {
            "bytes": encode_wav(
                synthetic_clip(int(seconds * SAMPLING_RATE), SAMPLING_RATE, seed=row), SAMPLING_RATE
            ),
            "path": None,
        }
        for row, seconds in enumerate(lengths_seconds)
    ]
    rows = {
        "audio_id": [f"clip{row}" for row in range(len(audio))],
        "audio": audio,
        "captions": [
            [f"a dog barks {clip_words(row)}", f"a siren wails {clip_words(row)}"]
            for row in range(len(audio))
        ],
    }
    if labels:
        rows["label"] = [WORD_CLASSES[row % len(WORD_CLASSES)] for row in range(len(audio))]
    return Dataset.from_dict(rows)


def translated_feature_dataset(n: int = 6, seed: int = 0) -> Dataset:
    """Clips with random precomputed features, two English captions and French/German translations (none in
    German for clip 2); clip ``i``'s captions end in :func:`clip_words` ``(i)``."""
    rng = np.random.default_rng(seed)
    return Dataset.from_dict(
        {
            "audio_id": [f"c{i}" for i in range(n)],
            "captions": [
                [f"a dog barks {clip_words(i)}", f"a siren wails {clip_words(i)}"] for i in range(n)
            ],
            "translations": [
                {
                    "fra": [f"un chien {clip_words(i)}", f"une sirène {clip_words(i)}"],
                    "deu": None if i == 2 else [f"ein Hund {clip_words(i)}", f"eine Sirene {clip_words(i)}"],
                }
                for i in range(n)
            ],
            "input_values": [rng.standard_normal((100, 32)).astype(np.float32) for _ in range(n)],
        }
    )


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


SOUNDS = {
    "dog": ("a dog barks loudly", "dog barks"),
    "siren": ("a siren wails", "siren then silence"),
    "beep": ("a high beep tone", "beep beep"),
    "birds": ("birds chirp together", "birds sing"),
}
"""Class -> its two captions (words of the tiny tokenizer's vocabulary)."""


def clip_waveform(index: int, seed: int = 0) -> np.ndarray:
    """One second of the tone of class ``index % 4`` with a little noise."""
    time = np.arange(SAMPLING_RATE) / SAMPLING_RATE
    noise = 0.01 * np.random.default_rng([seed, index]).standard_normal(SAMPLING_RATE)
    return (0.3 * np.sin(2 * np.pi * (300 + 500 * (index % len(SOUNDS))) * time) + noise).astype(np.float32)


def write_sound_folder(folder: Path, clips: int = 16, seed: int = 0) -> list[str]:
    """``clips`` WAV files named ``clip <i>.wav`` (with a space, as users name files) and a ``metadata.csv`` with
    one caption per row, two rows per file; returns the file names."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, names = [], []
    for index in range(clips):
        name = f"clip {index}.wav"
        (folder / name).write_bytes(encode_wav(clip_waveform(index, seed), SAMPLING_RATE))
        names.append(name)
        rows += [
            {"file_name": name, "caption": caption} for caption in list(SOUNDS.values())[index % len(SOUNDS)]
        ]
    with (folder / "metadata.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["file_name", "caption"])
        writer.writeheader()
        writer.writerows(rows)
    return names


def save_towers(directory: Path, seed: int = 0) -> tuple[Path, Path]:
    """A tiny AST audio tower with its feature extractor and a tiny BERT text tower with its tokenizer, without
    dropout (so that runs with the same global batch give the same weights), as pretrained towers are saved."""
    processor = make_processor()
    source = make_model(processor=processor, seed=seed)
    audio_dir, text_dir = directory / "audio-tower", directory / "text-tower"
    source.text_model.config.hidden_dropout_prob = 0.0
    source.text_model.config.attention_probs_dropout_prob = 0.0
    source.audio_model.save_pretrained(audio_dir)
    processor.feature_extractor.save_pretrained(audio_dir)
    source.text_model.save_pretrained(text_dir)
    processor.tokenizer.save_pretrained(text_dir)
    return audio_dir, text_dir


PE_AUDIO_SAMPLING_RATE = 48000
PE_AUDIO_HOP = 1920
"""PE-Audio reads 48-kHz waveforms, one frame per 1920 samples (40 ms): its DAC strides 2 · 8 · 10 · 12."""


def tiny_pe_audio_config(vocab_size: int) -> PeAudioConfig:
    """PE-Audio's layout (DAC-style waveform encoder with pe-av's strides, a transformer, ModernBERT) at a tiny width:
    a 4-channel DAC, two 24-wide encoder layers, a two-layer 32-wide ModernBERT."""
    text_config = dict(
        model_type="modernbert",
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        global_attn_every_n_layers=1,
        local_attention=16,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        cls_token_id=None,
        sep_token_id=None,
    )
    audio_config = dict(
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=2,
        head_dim=12,
        dac_config=dict(encoder_hidden_size=4, hidden_size=16, codebook_dim=8),
    )
    return PeAudioConfig(text_config=text_config, audio_config=audio_config)


def save_tiny_pe_audio_checkpoint(
    directory, seed: int = 0, scale: float = 2.5, bias: float = -1.5, frame_level: bool = False
) -> PeAudioModel:
    """A random-init ``PeAudioModel`` (``PeAudioFrameLevelModel`` with ``frame_level``) and its ``PeAudioProcessor``
    saved as ``facebook/pe-av-*`` are laid out, with a non-zero logit scale and bias (both are 0 at PE's
    initialisation, where every logit is 0)."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    pe_model = (PeAudioFrameLevelModel if frame_level else PeAudioModel)(
        tiny_pe_audio_config(len(tokenizer))
    ).eval()
    with torch.no_grad():
        pe_model.text_audio_logit_scale.fill_(scale)
        pe_model.text_audio_logit_bias.fill_(bias)
    pe_model.save_pretrained(directory)
    PeAudioProcessor(PeAudioFeatureExtractor(), tokenizer).save_pretrained(directory)
    return pe_model


def save_converted_pe_audio(directory: Path, seed: int = 0, frame_level: bool = False) -> Path:
    """A tiny ``PeAudioModel`` checkpoint in ``directory/"pe-av"`` converted with ``from_pe_audio`` and saved, model
    and processor, in ``directory/"atr"`` as a user saves it; returns that directory."""
    save_tiny_pe_audio_checkpoint(directory / "pe-av", seed=seed, frame_level=frame_level)
    atr_dir = directory / "atr"
    AtrDualEncoderModel.from_pe_audio(directory / "pe-av").save_pretrained(atr_dir)
    AtrProcessor.from_pe_audio(directory / "pe-av").save_pretrained(atr_dir)
    return atr_dir
