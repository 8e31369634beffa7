"""What the search page shows for a query, without gradio: the retrieval pipeline's hits (the very call
``hf-atr search`` makes, ``pipe(text)`` or ``pipe(audio=file)``) as ranked results, the messages for queries it
cannot answer, and the stretch of each hit's file to play.

A hit of a windowed index is a file at its best-matching window (``start`` / ``end`` in seconds): its excerpt
holds exactly that span, so the player starts where the match starts. A hit without a span (an index of
pooled files, or one saved before spans existed) plays from the start of its file. Excerpts are WAV files
(16-bit PCM, the file's own rate and channels), which every browser plays whatever the source format, cut to
at most :data:`MAX_EXCERPT_SECONDS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from hf_atr.data.audio import read_audio_span
from hf_atr.data.audio_arrays import AudioDecodeError

MAX_EXCERPT_SECONDS = 30.0
"""The longest stretch a result's player holds (a pooled hour-long file plays its first 30 s)."""
EMPTY_TEXT_QUERY = (
    "The text query is empty: describe the sound you are looking for (e.g. “a dog barks”), or drop an "
    "audio file to find the sounds most like it."
)
NO_AUDIO_QUERY = "No audio was given: drop, upload or record an audio file to find the sounds most like it."


class QueryError(ValueError):
    """A query the page cannot answer; the message says why and is shown on the page."""


@dataclass(frozen=True)
class SearchResult:
    """One ranked hit: ``rank`` (1-based), the indexed ``id``, the model's ``score`` (cosine, or the negative
    Euclidean/Mahalanobis distance), the file's ``path`` when the index knows its folder, and the best-matching
    span in seconds when the index holds windows."""

    rank: int
    id: str
    score: float
    path: str | None = None
    start: float | None = None
    end: float | None = None

    @classmethod
    def from_hit(cls, rank: int, hit: dict[str, Any]) -> SearchResult:
        """From one of the pipeline's hits ``{"id", "score", "start"?, "end"?, "path"?}``."""
        return cls(rank, hit["id"], hit["score"], hit.get("path"), hit.get("start"), hit.get("end"))

    @property
    def span(self) -> str:
        """``"38.00–40.00 s"``, or ``""`` without a span."""
        return "" if self.start is None else f"{self.start:.2f}–{self.end:.2f} s"


@dataclass(frozen=True)
class Answer:
    """What one query gave: how the query is named on the page, and the pipeline's ``hits`` (ranked as
    :attr:`results`, printed as ``hf-atr search --json`` prints them by :meth:`hits_json`); ``unit`` names what a
    hit is: a ``"file"`` at its best span, or a ``"moment"`` (``hf-atr search --moments``)."""

    query: str
    hits: list[dict[str, Any]]
    unit: str = "file"

    @property
    def results(self) -> list[SearchResult]:
        """The hits as ranked results, best first."""
        return [SearchResult.from_hit(rank, hit) for rank, hit in enumerate(self.hits, start=1)]

    def hits_json(self) -> str:
        """The hits as ``hf-atr search --json`` prints them."""
        return json.dumps(self.hits, ensure_ascii=False, indent=2)


def search_text(pipe: Any, text: str | None, top_k: int) -> Answer:
    """The ``top_k`` files that best match a text query, as ``hf-atr search --model M --index I "text"`` finds
    them.

    Raises:
        QueryError: an empty query, or one the pipeline refuses (a query naming a missing audio file, ...).
    """
    if text is None or not text.strip():
        raise QueryError(EMPTY_TEXT_QUERY)
    try:
        hits = pipe(text, top_k=top_k)
    except (FileNotFoundError, ValueError) as error:
        raise QueryError(str(error)) from error
    return Answer(f"“{text}”", hits)


def search_example(pipe: Any, audio_path: str | os.PathLike | None, top_k: int) -> Answer:
    """The ``top_k`` files that sound most like the audio file ``audio_path`` (query by example), as
    ``hf-atr search --model M --index I --audio FILE`` finds them.

    Raises:
        QueryError: no file, or one that cannot be decoded (named by its file name, not by the folder the
            page's server keeps uploads in).
    """
    if audio_path is None:
        raise QueryError(NO_AUDIO_QUERY)
    name = Path(audio_path).name
    try:
        hits = pipe(audio=str(audio_path), top_k=top_k)
    except AudioDecodeError as error:
        raise QueryError(
            f"{name} cannot be used as a query: {error.reason} Give an audio file (WAV, FLAC, OGG, MP3, ...)."
        ) from error
    except (FileNotFoundError, ValueError) as error:
        raise QueryError(str(error)) from error
    return Answer(f"sounds like {name}", hits)


class ExcerptWriter:
    """Writes the stretch of a result's file to play into ``directory``, once per file version and span.

    Args:
        directory: where the WAV excerpts go (the page's server must be allowed to serve it; gradio serves files
            under the system's temporary folder).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def excerpt(self, result: SearchResult) -> Path:
        """The WAV file of ``result``'s span (its file from the start without a span), at most
        :data:`MAX_EXCERPT_SECONDS` long.

        Raises:
            QueryError: the index records no folder for its ids (built from a dataset), or the file cannot be
                read any more (moved, deleted, changed).
        """
        if result.path is None:
            raise QueryError(
                f"{result.id} cannot be played: the index records no folder for its ids (it was not built from "
                "files with `hf-atr index --audio-dir`)."
            )
        start = result.start or 0.0
        end = (
            start + MAX_EXCERPT_SECONDS
            if result.end is None
            else min(result.end, start + MAX_EXCERPT_SECONDS)
        )
        target = self.directory / self._file_name(result.path, start, end)
        if not target.is_file():
            try:
                frames, rate = read_audio_span(result.path, start, end)
            except AudioDecodeError as error:
                raise QueryError(f"{result.id} cannot be played: {error.reason}") from error
            self.directory.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            soundfile.write(partial, np.clip(frames, -1.0, 1.0), rate, format="WAV", subtype="PCM_16")
            os.replace(partial, target)
        return target

    @staticmethod
    def _file_name(path: str, start: float, end: float) -> str:
        """``<stem>_<start>-<end>s_<digest>.wav``: readable when downloaded, and new when the file changed."""
        try:
            stat = os.stat(path)
            version = f"{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:
            version = ""
        digest = hashlib.sha256(f"{Path(path).resolve()}\0{start!r}\0{end!r}\0{version}".encode()).hexdigest()
        stem = re.sub(r"[^\w.-]+", "_", Path(path).stem)[:60]
        return f"{stem}_{start:.2f}-{end:.2f}s_{digest[:12]}.wav"


__all__ = [
    "EMPTY_TEXT_QUERY",
    "MAX_EXCERPT_SECONDS",
    "NO_AUDIO_QUERY",
    "Answer",
    "ExcerptWriter",
    "QueryError",
    "SearchResult",
    "search_example",
    "search_text",
]
