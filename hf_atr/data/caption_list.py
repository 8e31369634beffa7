"""A list of captions to search audio against (``hf-atr index --captions FILE``): ids and texts from a file.

Layouts, chosen by the file's extension:

- ``.txt``: one caption per line; id ``<file name>:<line>``; blank lines are skipped.
- ``.csv``: a ``caption`` column (AudioCaps), or ``caption_1`` ... ``caption_N`` (Clotho, WavCaps-style);
  the id is the ``id`` column, else ``file_name`` (with ``#<slot>`` for numbered columns, as the retrieval
  pipeline names a dataset's captions), else ``<file name>:<line>``. Empty numbered cells are skipped;
  an empty ``caption`` is an error.
- ``.jsonl``: one object per line with a ``caption`` string and an optional ``id``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .corpus_utils import (
    CorpusFormatError,
    caption_columns,
    decode_metadata,
    expand_path,
    location,
    read_csv_records,
)

CAPTION_LIST_SUFFIXES = (".txt", ".csv", ".jsonl")


@dataclass
class CaptionList:
    """``captions[i]`` has id ``ids[i]``."""

    ids: list[str]
    captions: list[str]


def read_caption_list(path: str | os.PathLike, encoding: str = "utf-8") -> CaptionList:
    """Read a caption list (see the module docstring for the layouts).

    Raises:
        FileNotFoundError: no such file.
        CorpusFormatError: an unknown extension, a CSV without caption columns, an empty caption, a JSON line
            that is not an object with a ``caption`` string, or no caption at all; the message names the file
            and line.
        MetadataEncodingError: the file is not ``encoding``; names the line and an encoding to try.
    """
    path = expand_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Caption list not found: {path}")
    suffix = path.suffix.lower()
    if suffix not in CAPTION_LIST_SUFFIXES:
        raise CorpusFormatError(
            f"{path}: a caption list is one of {list(CAPTION_LIST_SUFFIXES)} (one caption per line, a CSV with "
            "caption columns, or JSON lines), not {suffix or 'a file without extension'}."
        )
    if suffix == ".csv":
        listed = _csv_captions(path, encoding)
    else:
        text = decode_metadata(path, path.read_bytes(), encoding)
        listed = _jsonl_captions(path, text) if suffix == ".jsonl" else _text_captions(path, text)
    if not listed.captions:
        raise CorpusFormatError(f"{path} holds no caption.")
    return listed


def _text_captions(path: Path, text: str) -> CaptionList:
    listed = CaptionList([], [])
    for line, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            listed.ids.append(f"{path.name}:{line}")
            listed.captions.append(raw.strip())
    return listed


def _jsonl_captions(path: Path, text: str) -> CaptionList:
    listed = CaptionList([], [])
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as error:
            raise CorpusFormatError(f"{location(path, line)}: not JSON ({error.msg}).") from error
        caption = row.get("caption") if isinstance(row, dict) else None
        if not isinstance(caption, str) or not caption.strip():
            raise CorpusFormatError(
                f'{location(path, line)}: expected an object with a non-empty "caption" string.'
            )
        listed.ids.append(str(row["id"]) if row.get("id") is not None else f"{path.name}:{line}")
        listed.captions.append(caption.strip())
    return listed


def _csv_captions(path: Path, encoding: str) -> CaptionList:
    header, records = read_csv_records(path, [], encoding)
    columns = caption_columns(header)
    if not columns:
        raise CorpusFormatError(
            f"{location(path, 1)}: header {header} has no 'caption' column nor 'caption_1' ... 'caption_N'."
        )
    numbered = columns != ["caption"]
    listed = CaptionList([], [])
    for record in records:
        base = (record.values.get("id") or record.values.get("file_name") or "").strip()
        for slot, column in enumerate(columns):
            caption = (record.values.get(column) or "").strip()
            if not caption:
                if numbered:
                    continue
                raise CorpusFormatError(f"{location(path, record.line)}: the caption is empty.")
            if base:
                listed.ids.append(f"{base}#{slot}" if numbered else base)
            else:
                listed.ids.append(f"{path.name}:{record.line}" + (f"#{slot}" if numbered else ""))
            listed.captions.append(caption)
    return listed


__all__ = ["CAPTION_LIST_SUFFIXES", "CaptionList", "read_caption_list"]
