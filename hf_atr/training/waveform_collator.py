"""Raw waveforms from DataLoader workers, log-mel features on the training device.

The worker side (:class:`WaveformCollator`, here) decodes, resamples and crops each clip to the window its
feature extractor reads, and makes the extractor's random choices; the device side
(:func:`~hf_atr.training.device_features.featurize_waveforms`) turns the batch's waveforms into the model's
audio inputs with the extractor's batched torch twin (:mod:`hf_atr.features`). Every random draw is seeded from ``(seed, epoch,
item)``, so a batch does not depend on which worker built it, on the number of workers, or on the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.pcm import decode_pcm16, pcm16_to_float
from ..features.base import BatchedFeatureExtractor
from ..features.registry import batched_features_for
from ..features.spectrogram import pad_waveforms
from .collator import EPOCH, AtrDataCollator
from .device_features import CROPPED, RANDOM_CHOICES, WAVEFORM_LENGTHS, WAVEFORMS

CROPS = ("random", "start")


def item_seed(seed: int, epoch: int, *keys: Any) -> int:
    """A 63-bit seed from ``(seed, epoch, keys)``, the same in every process (unlike ``hash``)."""
    text = "\x1f".join(str(part) for part in (seed, epoch, *keys))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


@dataclass
class WaveformCollator(AtrDataCollator):
    """Worker side of on-device features: rows with raw ``audio`` -> waveforms + captions + metadata.

    Each row's ``audio`` (a shared-schema value, a path or an ``{"array", "sampling_rate"}`` dict) is
    decoded with soundfile and resampled to the extractor's rate (:func:`~hf_atr.data.audio.decode_audio`).
    A mono 16-bit PCM file already at that rate is read as it is stored, ``int16``
    (:func:`~hf_atr.data.pcm.decode_pcm16`): a batch of such clips travels from the worker to the training
    process in half the bytes, and :func:`~hf_atr.training.device_features.featurize_waveforms` scales it by
    ``1/32768`` on the device, which gives exactly the float32 waveforms the float path would have sent. A batch
    that mixes such clips with others (stereo, another rate or sample format) is sent in float32. ``int16_batches``
    says whether to send int16 at all: ``None`` (default) does, unless :class:`~hf_atr.AtrTrainer` trains on the
    CPU, where the scaling would move from the workers into the training process (5x its cost there on 2 cores,
    ``benchmarks/input_pipeline.py``) and no host-to-device copy is saved; ``False`` scales in the worker.
    A clip longer than the extractor's window (:attr:`BatchedFeatureExtractor.window_samples`: AST's
    ``max_length`` frames, Whisper's ``chunk_length``, CLAP rand_trunc's ``max_length_s``; CLAP fusion
    reads the whole clip and is never cut, as does PE-Audio's raw-waveform extractor, whose reflection to a multiple
    of its hop and ``padding_mask`` are made on the device from the batch's lengths) is cut to it:

    - ``crop="random"`` (default): at an offset drawn uniformly, seeded by ``(seed, epoch, audio_id,
      caption_language, caption_index)``, so a long clip shows a different window every epoch. For AST,
      Whisper and PANNs this is training augmentation (the extractor itself reads the start); for CLAP
      rand_trunc it is the extractor's own crop.
    - ``crop="start"``: AST and Whisper keep the start, exactly what their extractors read; CLAP
      rand_trunc still draws its crop as above (that is its extractor's behaviour).

    The remaining random choices (CLAP fusion's three crops, the clip forced ``is_longer``) are drawn with
    a generator seeded by ``(seed, epoch, the batch's items)``. The epoch is the item's ``epoch`` entry when it
    has one (:class:`~hf_atr.training.CaptionPairDataset` and the streaming pairs tag their items, so the
    epoch reaches every worker, persistent or not), otherwise the collator's own (:meth:`set_epoch`, before
    each epoch's iterator is created: with ``persistent_workers=False``, the DataLoader's default, workers get
    a fresh copy of the collator every epoch).

    Returns, besides the captions and metadata of :class:`AtrDataCollator`: ``waveforms: (batch,
    samples)`` zero-padded, ``int16`` PCM when every clip of the batch was read as stored, else float32,
    ``waveform_lengths: (batch,)``, an int64 NumPy array (it stays on the host), ``feature_random_choices`` (a
    dict of ``(batch, ...)`` tensors) and ``waveform_cropped: (batch,)``, a bool NumPy array (clips cut to the
    window; it stays on the host).
    :func:`~hf_atr.training.device_features.featurize_waveforms` turns them into model inputs on the device.

    Raises:
        ValueError: the processor's feature extractor has no batched torch implementation.
    """

    crop: str = "random"
    seed: int = 0
    epoch: int = 0
    int16_batches: bool | None = None
    features: BatchedFeatureExtractor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}, got {self.crop!r}.")
        features = batched_features_for(self.processor.feature_extractor)
        if features is None:
            raise ValueError(
                f"WaveformCollator needs a feature extractor with batched torch features; "
                f"{type(self.processor.feature_extractor).__name__} has none. Use AtrDataCollator."
            )
        self.features = features

    def set_epoch(self, epoch: int) -> None:
        """Draw this epoch's crops (and other random choices)."""
        self.epoch = int(epoch)

    def audio_inputs(self, rows: Sequence[dict[str, Any]], audio_ids: Sequence[str]) -> dict[str, Any]:
        item_keys = [
            (audio_id, row.get("caption_language", ""), row.get("caption_index", ""))
            for audio_id, row in zip(audio_ids, rows)
        ]
        epochs = [int(row.get(EPOCH, self.epoch)) for row in rows]
        waveforms, source_lengths = [], []
        for key, epoch, row in zip(item_keys, epochs, rows):
            if "audio" not in row:
                raise ValueError(f"Clip {key[0]!r} has no 'audio' column to decode (columns: {sorted(row)}).")
            waveform = decode_pcm16(row["audio"], self.features.sampling_rate, source=key[0])
            source_lengths.append(len(waveform))
            waveforms.append(self.cut(waveform, np.random.default_rng(item_seed(self.seed, epoch, *key))))
        if self.int16_batches is not False and all(waveform.dtype == np.int16 for waveform in waveforms):
            padded, lengths = pad_waveforms(waveforms, dtype=torch.int16)
        else:
            padded, lengths = pad_waveforms(
                [pcm16_to_float(w) if w.dtype == np.int16 else w for w in waveforms]
            )
        generator = torch.Generator().manual_seed(item_seed(self.seed, epochs, *item_keys))
        source_lengths = torch.tensor(source_lengths)
        random_choices = self.features.draw_random_choices(lengths, generator, source_lengths=source_lengths)
        return {
            WAVEFORMS: padded,
            WAVEFORM_LENGTHS: lengths.numpy(),
            RANDOM_CHOICES: random_choices,
            CROPPED: (source_lengths > lengths).numpy(),
        }

    def crop_description(self) -> str:
        """How clips longer than the window are cut, in words (for the trainer's log and the card)."""
        if self.features.window_samples is None:
            return "read whole: the feature extractor has no window (CLAP fusion, PE-Audio)"
        window = self.features.window_samples / self.features.sampling_rate
        if self.crop == "start" and not self.features.random_window:
            return f"cut to their first {window:g} s (crop='start')"
        return (
            f"cut to a {window:g}-s window at a random offset, drawn anew every epoch and seeded by "
            f"(seed={self.seed}, epoch, clip)"
        )

    def cut(self, waveform: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``waveform`` cut to the extractor's window (see the class docstring)."""
        window = self.features.window_samples
        if window is None or len(waveform) <= window:
            return waveform
        if self.crop == "start" and not self.features.random_window:
            return waveform[:window]
        offset = int(rng.integers(0, len(waveform) - window + 1))
        return waveform[offset : offset + window]
