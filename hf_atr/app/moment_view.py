"""What the search page shows for a moment query, without gradio: the moments ``hf-atr search --moments`` finds
(``pipe.moments(text, top_k=K)``: one ranked list of ``(file, start, end, score)`` across the indexed files), and
for each a waveform strip of its whole file with the moment's span marked.

The strip is an inline SVG (no image file, no JavaScript): the file's peak envelope in :data:`STRIP_BINS` bars,
read block by block so that an hour-long file is never held in memory, and the moment as a shaded rectangle at its
place. The player beside it holds the moment itself (:class:`~hf_atr.app.results.ExcerptWriter`), so it starts
where the moment starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from hf_atr.app.results import EMPTY_TEXT_QUERY, Answer, QueryError, SearchResult

STRIP_BINS = 300
"""Bars of a waveform strip: one per 2 px of its :data:`STRIP_WIDTH`."""
STRIP_WIDTH = 600
STRIP_HEIGHT = 40
MIN_SPAN_PIXELS = 2.0
"""The narrowest a moment is drawn, so that a 0.5-s moment of an hour stays visible."""
BLOCK_FRAMES = 1 << 20
"""Frames read at a time for the envelope."""


def search_moments(pipe: Any, text: str | None, top_k: int) -> Answer:
    """The ``top_k`` moments across the indexed files that best match a text query, as ``hf-atr search --model M
    --index I --moments "text"`` finds them.

    Raises:
        QueryError: an empty query, or one the pipeline refuses (a query naming an audio file, an index without
            windows, ...).
    """
    if text is None or not text.strip():
        raise QueryError(EMPTY_TEXT_QUERY)
    try:
        hits = pipe.moments(text, top_k=top_k)
    except (FileNotFoundError, ValueError) as error:
        raise QueryError(str(error)) from error
    return Answer(f"“{text}”", hits, unit="moment")


def waveform_envelope(path: str | os.PathLike, bins: int = STRIP_BINS) -> tuple[np.ndarray, float]:
    """``(peaks, duration)``: the largest absolute sample of each of ``bins`` equal stretches of the file (channels
    together), float32 in [0, 1] for normal audio, and the file's length in seconds.

    Raises:
        soundfile.LibsndfileError / OSError: a file soundfile cannot read.
    """
    info = soundfile.info(str(path))
    frames = max(int(info.frames), 1)
    peaks = np.zeros(bins, dtype=np.float32)
    offset = 0
    for block in soundfile.blocks(str(path), blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):
        loudest = np.abs(block).max(axis=1)
        index = (np.arange(offset, offset + len(loudest), dtype=np.int64) * bins) // frames
        firsts = np.flatnonzero(np.concatenate([[True], np.diff(index) > 0]))
        np.maximum.at(peaks, np.minimum(index[firsts], bins - 1), np.maximum.reduceat(loudest, firsts))
        offset += len(loudest)
    return peaks, frames / info.samplerate


class WaveformStrips:
    """Waveform strips of results' files, each file's envelope read once per file version."""

    def __init__(self) -> None:
        self._envelopes: dict[tuple[str, int, int], tuple[np.ndarray, float]] = {}

    def strip(self, result: SearchResult) -> str:
        """The SVG strip of ``result``'s file with its span marked; ``""`` for a result without a file or span, or
        whose file cannot be read (its player says why)."""
        if result.path is None or result.start is None:
            return ""
        try:
            stat = os.stat(result.path)
            key = (str(Path(result.path).resolve()), stat.st_size, stat.st_mtime_ns)
            if key not in self._envelopes:
                self._envelopes[key] = waveform_envelope(result.path)
        except (OSError, RuntimeError):  # soundfile.LibsndfileError is a RuntimeError
            return ""
        peaks, duration = self._envelopes[key]
        return strip_svg(peaks, duration, result.start, result.end)


def strip_svg(peaks: np.ndarray, duration: float, start: float, end: float) -> str:
    """An inline SVG, :data:`STRIP_WIDTH` × :data:`STRIP_HEIGHT` px: a bar per peak (centred, scaled to the loudest)
    and the span ``[start, end)`` seconds of ``duration`` as a shaded rectangle (class ``moment-span``, its
    ``data-start`` / ``data-end`` in seconds)."""
    middle = STRIP_HEIGHT / 2
    loudest = float(peaks.max()) or 1.0
    step = STRIP_WIDTH / len(peaks)
    bars = " ".join(
        f"M{(index + 0.5) * step:.1f} {middle - half:.1f}V{middle + half:.1f}"
        for index, half in enumerate(np.maximum(peaks / loudest * (middle - 2), 0.5))
    )
    scale = STRIP_WIDTH / duration if duration > 0 else 0.0
    left = min(max(start * scale, 0.0), STRIP_WIDTH - MIN_SPAN_PIXELS)
    width = max((end - start) * scale, MIN_SPAN_PIXELS)
    label = f"{start:.2f}–{end:.2f} s of {duration:.2f} s"
    return (
        f'<svg class="waveform-strip" xmlns="http://www.w3.org/2000/svg" width="{STRIP_WIDTH}" '
        f'height="{STRIP_HEIGHT}" viewBox="0 0 {STRIP_WIDTH} {STRIP_HEIGHT}" role="img" aria-label="{label}">'
        f'<rect width="{STRIP_WIDTH}" height="{STRIP_HEIGHT}" fill="#f3f4f6"/>'
        f'<path d="{bars}" stroke="#6b7280" stroke-width="{max(step - 0.5, 0.5):.1f}"/>'
        f'<rect class="moment-span" data-start="{start:.3f}" data-end="{end:.3f}" x="{left:.2f}" y="0" '
        f'width="{width:.2f}" height="{STRIP_HEIGHT}" fill="#f97316" fill-opacity="0.45" stroke="#ea580c">'
        f"<title>{label}</title></rect></svg>"
    )


__all__ = [
    "STRIP_BINS",
    "STRIP_HEIGHT",
    "STRIP_WIDTH",
    "WaveformStrips",
    "search_moments",
    "strip_svg",
    "waveform_envelope",
]
