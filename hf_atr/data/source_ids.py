"""Source ids: where a corpus clip's recording comes from, as ``"<platform>:<id>"``.

Corpora built from the same platforms share recordings: WavCaps' FreeSound part contains Clotho's clips,
its AudioSet_SL part (and LAION-Audio-630K) AudioCaps' YouTube segments. Each corpus names the source in
its own way, and the loaders turn that into one ``source_id`` column (:data:`hf_atr.data.schema.SOURCE_ID_COLUMN`):

==================  ==============================================  =========================
corpus              where the id is                                 ``source_id``
==================  ==============================================  =========================
Clotho              ``sound_id`` of ``clotho_metadata_<split>.csv``  ``freesound:<sound_id>``
ESC-50              ``src_file`` of ``meta/esc50.csv``               ``freesound:<src_file>``
WavCaps FreeSound   ``id`` of ``fsd_final.json``                     ``freesound:<id>``
AudioCaps           ``youtube_id`` (or ``Y<id>.wav`` file names)      ``youtube:<id>``
WavCaps AudioSet_SL ``id`` of ``as_final.json`` (``Y<id>.wav``)       ``youtube:<id>``
WavCaps BBC, SB     ``id``                                           ``bbc:<id>``, ``soundbible:<id>``
==================  ==============================================  =========================
"""

from __future__ import annotations

import re
from pathlib import PurePath

FREESOUND = "freesound"
YOUTUBE = "youtube"

_YOUTUBE_ID = re.compile(r"[A-Za-z0-9_-]{11}")
_AUDIOSET_FILE_STEM = re.compile(r"Y?([A-Za-z0-9_-]{11})(?:_-?\d+(?:\.\d+)?)*")


def source_id(platform: str, identifier: object) -> str | None:
    """``"<platform>:<identifier>"``; ``None`` when the identifier is missing or blank."""
    if identifier is None:
        return None
    text = str(identifier).strip()
    return f"{platform}:{text}" if text else None


def freesound_source_id(sound_id: object) -> str | None:
    """``freesound:<id>`` for a Freesound sound id (``"180913"``, ``180913``); ``None`` unless all digits."""
    text = "" if sound_id is None else str(sound_id).strip()
    return source_id(FREESOUND, text) if text.isdigit() else None


def youtube_id_from_file_name(name: str) -> str | None:
    """The YouTube video id of an AudioSet/AudioCaps clip named after it, else ``None``.

    Accepts the common names ``<id>.wav``, ``Y<id>.wav`` (AudioSet downloads, WavCaps' AudioSet_SL ids),
    ``<id>_<start>.wav`` and ``Y<id>_<start>_<end>.flac``; the id is the 11 characters of YouTube's alphabet.
    """
    stem = PurePath(str(name)).name
    if "." in stem:
        stem = stem.rsplit(".", 1)[0]
    if _YOUTUBE_ID.fullmatch(stem):
        return stem
    match = _AUDIOSET_FILE_STEM.fullmatch(stem)
    return match.group(1) if match else None


def youtube_source_id(name_or_id: str) -> str | None:
    """``youtube:<id>`` for a YouTube id or a file named after one (:func:`youtube_id_from_file_name`)."""
    youtube_id = youtube_id_from_file_name(name_or_id)
    return source_id(YOUTUBE, youtube_id) if youtube_id else None
