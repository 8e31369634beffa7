"""Synthesised moments, as Clotho-Moment was made (Munakata et al., "Language-based Audio Moment Retrieval", 2024):
captioned clips laid over long background recordings at random, non-overlapping times.

For each recording :func:`synthesize_moments` draws, from one generator seeded by ``(seed, split, i)`` (so recording
``i`` is the same whatever the number of recordings asked for, and the splits built with one seed differ: a test
recording never repeats a training recording's background stretch and event times):

1. its length, uniform in ``duration_range`` seconds (30–300 s by default: CASTELLA's recordings are 1–5 minutes,
   Clotho-Moment's one);
2. its background: a random stretch of the background recordings, joined end to end in random order with a
   :data:`CROSSFADE_S` crossfade when one is too short (real clips of 15–30 s make a 5-minute background);
3. 1–5 events (``events_range``): distinct clips of the source dataset, one random caption each as the query,
   placed in random order with random gaps (a uniform random split of the time the events leave free), so that
   no two overlap;
4. levels: the background is scaled to :data:`BACKGROUND_RMS_DBFS`, each event so that its power over the
   background's is an SNR drawn uniformly in ``snr_db`` (Eq. 1 below), and the whole mix scaled down when its
   peak would pass :data:`PEAK_LIMIT` (the same gain for background and events, so the SNRs hold).

Loudness is the RMS level (mean power, in dB): ``SNR = 10 log10(mean(e²) / mean(b²))`` (1), ``b`` the whole
scaled background, ``e`` the scaled event. ``pyloudnorm`` (ITU-R BS.1770 K-weighting and gating) is not a
dependency of hf-atr; the K-weighting moves levels of everyday sounds by a few dB, less than the SNR range drawn.
Clotho-Moment's own levels (clip peak 5 dB above to 5 dB below the background's RMS, then the background lowered
by 15–25 dB) come out at roughly 0–20 dB in these terms, the default range.

Written: ``<output_dir>/audio/<vid>.flac`` (16-bit FLAC) and ``<output_dir>/moments_<split>_release.jsonl`` in the
format :func:`hf_atr.data.moments.load_moments` reads (``qid`` = ``<vid>_<n>``, windows in seconds at full
precision: ``start = first sample / sampling_rate``), each line with the event's ``snr_db``, the source clip's
``source_audio_id`` and its ``source_id`` (``None`` when unknown), so that a moment built from a test clip can be
traced and the overlap filter (:mod:`hf_atr.data.overlap`) run on the source clips beforehand.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile
from datasets import Dataset

from hf_atr.data.audio import AUDIO_EXTENSIONS, check_audio_file, decode_audio, is_appledouble
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.corpus_utils import CorpusProblems, expand_path
from hf_atr.data.schema import SOURCE_ID_COLUMN
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

BACKGROUND_RMS_DBFS = -30.0
"""RMS level of every background (dB re full scale): quiet enough that events 20 dB above it rarely clip."""

PEAK_LIMIT = 0.99
"""The largest sample magnitude written; a louder mix is scaled down as a whole."""

CROSSFADE_S = 0.05
"""Length of the linear crossfade where two background recordings are joined."""

DEFAULT_SAMPLING_RATE = 32_000
"""Clotho-Moment's and CASTELLA's rate."""


@dataclass
class SynthesisReport:
    """What :func:`synthesize_moments` wrote: the JSONL file, the counts, and the clips skipped as unreadable."""

    annotations: Path
    audio_dir: Path
    recordings: int = 0
    queries: int = 0
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        skipped = f"; skipped {len(self.skipped)} unreadable clip(s)" if self.skipped else ""
        return f"{self.queries} moments in {self.recordings} recordings: {self.annotations}{skipped}"


def event_gain(event: np.ndarray, background_power: float, snr_db: float) -> float:
    """The factor ``g`` that puts ``g * event`` at ``snr_db`` over a background of mean power ``background_power``
    (Eq. 1: ``10 log10(mean((g e)²) / background_power) = snr_db``)."""
    event_power = float(np.mean(np.square(event, dtype=np.float64)))
    if event_power == 0.0:
        raise ValueError("the event is silent: no gain gives it an SNR.")
    return float(np.sqrt(background_power / event_power * 10.0 ** (snr_db / 10.0)))


def audio_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """The audio files named by ``paths``: files as given, folders searched (not recursively) for files with an
    extension of :data:`~hf_atr.data.audio.AUDIO_EXTENSIONS`, in name order."""
    files: list[Path] = []
    for entry in map(expand_path, paths):
        if entry.is_dir():
            files.extend(
                sorted(
                    file
                    for file in entry.iterdir()
                    if file.is_file() and file.suffix.lower() in AUDIO_EXTENSIONS and not is_appledouble(file)
                )
            )
        elif entry.is_file():
            files.append(entry)
        else:
            raise FileNotFoundError(f"Background {entry} is neither an audio file nor a folder.")
    return files


def synthesize_moments(
    clips: Dataset,
    backgrounds: Sequence[str | os.PathLike],
    output_dir: str | os.PathLike,
    num_recordings: int,
    *,
    duration_range: tuple[float, float] = (30.0, 300.0),
    events_range: tuple[int, int] = (1, 5),
    snr_db: tuple[float, float] = (0.0, 20.0),
    sampling_rate: int = DEFAULT_SAMPLING_RATE,
    seed: int = 0,
    split: str = "train",
    missing: str = "skip",
) -> SynthesisReport:
    """Write ``num_recordings`` long recordings with captioned events and their moment annotations.

    Args:
        clips: captioned clips in the shared schema (``audio``, ``audio_id``, ``captions``, optional
            ``source_id``): the events. Run the overlap filter on them first when the result trains a model
            tested on another corpus.
        backgrounds: audio files or folders of them (module docstring, step 2).
        output_dir: where ``audio/`` and ``moments_<split>_release.jsonl`` are written (created if needed).
        duration_range: ``(shortest, longest)`` recording in seconds.
        events_range: ``(fewest, most)`` events per recording.
        snr_db: ``(lowest, highest)`` SNR of an event over the background, in dB (Eq. 1).
        sampling_rate: the rate of the written recordings; sources are resampled to it.
        seed: the recordings and annotations are a function of the inputs, the seed and the split.
        split: the split named in the file name (``train``, ``val``, ``test``).
        missing: ``"skip"`` leaves out clips and backgrounds that cannot be decoded (listed in the report);
            ``"error"`` raises on the first.

    Raises:
        ValueError: a range that is empty or out of bounds, fewer clips than ``events_range`` asks for, no
            background, or no clip short enough for a recording.
    """
    _check_arguments(clips, num_recordings, duration_range, events_range, snr_db, sampling_rate)
    problems = CorpusProblems(missing, "moment synthesis", split)
    background_files = _readable(audio_files(backgrounds), problems)
    if not background_files:
        raise ValueError(f"No readable background audio in {[str(path) for path in backgrounds]}.")
    output_dir = expand_path(output_dir)
    audio_dir = output_dir / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    report = SynthesisReport(output_dir / f"moments_{split}_release.jsonl", audio_dir)
    source = _ClipSource(clips, sampling_rate, problems)
    lines = []
    for index in range(num_recordings):
        rng = np.random.default_rng([seed, zlib.crc32(split.encode()), index])
        samples = int(round(rng.uniform(*duration_range) * sampling_rate))
        background = _background(background_files, samples, sampling_rate, rng)
        vid = f"{split}_{index:06d}"
        events = _place_events(source, samples, rng, rng.integers(events_range[0], events_range[1] + 1))
        mix = background * (10.0 ** (BACKGROUND_RMS_DBFS / 20.0) / _rms(background))
        background_power = float(np.mean(np.square(mix, dtype=np.float64)))
        for event in events:
            event.snr_db = float(rng.uniform(*snr_db))
            mix[event.start : event.start + len(event.waveform)] += (
                event_gain(event.waveform, background_power, event.snr_db) * event.waveform
            )
        peak = float(np.max(np.abs(mix)))
        if peak > PEAK_LIMIT:
            mix *= PEAK_LIMIT / peak
        soundfile.write(audio_dir / f"{vid}.flac", mix, sampling_rate, subtype="PCM_16")
        for number, event in enumerate(events, start=1):
            lines.append(
                {
                    "qid": f"{vid}_{number}",
                    "query": event.caption,
                    "duration": samples / sampling_rate,
                    "vid": vid,
                    "relevant_windows": [
                        [event.start / sampling_rate, (event.start + len(event.waveform)) / sampling_rate]
                    ],
                    "snr_db": event.snr_db,
                    "source_audio_id": event.audio_id,
                    SOURCE_ID_COLUMN: event.source_id,
                }
            )
        report.recordings += 1
    report.annotations.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    report.queries = len(lines)
    report.skipped = list(problems.messages)
    problems.log_summary()
    logger.info(report.summary())
    return report


def _check_arguments(
    clips: Dataset,
    num_recordings: int,
    duration_range: tuple[float, float],
    events_range: tuple[int, int],
    snr_db: tuple[float, float],
    sampling_rate: int,
) -> None:
    if num_recordings < 1:
        raise ValueError(f"num_recordings={num_recordings!r}: ask for at least one recording.")
    if not 0 < duration_range[0] <= duration_range[1]:
        raise ValueError(f"duration_range={duration_range!r}: expected 0 < shortest <= longest (seconds).")
    if not 1 <= events_range[0] <= events_range[1]:
        raise ValueError(f"events_range={events_range!r}: expected 1 <= fewest <= most events.")
    if not snr_db[0] <= snr_db[1]:
        raise ValueError(f"snr_db={snr_db!r}: expected lowest <= highest (dB).")
    if not isinstance(sampling_rate, int) or sampling_rate <= 0:
        raise ValueError(f"sampling_rate={sampling_rate!r} is not a positive number of Hz.")
    absent = [column for column in ("audio", "audio_id", "captions") if column not in clips.column_names]
    if absent:
        raise ValueError(f"The source clips have no column(s) {absent}; expected the shared schema.")
    if len(clips) < events_range[1]:
        raise ValueError(
            f"{len(clips)} source clip(s) cannot give {events_range[1]} distinct events in one recording; lower "
            "the most events per recording or give more clips."
        )


def _rms(waveform: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(waveform, dtype=np.float64)))) or 1.0


def _readable(files: Sequence[Path], problems: CorpusProblems) -> list[Path]:
    """The files whose header reads as audio (:func:`~hf_atr.data.audio.check_audio_file`); the others flagged."""
    readable = []
    for file in files:
        try:
            check_audio_file(file)
        except AudioDecodeError as error:
            problems.flag(error)
            continue
        readable.append(file)
    return readable


def _background(
    files: Sequence[Path], samples: int, sampling_rate: int, rng: np.random.Generator
) -> np.ndarray:
    """``samples`` of background: recordings drawn at random, joined with a crossfade until long enough, and a
    random stretch of the join."""
    fade = int(CROSSFADE_S * sampling_rate)
    joined = np.zeros(0, dtype=np.float32)
    while len(joined) < samples:
        piece = decode_audio(files[int(rng.integers(len(files)))], sampling_rate)
        if len(joined) >= fade and len(piece) > fade:
            ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
            joined[-fade:] = joined[-fade:] * (1.0 - ramp) + piece[:fade] * ramp
            piece = piece[fade:]
        joined = np.concatenate([joined, piece])
    offset = int(rng.integers(len(joined) - samples + 1))
    return joined[offset : offset + samples].astype(np.float64)


@dataclass
class _Event:
    audio_id: str
    source_id: str | None
    caption: str
    waveform: np.ndarray
    start: int = 0
    snr_db: float = 0.0


class _ClipSource:
    """The source clips, decoded at the output rate on first use (a clip may be drawn for many recordings)."""

    def __init__(self, clips: Dataset, sampling_rate: int, problems: CorpusProblems) -> None:
        self.clips = clips
        self.sampling_rate = sampling_rate
        self.problems = problems
        self.decoded: dict[int, np.ndarray | None] = {}
        self.source_ids = clips[SOURCE_ID_COLUMN] if SOURCE_ID_COLUMN in clips.column_names else None

    def waveform(self, index: int) -> np.ndarray | None:
        if index not in self.decoded:
            row = self.clips[index]
            try:
                waveform = decode_audio(row["audio"], self.sampling_rate, source=row["audio_id"])
                self.decoded[index] = waveform if np.any(waveform) else None
                if self.decoded[index] is None:
                    raise AudioDecodeError(
                        row["audio_id"], "the clip is silent: it cannot be placed at an SNR."
                    )
            except AudioDecodeError as error:
                self.decoded[index] = None
                self.problems.flag(error)
        return self.decoded[index]

    def event(self, index: int, rng: np.random.Generator) -> _Event | None:
        waveform = self.waveform(index)
        if waveform is None:
            return None
        row = self.clips[index]
        captions = [caption for caption in row["captions"] if isinstance(caption, str) and caption.strip()]
        if not captions:
            self.problems.flag(ValueError(f"Clip {row['audio_id']!r} has no caption."))
            self.decoded[index] = None
            return None
        source_id = self.source_ids[index] if self.source_ids is not None else None
        return _Event(
            row["audio_id"], source_id, captions[int(rng.integers(len(captions)))].strip(), waveform
        )


def _place_events(source: _ClipSource, samples: int, rng: np.random.Generator, count: int) -> list[_Event]:
    """``count`` events from distinct clips that fit together in ``samples``, at random non-overlapping starts:
    the ``samples - total`` free samples are split into ``count + 1`` gaps at sorted uniform cut points."""
    events: list[_Event] = []
    free = samples
    for index in rng.permutation(len(source.clips)):
        if len(events) == count:
            break
        waveform = source.waveform(int(index))
        if waveform is None or len(waveform) > free:
            continue
        event = source.event(int(index), rng)
        if event is not None:
            events.append(event)
            free -= len(event.waveform)
    if not events:
        raise ValueError(
            f"No readable source clip fits in a recording of {samples / source.sampling_rate:g} s; raise the "
            "shortest duration or give shorter clips."
        )
    cuts = np.sort(rng.integers(0, free + 1, size=len(events)))
    position = 0
    for event, gap in zip(events, np.diff(cuts, prepend=0)):
        position += int(gap)
        event.start = position
        position += len(event.waveform)
    return events


__all__ = ["SynthesisReport", "audio_files", "event_gain", "synthesize_moments"]
