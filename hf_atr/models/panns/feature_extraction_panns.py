"""PANNs log-mel front end as a transformers feature extractor (NumPy path, no torchaudio)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from transformers import AutoFeatureExtractor, BatchFeature, SequenceFeatureExtractor
from transformers.audio_utils import mel_filter_bank, spectrogram_batch, window_function
from transformers.utils import logging

from .configuration_panns import PannsConfig

logger = logging.get_logger(__name__)

POWER_TO_DB_AMIN = 1e-10
"""PANNs' ``amin``: power floor before ``10·log10`` (−100 dB); the reference power is 1.0 and there is no ``top_db``."""


class PannsFeatureExtractor(SequenceFeatureExtractor):
    r"""Turns mono waveforms into the log-mel spectrograms PANNs CNN14 / ResNet38 were trained on.

    The front end of the PANNs code (torchlibrosa's ``Spectrogram`` + ``LogmelFilterBank`` with the
    settings of ``Cnn14``): periodic Hann window of ``fft_window_size`` samples, hop ``hop_length``,
    centred frames with reflect padding, power spectrum, Slaney-normalised mel filter bank (librosa's
    default) between ``frequency_min`` and ``frequency_max``, then ``10·log10(max(power, 1e-10))``
    (reference 1.0, no ``top_db``). Defaults are the 32 kHz AudioSet models: n_fft 1024, hop 320,
    64 mel bins, 50–14000 Hz. Batch normalisation over mel bins (PANNs' ``bn0``) is part of the model,
    because the checkpoints train it.

    Padding rule (no attention mask): clips are zero-padded at the end (or truncated) to
    ``max_length`` samples, ``max_length_s`` seconds by default (10 s: AudioSet clips, as PANNs pads
    them in training). The model sees the padding, as PANNs does; ``padding="longest"`` pads only to
    the longest clip of the batch instead. A clip of ``n`` samples gives ``1 + n // hop_length`` frames.

    Args:
        feature_size: number of mel bins.
        sampling_rate: rate the waveforms must have (Hz).
        fft_window_size: STFT window and FFT size (samples).
        hop_length: STFT hop (samples).
        frequency_min / frequency_max: mel filter bank range (Hz).
        max_length_s: length clips are padded or truncated to (seconds).
        padding_value: value used to pad waveforms (silence).
    """

    model_input_names = ["input_features"]

    def __init__(
        self,
        feature_size: int = 64,
        sampling_rate: int = 32000,
        fft_window_size: int = 1024,
        hop_length: int = 320,
        frequency_min: float = 50.0,
        frequency_max: float = 14000.0,
        max_length_s: float = 10.0,
        padding_value: float = 0.0,
        **kwargs: Any,
    ) -> None:
        kwargs["return_attention_mask"] = False
        super().__init__(
            feature_size=feature_size, sampling_rate=sampling_rate, padding_value=padding_value, **kwargs
        )
        if frequency_max > sampling_rate / 2:
            raise ValueError(
                f"frequency_max={frequency_max} Hz is above the Nyquist frequency of {sampling_rate} Hz audio."
            )
        self.fft_window_size = fft_window_size
        self.hop_length = hop_length
        self.frequency_min = frequency_min
        self.frequency_max = frequency_max
        self.max_length_s = max_length_s
        self.window = window_function(fft_window_size, "hann", periodic=True)
        self.mel_filters = mel_filter_bank(
            num_frequency_bins=fft_window_size // 2 + 1,
            num_mel_filters=feature_size,
            min_frequency=frequency_min,
            max_frequency=frequency_max,
            sampling_rate=sampling_rate,
            norm="slaney",
            mel_scale="slaney",
        )

    @property
    def max_length_samples(self) -> int:
        """Default padding/truncation length in samples (``max_length_s · sampling_rate``)."""
        return int(round(self.max_length_s * self.sampling_rate))

    def to_dict(self) -> dict[str, Any]:
        """Serialisable settings; the window and filter bank are rebuilt from them on load."""
        output = super().to_dict()
        for derived in ("window", "mel_filters"):
            output.pop(derived, None)
        return output

    def stft_kernels(self) -> tuple[np.ndarray, np.ndarray]:
        """The windowed DFT as the PANNs checkpoints store it (torchlibrosa's ``conv_real``/``conv_imag``).

        Returns ``(real, imag)``, each ``(fft_window_size // 2 + 1, 1, fft_window_size)``:
        ``window[n]·cos(2πkn/N)`` and ``−window[n]·sin(2πkn/N)``. Used to check a checkpoint's front end.
        """
        size = self.fft_window_size
        phase = 2 * np.pi * np.outer(np.arange(size // 2 + 1), np.arange(size)) / size
        return (np.cos(phase) * self.window)[:, None, :], (-np.sin(phase) * self.window)[:, None, :]

    def log_mel_spectrogram(self, waveforms: Sequence[np.ndarray]) -> np.ndarray:
        """Log-mel spectrograms of equal-length mono waveforms: ``(batch, frames, feature_size)`` float64 dB."""
        spectrograms = spectrogram_batch(
            [np.asarray(waveform, dtype=np.float64) for waveform in waveforms],
            self.window,
            frame_length=self.fft_window_size,
            hop_length=self.hop_length,
            power=2.0,
            center=True,
            pad_mode="reflect",
            mel_filters=self.mel_filters,
            mel_floor=POWER_TO_DB_AMIN,
            log_mel="dB",
            reference=1.0,
            min_value=POWER_TO_DB_AMIN,
            db_range=None,
            dtype=np.float64,
        )
        return np.stack([spectrogram.T for spectrogram in spectrograms])

    def __call__(
        self,
        raw_speech: np.ndarray | Sequence[float] | Sequence[np.ndarray],
        sampling_rate: int | None = None,
        padding: bool | str = "max_length",
        truncation: bool = True,
        max_length: int | None = None,
        return_tensors: str | None = None,
    ) -> BatchFeature:
        """Featurise one clip or a batch: ``input_features`` ``(batch, frames, feature_size)`` float32.

        Args:
            raw_speech: a 1-D waveform, or a list of them, at ``sampling_rate``.
            sampling_rate: the waveforms' rate; must equal the extractor's (resample before).
            padding: ``"max_length"`` (default: every clip padded to ``max_length`` samples),
                ``"longest"``/``True`` (to the longest clip), or ``False`` (clips must already be equal).
            truncation: cut clips longer than ``max_length``.
            max_length: padding/truncation length in samples (default ``max_length_s · sampling_rate``).
            return_tensors: ``"pt"``, ``"np"`` or ``None`` (lists).
        """
        if sampling_rate is None:
            logger.warning(
                f"No sampling_rate given to {type(self).__name__}; assuming {self.sampling_rate} Hz. Pass it "
                "to catch audio at the wrong rate."
            )
        elif sampling_rate != self.sampling_rate:
            raise ValueError(
                f"{type(self).__name__} expects {self.sampling_rate} Hz audio, got {sampling_rate} Hz; "
                "resample first."
            )
        # SequenceFeatureExtractor.pad pads (samples, feature_size) arrays: give it (samples, 1) columns.
        columns = [clip[:, None] for clip in _as_mono_clips(raw_speech)]
        padded = self.pad(
            BatchFeature({"input_features": columns}),
            padding=padding,
            max_length=max_length if max_length is not None else self.max_length_samples,
            truncation=truncation,
            return_attention_mask=False,
        )
        waveforms = [column[:, 0] for column in padded["input_features"]]
        features = self.log_mel_spectrogram(waveforms).astype(np.float32)
        return BatchFeature({"input_features": features}, tensor_type=return_tensors)


def _as_mono_clips(raw_speech: Any) -> list[np.ndarray]:
    """A list of 1-D float arrays from one waveform or a batch; names the clip that is not mono or empty."""
    is_single = isinstance(raw_speech, np.ndarray) and raw_speech.ndim == 1
    is_single = is_single or (
        isinstance(raw_speech, (list, tuple)) and len(raw_speech) > 0 and np.isscalar(raw_speech[0])
    )
    items = [raw_speech] if is_single else list(raw_speech)
    if not items:
        raise ValueError("PannsFeatureExtractor got no audio (an empty batch).")
    clips = []
    for index, item in enumerate(items):
        clip = np.asarray(item, dtype=np.float32)
        if clip.ndim != 1:
            raise ValueError(
                f"Clip {index} has shape {clip.shape}; PannsFeatureExtractor takes mono 1-D waveforms "
                "(average the channels first)."
            )
        if clip.size == 0:
            raise ValueError(f"Clip {index} is empty (0 samples).")
        clips.append(clip)
    return clips


def register_auto_feature_extractor() -> None:
    """Make ``AutoFeatureExtractor`` load a :class:`PannsFeatureExtractor` for a :class:`PannsConfig`."""
    AutoFeatureExtractor.register(PannsConfig, PannsFeatureExtractor, exist_ok=True)


__all__ = ["PannsFeatureExtractor", "register_auto_feature_extractor"]
