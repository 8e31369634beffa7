"""AtrProcessor: a transformers audio feature extractor + a tokenizer behind one call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from transformers import AutoProcessor, BatchFeature
from transformers.processing_utils import ProcessorMixin

from .configuration_atr import AtrConfig
from .data.audio import decode_audio

AUDIO_INPUT_NAMES = ("input_values", "input_features")
"""Names feature extractors give their main output (AST/wav2vec2 vs Whisper/CLAP)."""


class AtrProcessor(ProcessorMixin):
    """Wraps a feature extractor (AST, Whisper, CLAP, ...) and a tokenizer (BERT, XLM-R, ...).

    ``processor(audio=..., text=...)`` returns a ``BatchFeature`` the model takes as keyword arguments:
    the extractor's ``input_values`` or ``input_features`` (its ``attention_mask`` renamed
    ``audio_attention_mask``), and the tokenizer's ``input_ids`` / ``attention_mask``.

    Audio may be raw arrays already at the extractor's rate, or any value
    :func:`~hf_atr.data.audio.decode_audio` takes (a path, ``{"bytes", "path"}`` from our datasets,
    ``{"array", "sampling_rate"}``); those are decoded with soundfile and resampled to the
    extractor's ``sampling_rate``.

    Heavy feature extraction should run once over a dataset, with :meth:`extract_audio_features`
    (``Dataset.map(batched=True)``, cached by datasets), not at every training step.
    """

    def __init__(self, feature_extractor: Any, tokenizer: Any) -> None:
        super().__init__(feature_extractor, tokenizer)

    @property
    def sampling_rate(self) -> int:
        return self.feature_extractor.sampling_rate

    @property
    def audio_input_name(self) -> str:
        """``"input_values"`` or ``"input_features"``, whichever the feature extractor produces."""
        for name in self.feature_extractor.model_input_names:
            if name in AUDIO_INPUT_NAMES:
                return name
        raise ValueError(
            f"{type(self.feature_extractor).__name__} produces {self.feature_extractor.model_input_names}; "
            f"AtrProcessor needs one of {AUDIO_INPUT_NAMES}."
        )

    def decode(self, audio: Sequence[Any], sources: Sequence[str] | None = None) -> list[np.ndarray]:
        """Decode and resample each item to the feature extractor's rate (float32 mono arrays)."""
        return [
            decode_audio(item, self.sampling_rate, source=None if sources is None else sources[index])
            for index, item in enumerate(audio)
        ]

    def __call__(
        self,
        audio: Any = None,
        text: str | Sequence[str] | None = None,
        *,
        sampling_rate: int | None = None,
        padding: bool | str = True,
        truncation: bool = True,
        max_length: int | None = None,
        return_tensors: str | None = "pt",
        **kwargs: Any,
    ) -> BatchFeature:
        """Featurise ``audio`` (one clip or a list) and/or tokenise ``text`` (one caption or a list).

        Args:
            sampling_rate: rate of raw numpy ``audio``; when it differs from the extractor's the audio is
                resampled.
            max_length: token limit for captions (the tokenizer's ``model_max_length`` by default).
        """
        if audio is None and text is None:
            raise ValueError("AtrProcessor needs `audio`, `text`, or both.")
        encoding: dict[str, Any] = {}
        if audio is not None:
            encoding.update(self._featurize(audio, sampling_rate, return_tensors, **kwargs))
        if text is not None:
            captions = [text] if isinstance(text, str) else list(text)
            for index, caption in enumerate(captions):
                if not isinstance(caption, str) or not caption.strip():
                    raise ValueError(f"Caption {index} is empty or not a string: {caption!r}.")
            encoding.update(
                self.tokenizer(
                    captions,
                    padding=padding,
                    truncation=truncation,
                    max_length=max_length,
                    return_tensors=return_tensors,
                )
            )
        return BatchFeature(encoding, tensor_type=return_tensors)

    def _featurize(self, audio: Any, sampling_rate: int | None, return_tensors: str | None, **kwargs: Any) -> dict:
        single_clip = isinstance(audio, (str, dict)) or (isinstance(audio, np.ndarray) and audio.ndim == 1)
        clips = [audio] if single_clip else list(audio)
        arrays = [
            decode_audio({"array": clip, "sampling_rate": sampling_rate or self.sampling_rate}, self.sampling_rate)
            if isinstance(clip, np.ndarray)
            else decode_audio(clip, self.sampling_rate)
            for clip in clips
        ]
        features = self.feature_extractor(
            arrays, sampling_rate=self.sampling_rate, return_tensors=return_tensors, **kwargs
        )
        result = {self.audio_input_name: features[self.audio_input_name]}
        for name, value in features.items():
            if name == "attention_mask":
                result["audio_attention_mask"] = value
            elif name not in AUDIO_INPUT_NAMES:
                result[name] = value
        return result

    def extract_audio_features(
        self,
        dataset: Any,
        *,
        audio_column: str = "audio",
        batch_size: int = 32,
        num_proc: int | None = None,
        keep_audio: bool = False,
    ) -> Any:
        """Run the feature extractor once over a ``datasets.Dataset``/``DatasetDict`` with ``Dataset.map``.

        Adds the extractor's output columns (e.g. ``input_values``); datasets caches the result next to
        the dataset's files, so a second call is free. Decode errors name the clip's ``audio_id``.
        """

        def featurize_batch(batch: dict[str, list]) -> dict[str, Any]:
            sources = batch.get("audio_id")
            arrays = self.decode(batch[audio_column], sources)
            return self._featurize(arrays, None, return_tensors="np")

        remove_columns = None if keep_audio else [audio_column]
        return dataset.map(
            featurize_batch,
            batched=True,
            batch_size=batch_size,
            num_proc=num_proc,
            remove_columns=remove_columns,
            desc="Extracting audio features",
        )


def register_auto_processor() -> None:
    """Make ``AutoProcessor`` resolve saved AtrProcessor directories without remote code."""
    AutoProcessor.register(AtrConfig, AtrProcessor, exist_ok=True)


__all__ = ["AtrProcessor"]
