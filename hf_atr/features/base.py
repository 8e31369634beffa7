"""What every batched torch feature extractor offers (the families live one module each beside this one)."""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch

from .spectrogram import filter_bands, interleave_bins, pad_waveforms

CPU_FRAMES_PER_CHUNK = 2048
"""On CPU, clips are featurised a few at a time so that one chunk's STFT (about this many frames) stays
in cache: 3x faster than the whole batch at once on a 32 x 5-s AST batch. Accelerators take the batch whole."""

_Method = TypeVar("_Method", bound=Callable[..., Any])


def without_autocast(method: _Method) -> _Method:
    """Run ``method(self, ...)`` with autocast off on the device of its first tensor argument (where that device
    has autocast).

    Under ``torch.autocast`` (a mixed-precision training step) the mel projection's matmuls would run in bfloat16
    or float16: decibels off by a quarter of a dB, powers below float16's range turned into ``-inf``, and
    half-precision rows written into float32 buffers (a crash). Features are computed in their inputs' dtype.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        tensor = next(value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor))
        device_type = tensor.device.type
        if not torch.amp.is_autocast_available(device_type):
            return method(self, *args, **kwargs)
        with torch.autocast(device_type=device_type, enabled=False):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class ClipWindow(NamedTuple):
    """What one call of a feature extractor reads of a clip.

    ``samples``: the window at the extractor's rate, ``None`` when it has none (every sample reaches the model);
    ``cuts_long_clips``: whether a longer clip is cut to it, keeping its head, rather than read whole by the
    extractor or the model (CLAP fusion, PE-Audio's raw waveforms), whose window then only bounds windowed search.
    """

    samples: int | None
    cuts_long_clips: bool


RandomSource = torch.Generator | np.random.RandomState | None
"""Where random choices come from: a CPU ``torch.Generator``; a ``np.random.RandomState``, which replays
the transformers extractor's own ``np.random`` calls in its order (seed it as you would seed ``np.random``
before calling the extractor and the choices are identical); or ``None``: no randomness at all, each family's
fixed choices (CLAP: the head of a long clip; Whisper: no dither), the rule at inference. Random crops and
noise are training augmentation: training hands a seeded source."""


def host_array(lengths: torch.Tensor | np.ndarray | Sequence[int]) -> np.ndarray:
    """``lengths`` as an int64 NumPy array on the host (a copy from an accelerator, which waits for it)."""
    if isinstance(lengths, torch.Tensor):
        return lengths.detach().to("cpu", torch.long).numpy()
    return np.array(lengths, dtype=np.int64)


class BatchedFeatureExtractor(abc.ABC):
    """A transformers audio feature extractor re-implemented as batched torch on any device.

    Built from one extractor instance (:meth:`from_extractor`), whose settings it copies; afterwards it
    is independent of it. Calling it on zero-padded waveforms ``(batch, samples)`` at
    :attr:`sampling_rate` with their true ``lengths`` returns the extractor's outputs (same names, same
    shapes) as tensors on the waveforms' device, computed in float32 (float64 for float64 waveforms, which is
    how they are compared with transformers' NumPy path) whatever the autocast state: half-precision
    waveforms are up-cast, and autocast is off while the features are computed.

    Random decisions (CLAP's crops) depend only on the clips' lengths; :meth:`draw_random_choices` makes
    them, so that DataLoader workers can make them and the device only computes. Without a random source
    (:data:`RandomSource` ``None``, the default) there is no random decision and no noise: the output is a
    function of the waveforms. Subclasses set
    :attr:`model_input_names` and implement :meth:`from_extractor` and :meth:`compute`.
    """

    model_input_names: tuple[str, ...] = ()

    def __init__(self, sampling_rate: int) -> None:
        self.sampling_rate = sampling_rate
        self._constants: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}
        self._arrays: dict[str, np.ndarray] = {}

    @classmethod
    @abc.abstractmethod
    def from_extractor(cls, extractor: Any) -> BatchedFeatureExtractor:
        """Build from a transformers feature extractor instance, reading every setting from it."""

    @classmethod
    def clip_window(cls, extractor: Any) -> ClipWindow:
        """The window the transformers ``extractor`` reads of a clip (:func:`hf_atr.windowing.extractor_window`
        reads it); by default none: the whole clip reaches the model."""
        return ClipWindow(None, False)

    @property
    def window_samples(self) -> int | None:
        """Samples of a clip its features depend on, read from the start (the extractor ignores the rest);
        ``None`` when the whole clip matters. A clip may be cropped to this many samples (at the start, or
        at a random offset as training augmentation) before it travels to the device."""
        return None

    @property
    def random_window(self) -> bool:
        """Whether the extractor itself picks the :attr:`window_samples` window at random (CLAP's
        rand_trunc) rather than reading the start of the clip."""
        return False

    def draw_random_choices(
        self,
        lengths: torch.Tensor,
        random_source: RandomSource = None,
        *,
        source_lengths: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """The batch's random decisions, as ``(batch, ...)`` CPU tensors; none by default. Without
        ``random_source`` they are fixed, the same on every call.

        Args:
            lengths: ``(batch,)`` lengths of the waveforms that will be featurised.
            source_lengths: ``(batch,)`` lengths before a crop to :attr:`window_samples`, when clips were
                cropped (so that a cropped clip still counts as longer than the window).
        """
        return {}

    @abc.abstractmethod
    def compute(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        host_lengths: np.ndarray,
        random_choices: dict[str, torch.Tensor],
        generator: torch.Generator | None,
    ) -> dict[str, torch.Tensor]:
        """The features of ``waveforms: (batch, samples)`` with ``lengths: (batch,)`` on their device.

        ``host_lengths: (batch,)`` holds the same lengths as an int64 NumPy array on the host: shapes and the
        other choices made in Python read it, not ``lengths``, so that they never wait for the device.
        """

    @without_autocast
    def __call__(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor | np.ndarray | Sequence[int] | None = None,
        *,
        random_source: RandomSource = None,
        random_choices: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Featurise a batch.

        Args:
            waveforms: ``(batch, samples)`` float at :attr:`sampling_rate`, zero-padded after each clip.
            lengths: ``(batch,)`` true lengths; ``None`` when every clip fills ``samples``. Lengths on the host (a
                NumPy array, a list, a CPU tensor) are read without waiting for the device; a tensor on an
                accelerator is read back once.
            random_source: used when ``random_choices`` is not given (see :data:`RandomSource`); also
                drives noise the extractor adds (Whisper's dither), which is added only with a
                ``torch.Generator``. ``None`` (default): nothing random, the fixed inference choices.
            random_choices: decisions made earlier by :meth:`draw_random_choices` (e.g. in a DataLoader
                worker).

        Returns:
            The extractor's outputs by name (e.g. ``input_values``), tensors on ``waveforms.device``, floating
            ones in float32 (float64 for float64 waveforms), under ``torch.autocast`` too.
        """
        if waveforms.ndim != 2 or 0 in waveforms.shape or not torch.is_floating_point(waveforms):
            raise ValueError(
                f"{type(self).__name__} expects float waveforms of shape (batch, samples), both non-zero, got "
                f"{waveforms.dtype} {tuple(waveforms.shape)}."
            )
        batch, samples = waveforms.shape
        host_lengths = host_array(lengths) if lengths is not None else np.full(batch, samples, dtype=np.int64)
        if host_lengths.shape != (batch,) or host_lengths.min() < 1 or host_lengths.max() > samples:
            raise ValueError(
                f"lengths must hold one length in [1, {samples}] per clip, got {host_lengths.tolist()}."
            )
        if isinstance(lengths, torch.Tensor):
            device_lengths = lengths.to(device=waveforms.device, dtype=torch.long)
        else:
            # From pageable host memory: the copy is queued without waiting for the kernels already queued.
            device_lengths = torch.from_numpy(host_lengths).to(waveforms.device, non_blocking=True)
        if random_choices is None:
            random_choices = self.draw_random_choices(torch.from_numpy(host_lengths), random_source)
        random_choices = {name: value.to(waveforms.device) for name, value in random_choices.items()}
        generator = random_source if isinstance(random_source, torch.Generator) else None
        waveforms = waveforms.to(torch.promote_types(waveforms.dtype, torch.float32))
        return self.compute(waveforms, device_lengths, host_lengths, random_choices, generator)

    def featurize_arrays(
        self,
        arrays: Sequence[np.ndarray | torch.Tensor],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        random_source: RandomSource = None,
    ) -> dict[str, torch.Tensor]:
        """Featurise 1-D waveforms of any lengths at :attr:`sampling_rate` on ``device`` (default CPU)."""
        waveforms, _ = pad_waveforms(arrays, device=device, dtype=dtype)
        # The lengths as the host knows them, so that the device is not read back.
        return self(waveforms, [len(array) for array in arrays], random_source=random_source)

    @staticmethod
    def chunks(batch: int, frames_per_clip: int, device: torch.device) -> list[slice]:
        """Slices of the batch to featurise in turn (see :data:`CPU_FRAMES_PER_CHUNK`)."""
        if device.type != "cpu":
            return [slice(0, batch)]
        clips = max(1, CPU_FRAMES_PER_CHUNK // max(1, frames_per_clip))
        return [slice(start, min(start + clips, batch)) for start in range(0, batch, clips)]

    def constant(self, name: str, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The array registered as ``name`` (a filter bank, a window) on ``like``'s device, in ``dtype``
        (default ``like``'s), cached."""
        key = (name, like.device, dtype or like.dtype)
        if key not in self._constants:
            self._constants[key] = torch.from_numpy(self._arrays[name]).to(device=like.device, dtype=key[2])
        return self._constants[key]

    def register_mel_filterbank(self, mel_filters: Any, window: Any) -> None:
        """Keep the ``(fft_length // 2 + 1, num_mel_bins)`` filterbank (with its copy laid out for
        :func:`~hf_atr.features.spectrogram.mel_power_` and the bins each filter covers, :attr:`bands`) and the
        analysis ``window``, as :meth:`constant` ``"mel_filters"``, ``"interleaved_mel_filters"``, ``"window"``."""
        self.register_array("mel_filters", mel_filters)
        self.register_array("interleaved_mel_filters", interleave_bins(self._arrays["mel_filters"]))
        self.register_array("window", window)
        self.bands = filter_bands(self._arrays["mel_filters"])

    @property
    def num_mel_bins(self) -> int:
        """Mel bands of the filterbank kept by :meth:`register_mel_filterbank`."""
        return self._arrays["mel_filters"].shape[1]

    def register_array(self, name: str, array: np.ndarray) -> None:
        """Keep ``array`` (float64 copy) for :meth:`constant`."""
        self._arrays[name] = np.array(array, dtype=np.float64)
        self._constants = {key: value for key, value in self._constants.items() if key[0] != name}

    def __getstate__(self) -> dict[str, Any]:
        # Device copies are a cache: a pickled instance (sent to DataLoader workers) carries the arrays only.
        state = self.__dict__.copy()
        state["_constants"] = {}
        return state
