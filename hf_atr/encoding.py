"""The one way a model encodes audio, captions and (audio, caption) pairs: batched, with a progress bar.

The evaluators, the ASK knowledge base and its refresh callback, the retrieval pipeline (and so
``hf-atr index``, and zero-shot classification through :func:`encode_labels`) and the demo all encode through
these functions, as sentence-transformers' evaluators
and search go through ``SentenceTransformer.encode``. Each function runs the model in eval mode without
gradients and leaves it in the train/eval mode it found; embeddings come back as float32 on the CPU, whatever dtype
the model computes in (:func:`~hf_atr.audio_encoding.float32_embeddings`).

Audio (:func:`~hf_atr.audio_encoding.encode_audio`, window by window with spans: :func:`~hf_atr.audio_encoding.encode_audio_windows`; the evaluators' clip
protocol: :func:`~hf_atr.audio_encoding.encode_evaluation_clips`) is encoded by :mod:`hf_atr.audio_encoding`, which those names are
imported from; captions, class labels and (audio, caption) pairs are encoded here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from . import audio_encoding
from .audio_encoding import inference
from .data.esc50 import ESC50_DEFAULT_TEMPLATES
from .data.schema import ENGLISH, captions_in_language, check_caption
from .deprecation import moved_names
from .processing_atr import AtrProcessor

CAPTION_MODES = ("all", "first")
"""Which captions :func:`encode_pairs` pairs with their clip: every one, or the first of each clip."""
DEFAULT_TEMPLATES = ESC50_DEFAULT_TEMPLATES
"""Zero-shot caption templates (``"This is a sound of {class}."``); ``{}`` works as the placeholder too."""


@dataclass
class CaptionTable:
    """Every caption of a dataset, flattened.

    ``captions[i]`` belongs to clip ``text_to_audio[i]``, is in language ``languages[i]``, and
    ``caption_groups[i]`` is shared by the translations of one English caption (clip, slot).
    """

    captions: list[str]
    text_to_audio: torch.Tensor
    languages: list[str]
    caption_groups: torch.Tensor


def caption_table(dataset: Any, languages: Sequence[str] | None = None) -> CaptionTable:
    """Flatten the ``captions`` (English) and ``translations[lang]`` of a shared-schema dataset.

    Args:
        languages: ISO 639-3 codes to include; ``None`` means English only. Clips without a
            translation in a language are skipped for that language.
    """
    languages = list(languages) if languages else [ENGLISH]
    columns = ["captions"] + (["translations"] if any(lang != ENGLISH for lang in languages) else [])
    missing_columns = [column for column in columns if column not in dataset.column_names]
    if missing_columns:
        raise ValueError(
            f"Evaluation set lacks column(s) {missing_columns} needed for languages {languages}."
        )
    rows = dataset.select_columns(columns)
    slots_per_clip = max((len(captions) for captions in rows["captions"]), default=0)
    captions, text_to_audio, caption_languages, caption_groups = [], [], [], []
    for clip_index, row in enumerate(rows):
        for language in languages:
            for slot, caption in enumerate(captions_in_language(row, language) or []):
                captions.append(check_caption(caption, slot, clip_index, language))
                text_to_audio.append(clip_index)
                caption_languages.append(language)
                caption_groups.append(clip_index * slots_per_clip + slot)
    return CaptionTable(
        captions, torch.tensor(text_to_audio), caption_languages, torch.tensor(caption_groups)
    )


def _encode_in_batches(
    embed: Callable[..., torch.Tensor],
    model: Any,
    count: int,
    batch_size: int,
    batch_inputs: Callable[[int, int], Mapping[str, torch.Tensor]],
    description: str,
    show_progress: bool,
) -> torch.Tensor:
    """``(count, dim)`` float32 CPU embeddings: ``embed(**batch_inputs(start, stop))`` batch by batch, in eval
    mode without gradients, leaving ``model`` in the train/eval mode it was in."""
    chunks = []
    with inference(model) as device:
        for start in tqdm(range(0, count, batch_size), desc=description, disable=not show_progress):
            inputs = batch_inputs(start, min(start + batch_size, count))
            embeds = embed(**{name: value.to(device) for name, value in inputs.items()})
            chunks.append(audio_encoding.float32_embeddings(embeds, model))
    return torch.cat(chunks)


def encode_text(
    model: Any,
    processor: AtrProcessor,
    captions: Sequence[str],
    *,
    batch_size: int = 256,
    show_progress: bool = False,
) -> torch.Tensor:
    """``(n_captions, dim)`` caption embeddings."""

    def batch_inputs(start: int, stop: int) -> Mapping[str, torch.Tensor]:
        return processor(text=list(captions[start:stop]), return_tensors="pt")

    return _encode_in_batches(
        model.get_text_features,
        model,
        len(captions),
        batch_size,
        batch_inputs,
        "Encoding captions",
        show_progress,
    )


def label_prompts(label: str, templates: Sequence[str]) -> list[str]:
    """Captions for one class label: each template with ``{}`` or ``{class}`` replaced by the label in words."""
    words = label.replace("_", " ").strip()
    if not words:
        raise ValueError(f"Label {label!r} is empty.")
    return [template.format(words, **{"class": words}) for template in templates]


def check_templates(templates: str | Sequence[str] | None) -> tuple[str, ...]:
    """The zero-shot caption templates to use (default :data:`DEFAULT_TEMPLATES`), checked for a placeholder."""
    if templates is None:
        return tuple(DEFAULT_TEMPLATES)
    templates = (templates,) if isinstance(templates, str) else tuple(templates)
    if not templates:
        raise ValueError("templates is empty; give at least one, e.g. 'This is a sound of {}.'")
    for template in templates:
        if not isinstance(template, str) or ("{}" not in template and "{class}" not in template):
            raise ValueError(f"Template {template!r} must be a string containing '{{}}' or '{{class}}'.")
    return templates


def encode_labels(
    model: Any,
    processor: AtrProcessor,
    labels: Sequence[str],
    templates: str | Sequence[str] | None = None,
    *,
    batch_size: int = 256,
) -> torch.Tensor:
    """``(n_labels, dim)`` class embeddings for zero-shot classification, L2-normalised (not for ``scoring="dot"``).

    Each label becomes captions through ``templates`` (default ``"This is a sound of {}."``, see
    :func:`label_prompts`); the embeddings of a label's captions are averaged and re-normalised (CLIP's prompt
    ensembles). The retrieval pipeline's ``classify`` and the zero-shot evaluator both use this.
    """
    labels = list(labels)
    if not labels or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"labels must be a non-empty list of strings, got {labels!r}.")
    templates = check_templates(templates)
    prompts = [prompt for label in labels for prompt in label_prompts(label, templates)]
    prompt_embeds = encode_text(model, processor, prompts, batch_size=batch_size)
    label_embeds = prompt_embeds.view(len(labels), len(templates), -1).mean(dim=1)
    if not model.scoring_head.normalizes_embeddings:  # "dot" scoring scores the mean as it is
        return label_embeds
    return torch.nn.functional.normalize(label_embeds, dim=-1)


def _pair_captions(
    dataset: Any, captions: str, languages: Sequence[str] | None
) -> tuple[list[str], torch.Tensor]:
    """The caption of every pair :func:`encode_pairs` makes of ``dataset`` and the clip index of each
    (``(pairs,)``), clip-major."""
    if captions not in CAPTION_MODES:
        raise ValueError(f"encode_pairs: `captions` must be one of {list(CAPTION_MODES)}, got {captions!r}.")
    if len(dataset) == 0:
        raise ValueError("encode_pairs: the dataset is empty; there is nothing to encode.")
    if captions == "all":
        table = caption_table(dataset, languages)
        return table.captions, table.text_to_audio
    if "captions" not in dataset.column_names:
        raise ValueError(f"encode_pairs: the dataset lacks a 'captions' column ({dataset.column_names}).")
    caption_texts = [
        check_caption(clip_captions[0] if clip_captions else None, 0, clip_index)
        for clip_index, clip_captions in enumerate(dataset["captions"])
    ]
    return caption_texts, torch.arange(len(caption_texts))


def pair_audio_ids(
    dataset: Any, *, captions: str = "all", languages: Sequence[str] | None = None
) -> list[str]:
    """The ``audio_id`` of every pair :func:`encode_pairs` makes of ``dataset``, in its order (nothing encoded).

    Pairs are clip-major, so the ids of a dataset are those of its contiguous shards, concatenated. ASK's
    knowledge base keeps them to leave a sample's own clip out of its neighbours.
    """
    if "audio_id" not in dataset.column_names:
        raise ValueError(
            f"pair_audio_ids: the dataset lacks an 'audio_id' column ({dataset.column_names}); ASK needs "
            "it to keep a sample's own clip out of its neighbours."
        )
    clip_ids = [str(audio_id) for audio_id in dataset["audio_id"]]
    _, text_to_audio = _pair_captions(dataset, captions, languages)
    return [clip_ids[index] for index in text_to_audio.tolist()]


def encode_pairs(
    model: Any,
    processor: AtrProcessor,
    dataset: Any,
    *,
    captions: str = "all",
    languages: Sequence[str] | None = None,
    batch_size: int = 64,
    show_progress: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode a shared-schema dataset into paired ``(audio, text)`` embeddings (ASK Eq. 6).

    Args:
        model: the :class:`~hf_atr.AtrDualEncoderModel`.
        processor: its :class:`~hf_atr.AtrProcessor`.
        dataset: rows with ``audio_id``, ``captions`` and precomputed audio features (or raw ``audio``).
        captions: ``"all"`` pairs every caption with its clip (the paper's "all audio-text pairs"; a clip
            with 5 captions gives 5 pairs sharing one audio embedding), ``"first"`` one pair per clip.
        languages: caption languages (ISO 639-3) for ``"all"``; default English.
        batch_size: clips per forward pass (captions go four times as many).

    Returns:
        ``(audio_embeds, text_embeds)``, each ``(pairs, dim)`` float32 on the CPU, row j a pair; the clip of
        each pair is given by :func:`pair_audio_ids`.
    """
    caption_texts, text_to_audio = _pair_captions(dataset, captions, languages)
    audio_embeds = audio_encoding.encode_audio(
        model, processor, dataset, batch_size=batch_size, show_progress=show_progress
    )
    text_embeds = encode_text(
        model, processor, caption_texts, batch_size=4 * batch_size, show_progress=show_progress
    )
    return audio_embeds[text_to_audio], text_embeds


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "AudioEmbeddings": "hf_atr.audio_encoding",
    "EvaluatedClips": "hf_atr.audio_encoding",
    "SkippedAudio": "hf_atr.audio_encoding",
    "encode_audio": "hf_atr.audio_encoding",
    "encode_audio_clips": "hf_atr.audio_encoding",
    "encode_audio_windows": "hf_atr.audio_encoding",
    "encode_evaluation_clips": "hf_atr.audio_encoding",
    "float32_embeddings": "hf_atr.audio_encoding",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "CAPTION_MODES",
    "CaptionTable",
    "DEFAULT_TEMPLATES",
    "caption_table",
    "check_templates",
    "encode_labels",
    "encode_pairs",
    "encode_text",
    "label_prompts",
    "pair_audio_ids",
]
