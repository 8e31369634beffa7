"""The sounds of SynthCaps: its sound events synthesised, and clips rendered as scenes of them with their captions.

A clip (:func:`generate_clip`) is a scene of one to three events of :data:`SOUND_EVENTS`, played one after the
other or two at a time, each loud or quiet (:func:`render_event`), captioned in every language by
:mod:`hf_atr.data.synthcaps_grammar`. :mod:`hf_atr.data.synthcaps` makes the corpus of these clips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hf_atr.data.schema import LANGUAGES
from hf_atr.data.synthcaps_grammar import LOUDNESS_LEVELS, Part, Scene, SoundOccurrence, caption_scene

SOUND_EVENTS: tuple[str, ...] = (
    "low_tone",
    "mid_tone",
    "high_tone",
    "beeps",
    "chirp_up",
    "chirp_down",
    "white_noise",
    "pink_noise",
    "brown_noise",
    "clicks",
    "buzz",
    "siren",
    "silence",
)
"""Names of the sound event classes (also the ESC-50 layout's categories and the ``label`` values)."""

SYNTHCAPS_SPLITS: tuple[str, ...] = ("train", "validation", "test")

# 20 dB between loud and quiet: a level step any log-mel front end sees.
_RMS_BY_LOUDNESS = {"loud": 0.15, "quiet": 0.015}
# Clicks are sparse impulses; their level is set by the peak (an RMS target would make them clip).
_CLICK_PEAK_BY_LOUDNESS = {"loud": 0.8, "quiet": 0.08}
_FADE_SECONDS = 0.01
MIN_SAMPLING_RATE = 12000  # the chirps reach 5.5 kHz
_MIN_DURATION = 0.5
# Part layouts of a scene: the number of overlapping events of each part, in order.
_LAYOUTS: tuple[tuple[int, ...], ...] = ((1,), (1, 1), (2,), (1, 1, 1), (2, 1), (1, 2))
_SILENT_PART_PROBABILITY = 0.15


@dataclass(frozen=True)
class SynthClip:
    """One generated clip: ``waveform: (samples,)`` float32, its scene, captions and label."""

    waveform: np.ndarray
    scene: Scene
    captions: dict[str, list[str]]
    label: str


def render_event(
    event: str, num_samples: int, sampling_rate: int, rng: np.random.Generator, loudness: str | None = "loud"
) -> np.ndarray:
    """Synthesise ``num_samples`` of ``event`` at ``loudness`` as a float32 ``(num_samples,)`` array.

    Parameters (frequencies, rates) are drawn from narrow ranges with ``rng`` so that clips vary but the
    classes never overlap: low tone 220-280 Hz, mid tone 0.9-1.1 kHz, high tone 3.3-3.9 kHz, beeps 1.9-2.1 kHz
    gated at 5-7 Hz, logarithmic chirps between 250-350 Hz and 4.5-5.5 kHz, white / pink (1/f) / brown (1/f^2) noise,
    clicks (impulses at 8-14 Hz), buzz (sawtooth at 100-160 Hz), siren (wailing between ~600 and ~1500 Hz at 1.5-3 Hz).
    Loud events have an RMS of 0.15, quiet ones 0.015 (clicks: peak 0.8 / 0.08); 10 ms fades at both ends.
    """
    if event not in SOUND_EVENTS:
        raise ValueError(f"Unknown SynthCaps sound event {event!r}; known events: {list(SOUND_EVENTS)}.")
    if event == "silence":
        return np.zeros(num_samples, dtype=np.float32)
    if loudness not in LOUDNESS_LEVELS:
        raise ValueError(f"loudness must be one of {list(LOUDNESS_LEVELS)} for {event!r}, got {loudness!r}.")
    time = np.arange(num_samples) / sampling_rate
    signal = _GENERATORS[event](time, sampling_rate, rng)
    if event == "clicks":
        signal = signal * (_CLICK_PEAK_BY_LOUDNESS[loudness] / max(np.abs(signal).max(), 1e-12))
    else:
        signal = signal * (_RMS_BY_LOUDNESS[loudness] / max(np.sqrt(np.mean(signal**2)), 1e-12))
    return (signal * _fade(num_samples, sampling_rate)).astype(np.float32)


def generate_clip(
    split: str, index: int, *, duration: float = 2.0, sampling_rate: int = 16000, seed: int = 0
) -> SynthClip:
    """Generate clip ``index`` of ``split`` (independent of how many clips the split has).

    The label, the event the scene is built around, cycles through :data:`SOUND_EVENTS` with ``index`` so
    that every class is equally frequent; it is heard in the first part (alone or overlapping another
    event). ``"silence"`` clips are silent throughout; elsewhere silence is only a later part of a
    sequence, so the label is always audible. Captions cover all eight languages.
    """
    if split not in SYNTHCAPS_SPLITS:
        raise ValueError(f"Unknown SynthCaps split {split!r}; use one of {list(SYNTHCAPS_SPLITS)}.")
    check_clip_format(duration, sampling_rate)
    rng = np.random.default_rng([seed, SYNTHCAPS_SPLITS.index(split), index])
    label = SOUND_EVENTS[index % len(SOUND_EVENTS)]
    scene = _sample_scene(rng, label)
    waveform = _render_scene(scene, round(duration * sampling_rate), sampling_rate, rng)
    captions = {language: caption_scene(scene, language) for language in LANGUAGES}
    return SynthClip(waveform=waveform, scene=scene, captions=captions, label=label)


def check_clip_format(duration: float, sampling_rate: int) -> None:
    if duration < _MIN_DURATION:
        raise ValueError(
            f"duration must be at least {_MIN_DURATION} s (three events in sequence), got {duration}."
        )
    if sampling_rate < MIN_SAMPLING_RATE:
        raise ValueError(f"sampling_rate must be at least {MIN_SAMPLING_RATE} Hz, got {sampling_rate}.")


def _sample_scene(rng: np.random.Generator, label: str) -> Scene:
    if label == "silence":
        return ((SoundOccurrence("silence", None),),)
    layout = _LAYOUTS[rng.integers(len(_LAYOUTS))]
    audible = [event for event in SOUND_EVENTS if event not in (label, "silence")]
    others = iter(rng.permutation(audible).tolist())
    silence_used = False
    parts: list[Part] = []
    for part_index, size in enumerate(layout):
        events = []
        for slot in range(size):
            if part_index == 0 and slot == 0:
                events.append(label)
            elif (
                size == 1 and part_index > 0 and not silence_used and rng.random() < _SILENT_PART_PROBABILITY
            ):
                events.append("silence")
                silence_used = True
            else:
                events.append(next(others))
        occurrences = [
            SoundOccurrence(event, None if event == "silence" else LOUDNESS_LEVELS[rng.integers(2)])
            for event in events
        ]
        # Overlapping events sound the same in either order, so the captions name them in a canonical one:
        # the louder first ("a loud siren over quiet noise"), then in SOUND_EVENTS order.
        occurrences.sort(
            key=lambda occurrence: (occurrence.loudness != "loud", SOUND_EVENTS.index(occurrence.event))
        )
        parts.append(tuple(occurrences))
    return tuple(parts)


def _render_scene(scene: Scene, num_samples: int, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
    """Parts one after the other (lengths jittered by +-25 %), the events of a part summed."""
    weights = 1 + rng.uniform(-0.25, 0.25, size=len(scene))
    boundaries = np.round(np.concatenate([[0], np.cumsum(weights) / weights.sum()]) * num_samples).astype(int)
    waveform = np.zeros(num_samples, dtype=np.float32)
    for part, start, stop in zip(scene, boundaries[:-1], boundaries[1:]):
        for occurrence in part:
            waveform[start:stop] += render_event(
                occurrence.event, stop - start, sampling_rate, rng, occurrence.loudness
            )
    peak = np.abs(waveform).max()
    if peak > 0.99:
        # Two loud overlapping noises can exceed full scale; scale the clip rather than clip it.
        waveform *= 0.99 / peak
    return waveform


def _fade(num_samples: int, sampling_rate: int) -> np.ndarray:
    ramp_length = min(int(_FADE_SECONDS * sampling_rate), num_samples // 2)
    envelope = np.ones(num_samples)
    ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp_length) / max(ramp_length, 1))
    envelope[:ramp_length] = ramp
    envelope[num_samples - ramp_length :] = ramp[::-1]
    return envelope


def _sine(frequency: float, time: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.sin(2 * np.pi * frequency * time + rng.uniform(0, 2 * np.pi))


def _tone(low_hz: float, high_hz: float) -> Callable:
    return lambda time, sampling_rate, rng: _sine(rng.uniform(low_hz, high_hz), time, rng)


def _beeps(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
    period = 1 / rng.uniform(5, 7)
    on = (time % period) < period / 2
    # Smooth the gate over ~2 ms so each beep starts without a broadband click.
    kernel = np.hanning(max(int(0.002 * sampling_rate), 3))
    gate = np.convolve(on.astype(float), kernel / kernel.sum(), mode="same")
    return gate * _sine(rng.uniform(1900, 2100), time, rng)


def _chirp(start_hz: tuple[float, float], end_hz: tuple[float, float]) -> Callable:
    def generate(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
        from scipy.signal import chirp  # scipy costs 0.3-0.5 s to import: only when generating audio

        span = max(time[-1], 1 / sampling_rate)
        return chirp(time, rng.uniform(*start_hz), span, rng.uniform(*end_hz), method="logarithmic")

    return generate


def _colored_noise(exponent: float) -> Callable:
    """Gaussian noise with power spectrum ~ 1/f**exponent (0 white, 1 pink, 2 brown) above 20 Hz."""

    def generate(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
        if exponent == 0:
            return rng.standard_normal(len(time))
        from scipy.fft import next_fast_len  # see _chirp

        # Shape a slightly longer noise of a fast FFT length (segment lengths are arbitrary) and cut it.
        fft_length = next_fast_len(len(time), real=True)
        spectrum = np.fft.rfft(rng.standard_normal(fft_length))
        frequencies = np.fft.rfftfreq(fft_length, 1 / sampling_rate)
        spectrum *= np.maximum(frequencies, 20.0) ** (-exponent / 2)
        spectrum[frequencies < 20] = 0
        return np.fft.irfft(spectrum, n=fft_length)[: len(time)]

    return generate


def _clicks(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
    period = max(int(sampling_rate / rng.uniform(8, 14)), 1)
    signal = np.zeros(len(time))
    signal[rng.integers(period) :: period] = 1.0
    return signal


def _buzz(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
    from scipy.signal import sawtooth  # see _chirp

    return sawtooth(2 * np.pi * rng.uniform(100, 160) * time + rng.uniform(0, 2 * np.pi))


def _siren(time: np.ndarray, sampling_rate: int, rng: np.random.Generator) -> np.ndarray:
    centre, deviation, rate = rng.uniform(950, 1050), rng.uniform(350, 450), rng.uniform(1.5, 3)
    frequency = centre + deviation * np.sin(2 * np.pi * rate * time + rng.uniform(0, 2 * np.pi))
    return np.sin(2 * np.pi * np.cumsum(frequency) / sampling_rate)


_GENERATORS: dict[str, Callable] = {
    "low_tone": _tone(220, 280),
    "mid_tone": _tone(900, 1100),
    "high_tone": _tone(3300, 3900),
    "beeps": _beeps,
    "chirp_up": _chirp((250, 350), (4500, 5500)),
    "chirp_down": _chirp((4500, 5500), (250, 350)),
    "white_noise": _colored_noise(0),
    "pink_noise": _colored_noise(1),
    "brown_noise": _colored_noise(2),
    "clicks": _clicks,
    "buzz": _buzz,
    "siren": _siren,
}
