"""AtrProcessor: a transformers audio feature extractor + a tokenizer behind one call.

How its features are stacked into a batch of model inputs is in :mod:`hf_atr.audio_batches` (its names are
importable from here too), how a dataset is featurised once in :mod:`hf_atr.dataset_features`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import AutoFeatureExtractor, AutoProcessor, AutoTokenizer, BatchFeature
from transformers.processing_utils import ProcessorMixin
from transformers.utils import logging

from . import audio_batches
from .configuration_atr import AtrConfig
from .data.audio import decode_audio
from .data.audio_arrays import audio_clips
from .data.feature_storage import feature_storage_types, first_dimension_varies
from .data.schema import check_caption
from .dataset_features import extract_split
from .deprecation import moved_names
from .features.registry import batched_features_for
from .long_clips import inference_features
from .models.checkpoint_families import checkpoint_family
from .models.sentence_transformer.sentence_transformer_layout import read_sentence_transformer
from .windowing import extractor_window, minimum_samples, pad_short_clip, report_cut_clips

FEATURE_BACKENDS = ("transformers", "torch")

logger = logging.get_logger(__name__)


AUDIO_BATCH_PADDINGS = (True, "longest", "max_length")
"""``audio_kwargs["padding"]`` values that ask for what :class:`AtrProcessor` always does: a stacked batch, each clip
padded (or cut) as its extractor prepares clips for this model (sentence-transformers passes ``True``)."""


@dataclass(frozen=True)
class ModalityOptions:
    """transformers 5's per-modality processor options, sorted for :class:`AtrProcessor`.

    ``sampling_rate``: the rate of the audio arrays (``None``: the extractor's); ``audio``: further options for the
    feature extractor; ``text``: options for the tokenizer; ``common``: ``return_tensors``, at most.
    """

    sampling_rate: int | None
    audio: dict[str, Any]
    text: dict[str, Any]
    common: dict[str, Any]


def modality_options(
    text_kwargs: Mapping[str, Any] | None = None,
    audio_kwargs: Mapping[str, Any] | None = None,
    common_kwargs: Mapping[str, Any] | None = None,
    images_kwargs: Mapping[str, Any] | None = None,
    videos_kwargs: Mapping[str, Any] | None = None,
    *,
    sampling_rate: int | None = None,
) -> ModalityOptions:
    """Sort the per-modality keyword arguments of transformers 5's processors (``processor(audio=..., text_kwargs=...,
    audio_kwargs=..., common_kwargs=...)``, the call sentence-transformers 6 makes) for :class:`AtrProcessor`.

    ``audio_kwargs["sampling_rate"]`` is the rate of the arrays (the processor resamples them), and must agree with a
    ``sampling_rate`` given directly; ``audio_kwargs["padding"]`` may only ask for a padded batch
    (:data:`AUDIO_BATCH_PADDINGS`: the processor pads or cuts every clip as its extractor does for the model); other
    audio options go to the feature extractor, text options to the tokenizer only (never to the extractor).

    Raises:
        ValueError: image or video options, common options other than ``return_tensors``, an audio padding the
            processor cannot honour, or two different sampling rates.
    """
    for name, given in (("images_kwargs", images_kwargs), ("videos_kwargs", videos_kwargs)):
        if given:
            raise ValueError(f"AtrProcessor reads audio and text only; got {name}={dict(given)!r}.")
    common = dict(common_kwargs or {})
    unknown_common = sorted(set(common) - {"return_tensors"})
    if unknown_common:
        raise ValueError(
            f"AtrProcessor's common_kwargs take only 'return_tensors', got {unknown_common}; pass tokenizer options "
            "in text_kwargs and feature extractor options in audio_kwargs."
        )
    audio = dict(audio_kwargs or {})
    padding = audio.pop("padding", True)
    if padding not in AUDIO_BATCH_PADDINGS:
        raise ValueError(
            f"audio_kwargs padding={padding!r} cannot be honoured: AtrProcessor always stacks the clips into a batch, "
            f"each padded or cut as its feature extractor prepares clips for the model (padding one of "
            f"{list(AUDIO_BATCH_PADDINGS)})."
        )
    given_rate = audio.pop("sampling_rate", None)
    if given_rate is not None and sampling_rate is not None and int(given_rate) != int(sampling_rate):
        raise ValueError(
            f"Two sampling rates for one call: sampling_rate={sampling_rate} and audio_kwargs "
            f"sampling_rate={given_rate}; give the rate of the arrays once."
        )
    rate = sampling_rate if given_rate is None else int(given_rate)
    return ModalityOptions(sampling_rate=rate, audio=audio, text=dict(text_kwargs or {}), common=common)


class AtrProcessor(ProcessorMixin):
    """Wraps a feature extractor (AST, Whisper, CLAP, ...) and a tokenizer (BERT, XLM-R, ...).

    ``processor(audio=..., text=...)`` returns a ``BatchFeature`` the model takes as keyword arguments:
    the extractor's ``input_values`` or ``input_features`` (its ``attention_mask`` renamed
    ``audio_attention_mask``), and the tokenizer's ``input_ids`` / ``attention_mask``.

    Audio may be raw arrays already at the extractor's rate, or any value
    :func:`~hf_atr.data.audio.decode_audio` takes (a path, ``{"bytes", "path"}`` from our datasets,
    ``{"array", "sampling_rate"}``); those are decoded with soundfile and resampled to the
    extractor's ``sampling_rate``.

    ``feature_backend="torch"`` computes the audio features with the extractor's batched torch twin
    (:mod:`hf_atr.features`: AST, Whisper, CLAP) on ``device``, equal to the extractor's output; other
    extractors fall back to transformers (logged once). Without it, featurise once over a dataset with
    :meth:`extract_audio_features` (``Dataset.map(batched=True)``, cached by datasets), or stream raw
    waveforms with :class:`~hf_atr.training.waveform_collator.WaveformCollator` and featurise on the device.
    """

    def __init__(self, feature_extractor: Any, tokenizer: Any) -> None:
        super().__init__(feature_extractor, tokenizer)
        self._varying_frames: frozenset[str] | None = None

    @classmethod
    def from_checkpoint(cls, family: str, name_or_path: str | os.PathLike, **kwargs: Any) -> AtrProcessor:
        """The feature extractor and tokenizer of a checkpoint of ``family``, a key of
        :data:`~hf_atr.models.checkpoint_families.CHECKPOINT_FAMILIES`, read by the family module's
        ``load_processor_parts`` (keyword arguments go to it). Pair with
        :meth:`hf_atr.AtrDualEncoderModel.from_checkpoint`.
        """
        return cls(*checkpoint_family(family).load_processor_parts(name_or_path, **kwargs))

    @classmethod
    def from_clap(cls, clap_name_or_path: str | os.PathLike, **kwargs: Any) -> AtrProcessor:
        """The feature extractor and tokenizer of a CLAP checkpoint (``ClapProcessor.from_pretrained``):
        :meth:`from_checkpoint` ``("clap", ...)``.

        Pair with :meth:`hf_atr.AtrDualEncoderModel.from_clap`. The CLAP feature extractor's ``is_longer``
        output reaches the model (fused checkpoints use it). Keyword arguments go to ``from_pretrained``.
        """
        return cls.from_checkpoint("clap", clap_name_or_path, **kwargs)

    @classmethod
    def from_pe_audio(cls, pe_name_or_path: str | os.PathLike, **kwargs: Any) -> AtrProcessor:
        """The raw-waveform feature extractor and tokenizer of a PE-Audio checkpoint: :meth:`from_checkpoint`
        ``("pe_audio", ...)``.

        Pair with :meth:`hf_atr.AtrDualEncoderModel.from_pe_audio`. The extractor reflect-pads each 48-kHz clip to
        a multiple of its hop (1920 samples) and marks that padding valid; its ``padding_mask`` reaches the model as
        ``audio_attention_mask``. Keyword arguments go to ``from_pretrained``.
        """
        return cls.from_checkpoint("pe_audio", pe_name_or_path, **kwargs)

    @classmethod
    def from_audio_text_pretrained(
        cls, audio_name_or_path: str | os.PathLike, text_name_or_path: str | os.PathLike, **kwargs: Any
    ) -> AtrProcessor:
        """The audio checkpoint's feature extractor and the text checkpoint's tokenizer.

        Pair with :meth:`hf_atr.AtrDualEncoderModel.from_audio_text_pretrained`. For a sentence-transformers
        directory the tokenizer comes from its transformer's folder and truncates at its ``max_seq_length``,
        as sentence-transformers does. Keyword arguments prefixed ``audio_`` / ``text_`` go to the
        feature extractor's / tokenizer's ``from_pretrained``.
        """
        audio_kwargs = {
            key[len("audio_") :]: value for key, value in kwargs.items() if key.startswith("audio_")
        }
        text_kwargs = {key[len("text_") :]: value for key, value in kwargs.items() if key.startswith("text_")}
        unexpected = sorted(
            set(kwargs) - {f"audio_{key}" for key in audio_kwargs} - {f"text_{key}" for key in text_kwargs}
        )
        if unexpected:
            raise TypeError(f"Arguments must be prefixed 'audio_' or 'text_'; got {unexpected}.")
        layout = read_sentence_transformer(text_name_or_path)
        if layout is not None:
            if layout.transformer_subfolder:
                text_kwargs.setdefault("subfolder", layout.transformer_subfolder)
            if layout.max_seq_length is not None:
                text_kwargs.setdefault("model_max_length", layout.max_seq_length)
        return cls(
            AutoFeatureExtractor.from_pretrained(audio_name_or_path, **audio_kwargs),
            AutoTokenizer.from_pretrained(text_name_or_path, **text_kwargs),
        )

    @property
    def sampling_rate(self) -> int:
        return self.feature_extractor.sampling_rate

    @property
    def audio_input_name(self) -> str:
        """``"input_values"`` or ``"input_features"``, whichever the feature extractor produces."""
        for name in self.feature_extractor.model_input_names:
            if name in audio_batches.AUDIO_INPUT_NAMES:
                return name
        raise ValueError(
            f"{type(self.feature_extractor).__name__} produces {self.feature_extractor.model_input_names}; "
            f"AtrProcessor needs one of {audio_batches.AUDIO_INPUT_NAMES}."
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
        feature_backend: str = "transformers",
        device: str | torch.device | None = None,
        audio_names: Sequence[str] | None = None,
        text_kwargs: Mapping[str, Any] | None = None,
        audio_kwargs: Mapping[str, Any] | None = None,
        common_kwargs: Mapping[str, Any] | None = None,
        images_kwargs: Mapping[str, Any] | None = None,
        videos_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Featurise ``audio`` (one clip or a list) and/or tokenise ``text`` (one caption or a list).

        Audio is read as the retrieval pipeline reads it (:func:`~hf_atr.data.audio_arrays.audio_clips`): one array
        is one clip (2-D: its channels, in either orientation, mixed down), a batch is a list; arrays given
        without ``sampling_rate`` are taken at the extractor's rate.

        A clip shorter than one analysis frame (:func:`~hf_atr.windowing.minimum_samples`, 25 ms) is padded
        with silence and named in a warning; a clip longer than the extractor's window
        (:func:`~hf_atr.windowing.extractor_window`) is cut to its head and named in a warning
        (:mod:`hf_atr.windowing` embeds long clips whole). Nothing is random: the same clip gives the same
        features on every call, whatever else is in the batch (CLAP's random crops and ``is_longer`` mark and
        Whisper's dither are training's; :mod:`hf_atr.long_clips` has the rule).

        Args:
            sampling_rate: rate of the arrays in ``audio`` (default: the extractor's); when it differs from
                the extractor's the audio is resampled.
            max_length: token limit for captions (the tokenizer's ``model_max_length`` by default).
            feature_backend: ``"transformers"`` (the extractor itself, per clip) or ``"torch"`` (its batched
                twin from :func:`hf_atr.features.batched_features_for`, float32, settings read from the
                extractor; the same fixed choices). Extra ``kwargs`` for the extractor
                are not accepted with ``"torch"``: set them on the extractor.
            device: where ``feature_backend="torch"`` computes and returns the audio features (default CPU).
            audio_names: one name per clip for those warnings (default: the file path, else ``item <i>``).
            text_kwargs / audio_kwargs / common_kwargs: transformers 5's per-modality options (as
                sentence-transformers passes them), read by :func:`modality_options`: ``audio_kwargs["sampling_rate"]``
                is the rate of the arrays (they are resampled), ``text_kwargs`` go to the tokenizer only,
                ``common_kwargs["return_tensors"]`` is ``return_tensors``. ``images_kwargs`` / ``videos_kwargs``
                must be empty.
        """
        if audio is None and text is None:
            raise ValueError("AtrProcessor needs `audio`, `text`, or both.")
        options = modality_options(
            text_kwargs,
            audio_kwargs,
            common_kwargs,
            images_kwargs,
            videos_kwargs,
            sampling_rate=sampling_rate,
        )
        sampling_rate = options.sampling_rate
        return_tensors = options.common.get("return_tensors", return_tensors)
        kwargs = {**kwargs, **options.audio}
        tokenizer_options = {
            "padding": padding,
            "truncation": truncation,
            "max_length": max_length,
            **options.text,
        }
        encoding: dict[str, Any] = {}
        if audio is not None:
            encoding.update(
                self._featurize(
                    audio, sampling_rate, return_tensors, feature_backend, device, audio_names, **kwargs
                )
            )
        if text is not None:
            captions = [text] if isinstance(text, str) else list(text)
            captions = [check_caption(caption, index) for index, caption in enumerate(captions)]
            encoding.update(self.tokenizer(captions, return_tensors=return_tensors, **tokenizer_options))
        return BatchFeature(encoding, tensor_type=return_tensors)

    def _featurize(
        self,
        audio: Any,
        sampling_rate: int | None,
        return_tensors: str | None,
        feature_backend: str = "transformers",
        device: str | torch.device | None = None,
        audio_names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict:
        if feature_backend not in FEATURE_BACKENDS:
            raise ValueError(f"feature_backend must be one of {FEATURE_BACKENDS}, got {feature_backend!r}.")
        given = audio_clips(
            audio, sampling_rate=sampling_rate, default_rate=self.sampling_rate, name="the clip"
        )
        if audio_names is not None and len(audio_names) != len(given.clips):
            raise ValueError(f"Got {len(given.clips)} clips but {len(audio_names)} audio_names.")
        names = list(audio_names) if audio_names is not None else given.names
        arrays = [
            decode_audio(clip, self.sampling_rate, source=name) for clip, name in zip(given.clips, names)
        ]
        report_cut_clips(names, [len(array) for array in arrays], extractor_window(self.feature_extractor))
        minimum = minimum_samples(self.feature_extractor)
        arrays = [
            pad_short_clip(array, minimum, self.sampling_rate, name) for array, name in zip(arrays, names)
        ]
        batched = batched_features_for(self.feature_extractor) if feature_backend == "torch" else None
        if batched is None:
            features = inference_features(
                self.feature_extractor,
                arrays,
                sampling_rate=self.sampling_rate,
                return_tensors=return_tensors,
                **kwargs,
            )
        elif kwargs:
            raise ValueError(
                f"feature_backend='torch' reads every setting from the feature extractor and takes no call "
                f"options, got {sorted(kwargs)}; set them on the extractor instead."
            )
        else:
            features = batched.featurize_arrays(arrays, device=device)
            if return_tensors != "pt":
                features = {name: value.cpu().numpy() for name, value in features.items()}
        return audio_batches.model_audio_inputs(features)

    def feature_storage_types(self) -> dict[str, Any]:
        """The ``datasets`` type that stores each audio input (:func:`~hf_atr.data.feature_storage.storage_type`,
        e.g. CLAP's ``input_features``: ``Array3D(shape=(1, 1001, 64), dtype="float32")``), probed on silent clips of
        one analysis frame and of two (the batched torch twins give the extractor's shapes)."""
        minimum = minimum_samples(self.feature_extractor)
        short, long = (
            audio_batches.model_audio_inputs(
                self.feature_extractor(
                    [np.zeros(length, dtype=np.float32)],
                    sampling_rate=self.sampling_rate,
                    return_tensors="np",
                )
            )
            for length in (minimum, 2 * minimum)
        )
        return feature_storage_types(short, long)

    def varying_frame_inputs(self) -> frozenset[str]:
        """The audio inputs whose first dimension (frames) grows with the clip, e.g. wav2vec2's ``input_values`` and
        their ``audio_attention_mask``; a batch of them is padded. Empty for extractors that pad or cut every clip
        to their window (AST, Whisper, CLAP, PANNs). Probed once (:meth:`feature_storage_types`)."""
        if self._varying_frames is None:
            self._varying_frames = frozenset(
                name for name, kind in self.feature_storage_types().items() if first_dimension_varies(kind)
            )
        return self._varying_frames

    def extract_audio_features(
        self,
        dataset: Any,
        *,
        audio_column: str = "audio",
        batch_size: int = 32,
        num_proc: int | None = None,
        keep_audio: bool = False,
        feature_backend: str = "transformers",
        strict: bool = False,
        cache_file_name: str | None = None,
        split: str | None = None,
    ) -> Any:
        """Run the feature extractor once over a ``datasets.Dataset``/``DatasetDict`` with ``Dataset.map``.

        Adds the extractor's output columns (e.g. ``input_values``) as fixed-shape arrays (:meth:`feature_storage_types`),
        which a training batch reads in one gather; datasets caches the result beside the dataset's files. ``feature_backend="torch"`` computes each map batch
        with the batched torch twin on the CPU.

        A clip that cannot be decoded (empty file, not audio, corrupt; named by its ``audio_id``) is left
        out of the result and listed, with the reason, in one warning per split; ``strict=True`` raises
        :class:`~hf_atr.data.audio_arrays.AudioDecodeError` at the first one instead. Clips cut to the extractor's
        window are counted and named in one warning per split (the features hold the window the extractor
        reads; embed long clips whole from raw audio with :mod:`hf_atr.windowing`), clips padded to one
        frame in a warning each.

        ``cache_file_name`` (a ``Dataset`` only) writes the result to that Arrow file, memory-mapped rather than
        held in memory, and reuses the file when it exists (as ``Dataset.map`` does): name it after what
        determines the features (see ``hf-atr train``), since an existing file is read without a check.

        ``split`` (a ``Dataset`` only) names it in its progress bar and warnings (a ``DatasetDict``'s splits go by
        their keys).
        """
        options = {
            "audio_column": audio_column,
            "batch_size": batch_size,
            "num_proc": num_proc,
            "keep_audio": keep_audio,
            "strict": strict,
        }

        def featurize(arrays: Sequence[np.ndarray], names: Sequence[str]) -> dict[str, Any]:
            return self._featurize(arrays, None, "np", feature_backend, audio_names=names)

        if isinstance(dataset, dict):  # a DatasetDict: each split on its own, named in its report
            if cache_file_name is not None:
                raise ValueError(
                    "cache_file_name applies to a datasets.Dataset; map each split of a DatasetDict."
                )
            return type(dataset)(
                {
                    name: extract_split(self, featurize, data, split=name, cache_file_name=None, **options)
                    for name, data in dataset.items()
                }
            )
        return extract_split(
            self, featurize, dataset, split=split, cache_file_name=cache_file_name, **options
        )


def register_auto_processor() -> None:
    """Make ``AutoProcessor`` resolve saved AtrProcessor directories without remote code."""
    AutoProcessor.register(AtrConfig, AtrProcessor, exist_ok=True)


# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "AUDIO_INPUT_NAMES": "hf_atr.audio_batches",
    "AUDIO_MASK_NAMES": "hf_atr.audio_batches",
    "audio_batch": "hf_atr.audio_batches",
    "model_audio_inputs": "hf_atr.audio_batches",
    "model_tensor": "hf_atr.audio_batches",
    "stack_feature": "hf_atr.audio_batches",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "AUDIO_BATCH_PADDINGS",
    "AtrProcessor",
    "ModalityOptions",
    "modality_options",
]
