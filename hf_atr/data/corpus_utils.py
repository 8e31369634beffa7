"""Helpers shared by the corpus loaders: CSV records with line numbers, audio file resolution and checks,
the ``missing="error"|"skip"`` policy that either raises on the first bad clip or row or drops and
reports them, and the audio bytes embedded for output that must not depend on local paths.

Every problem message names the file it was found in and, for CSV input, the line of the record
(1-based, the header is line 1; a record whose quoted caption spans several lines is named by its
first line).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, Features, List, Value
from datasets.table import embed_table_storage

from hf_atr.data.audio import check_audio_file
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.schema import finalize_audio_column, set_corpus_provenance
from hf_atr.lazy import get_logger

logger = get_logger(__name__)  # transformers logging, imported on the first message

MISSING_POLICIES: tuple[str, ...] = ("error", "skip")
"""Values of the loaders' ``missing`` argument: raise on the first bad clip or row, or drop and report it."""

CAPTION_IDS_COLUMN = "caption_ids"
"""Optional column beside ``captions``: one corpus-assigned id per caption (AudioCaps' ``audiocap_id``).
:func:`hf_atr.data.multilingual.load_translations` aligns per-caption translation files through it."""

CAPTION_IDS_FEATURE = List(Value("string"))

_LISTED_PROBLEMS_IN_WARNING = 20


class CorpusFormatError(ValueError):
    """A corpus metadata file (CSV or JSON) is malformed; the message names the file and the record."""


class MetadataEncodingError(CorpusFormatError):
    """A metadata file is not in the expected text encoding; the message names the file, the line and an
    encoding to try."""


def expand_path(path: str | os.PathLike) -> Path:
    """``Path(path)`` with a leading ``~`` / ``~user`` expanded (every path argument of the loaders)."""
    return Path(path).expanduser()


@dataclass(frozen=True)
class CsvRecord:
    """One data record of a CSV file: ``line`` is its first physical line (header = line 1)."""

    line: int
    values: dict[str, str]


def check_missing_policy(missing: str) -> None:
    """Raise ``ValueError`` unless ``missing`` is one of :data:`MISSING_POLICIES`."""
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing={missing!r} is not supported; use one of {list(MISSING_POLICIES)}.")


def location(path: str | os.PathLike, line: int | None = None) -> str:
    """``"<path>, line <n>"``: how every message names the place of a problem."""
    return f"{path}, line {line}" if line is not None else str(path)


class CorpusProblems:
    """Applies the ``missing`` policy to the problems one loader finds in one split.

    ``missing="error"``: :meth:`flag` raises the exception it is given (so the first problem stops the
    load with a message naming the file and row). ``missing="skip"``: the problem is recorded and the
    caller drops the clip or row; :meth:`log_summary` then logs how many were dropped and which.
    """

    def __init__(self, missing: str, corpus: str, split: str) -> None:
        check_missing_policy(missing)
        self.missing = missing
        self.corpus = corpus
        self.split = split
        self.messages: list[str] = []

    def flag(self, problem: Exception) -> None:
        """Raise ``problem`` (policy ``"error"``) or record its message (policy ``"skip"``)."""
        if self.missing == "error":
            raise problem
        self.messages.append(str(problem))

    def log_summary(self) -> None:
        """Log the number of skipped clips/rows with the first few messages (all of them at INFO level)."""
        if not self.messages:
            return
        shown = "\n  ".join(self.messages[:_LISTED_PROBLEMS_IN_WARNING])
        more = len(self.messages) - _LISTED_PROBLEMS_IN_WARNING
        suffix = f"\n  ... and {more} more (set the log level to INFO to list all)" if more > 0 else ""
        logger.warning(
            f"{self.corpus} split '{self.split}': skipped {len(self.messages)} clip(s)/row(s) "
            f"(missing='skip'):\n  {shown}{suffix}"
        )
        if more > 0:
            logger.info("All skipped items:\n  " + "\n  ".join(self.messages))


def read_csv_records(
    path: str | os.PathLike, required_columns: Sequence[str], encoding: str = "utf-8"
) -> tuple[list[str], list[CsvRecord]]:
    """Read a CSV file with a header into records keyed by column name.

    Quoted fields may contain commas, quotes (doubled) and newlines; a UTF-8 byte-order mark is ignored;
    blank lines are skipped. Column names are stripped of surrounding white space, values are kept as
    they are.

    Args:
        path: the CSV file (``~`` is expanded).
        required_columns: columns the header must have.
        encoding: the file's text encoding (a Python codec name, e.g. ``"cp1252"``, ``"shift_jis"``).

    Returns:
        ``(header, records)``; records whose field count differs from the header's are returned too,
        with the surplus fields under the key ``None`` or the absent ones missing — check them with
        :func:`record_problem`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        MetadataEncodingError: the file is not valid ``encoding``; names the line and an encoding to try.
        CorpusFormatError: the file is empty or its header lacks one of ``required_columns``.
    """
    path = expand_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Corpus metadata file not found: {path}")
    text = decode_metadata(path, path.read_bytes(), encoding)
    reader = csv.reader(io.StringIO(text, newline=""))
    header_row = next(reader, None)
    if header_row is None:
        raise CorpusFormatError(f"{path} is empty; expected a header with columns {list(required_columns)}.")
    header = [name.strip() for name in header_row]
    absent = [name for name in required_columns if name not in header]
    if absent:
        raise CorpusFormatError(
            f"{location(path, 1)}: header {header} lacks column(s) {absent}; "
            f"expected at least {list(required_columns)}."
        )
    records = []
    previous_line = reader.line_num
    for fields in reader:
        first_line = previous_line + 1
        previous_line = reader.line_num
        if not any(field.strip() for field in fields):
            continue
        values: dict = dict(zip(header, fields))
        if len(fields) > len(header):
            values[None] = fields[len(header) :]
        records.append(CsvRecord(line=first_line, values=values))
    return header, records


def decode_metadata(path: Path, data: bytes, encoding: str) -> str:
    """``data`` (the content of the metadata file ``path``) decoded with ``encoding``.

    UTF-8 (the default) also drops a byte-order mark. A decoding error becomes a
    :class:`MetadataEncodingError` naming the file, the line of the first bad byte and the encodings to
    try, each with the line as it reads in it (:func:`_encoding_hint`).
    """
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        return data.decode(codec)
    except LookupError as error:
        raise ValueError(f"encoding={encoding!r} is not a text encoding Python knows ({error}).") from error
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise MetadataEncodingError(
            f"{location(path, line)}: not valid {encoding} (byte 0x{data[error.start]:02x} at offset "
            f"{error.start}); {_encoding_hint(data, error.start)}, or re-save the file as UTF-8."
        ) from error


WESTERN_LEGACY_ENCODING = "cp1252"
"""Offered beside charset-normalizer's guesses whenever it decodes the file: the encoding Excel and Windows
write Western-European text in. On a short file charset-normalizer often ranks a sibling code page as high
or higher (``cp1250``, which reads ``è`` as ``č`` and ``ñ`` as ``ń``), and a wrong encoding that decodes
gives no error, only wrong captions."""

_ENCODING_GUESSES = 3
"""charset-normalizer's guesses offered: on a short CJK text its first is often wrong (Shift-JIS read as
cp949, GBK as cp949) and the right one second or third."""
_EXCERPT_CHARACTERS = 50


def _encoding_hint(data: bytes, bad_byte: int) -> str:
    """What to pass as ``encoding=``: charset-normalizer's best guesses and :data:`WESTERN_LEGACY_ENCODING`,
    each with the line of ``bad_byte`` as it reads in that encoding, so that the user picks the one that
    reads right instead of trusting a guess."""
    # Imported here: only the error path needs it, and it is a heavy import for every loader call.
    import charset_normalizer

    candidates = [match.encoding for match in charset_normalizer.from_bytes(data)][:_ENCODING_GUESSES]
    if WESTERN_LEGACY_ENCODING not in candidates and _decodes(data, WESTERN_LEGACY_ENCODING):
        candidates.append(WESTERN_LEGACY_ENCODING)
    if not candidates:
        return "pass its encoding="
    start = data.rfind(b"\n", 0, bad_byte) + 1
    end = data.find(b"\n", bad_byte)
    line = data[start : end if end >= 0 else len(data)]
    readings: dict[str, list[str]] = {}
    for candidate in candidates:
        readings.setdefault(_excerpt(line.decode(candidate, errors="replace")), []).append(candidate)
    options = [f"{' or '.join(map(repr, names))} it reads {text!r}" for text, names in readings.items()]
    return "pass the encoding= under which that line reads right: in " + "; in ".join(options)


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _excerpt(line: str) -> str:
    """``line`` without its line end, cut to :data:`_EXCERPT_CHARACTERS` around its first non-ASCII character."""
    line = line.rstrip("\r\n")
    if len(line) <= _EXCERPT_CHARACTERS:
        return line
    first = next((i for i, character in enumerate(line) if not character.isascii()), 0)
    start = max(0, min(first - _EXCERPT_CHARACTERS // 3, len(line) - _EXCERPT_CHARACTERS))
    end = start + _EXCERPT_CHARACTERS
    return ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")


def record_problem(
    path: str | os.PathLike, record: CsvRecord, header: Sequence[str], non_empty: Sequence[str] = ()
) -> str | None:
    """A message when ``record`` has more or fewer fields than ``header`` or one of the ``non_empty``
    columns is blank; ``None`` when the record is well formed."""
    values = record.values
    present = len([name for name in header if name in values]) + len(values.get(None, []))
    if present != len(header):
        return (
            f"{location(path, record.line)}: expected {len(header)} fields ({','.join(header)}), got {present}; "
            "quote fields that contain commas."
        )
    blank = [name for name in non_empty if not values[name].strip()]
    if blank:
        return f"{location(path, record.line)}: empty {', '.join(blank)}."
    return None


def caption_columns(header: Sequence[str]) -> list[str]:
    """The caption columns of a header in slot order: ``caption_1..caption_N`` (Clotho, WavCaps-style
    val/test), else ``["caption"]`` (one caption per row), else ``[]``."""
    numbered = sorted(
        (int(match.group(1)), name) for name in header if (match := re.fullmatch(r"caption_(\d+)", name))
    )
    if numbered:
        return [name for _, name in numbered]
    return ["caption"] if "caption" in header else []


def check_caption_slots(path: str | os.PathLike, columns: Sequence[str], expected: int | None) -> None:
    """Warn when numbered caption columns (``caption_1..caption_N``, from :func:`caption_columns`) skip a
    number or stop short of ``expected`` (5 for Clotho and AudioCaps evaluation): every clip of the file
    then has fewer captions than the corpus defines, and nothing else would say so."""
    numbers = [int(match.group(1)) for name in columns if (match := re.fullmatch(r"caption_(\d+)", name))]
    if not numbers:
        return
    absent = [k for k in range(1, max([*numbers, expected or 0]) + 1) if k not in numbers]
    if absent:
        names = ", ".join(f"caption_{k}" for k in absent)
        logger.warning(
            f"{path}: no column {names}; each clip gets {len(numbers)} caption(s)"
            + (f" where the corpus has {expected}." if expected else ".")
        )


def audio_root(
    data_dir: str | os.PathLike, audio_dir: str | os.PathLike | None, default_subdir: str | None
) -> Path:
    """The directory that holds a corpus's audio: ``audio_dir`` when given (must exist), else
    ``data_dir/default_subdir`` when that exists, else ``data_dir``."""
    if audio_dir is not None:
        root = expand_path(audio_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"audio_dir {root} is not a directory.")
        return root.resolve()
    data_dir = expand_path(data_dir)
    if default_subdir is not None and (data_dir / default_subdir).is_dir():
        return (data_dir / default_subdir).resolve()
    return data_dir.resolve()


def split_audio_dir(root: Path, candidate_subdirs: Iterable[str]) -> Path:
    """The first existing ``root/<candidate>`` directory (per-split audio folders), else ``root``."""
    for name in candidate_subdirs:
        if (root / name).is_dir():
            return root / name
    return root


def list_files(directory: Path) -> set[str]:
    """Names of the regular files directly in ``directory`` (one directory listing instead of one
    ``stat`` per clip; empty when the directory does not exist)."""
    if not directory.is_dir():
        return set()
    with os.scandir(directory) as entries:
        return {entry.name for entry in entries if entry.is_file()}


def check_clip_audio(audio_path: Path, row_location: str, problems: CorpusProblems) -> bool:
    """Check one clip's audio file with :func:`hf_atr.data.audio.check_audio_file` (exists, readable
    header, frames > 0, channels >= 1); a problem is flagged with the CSV row it came from.

    Returns:
        ``True`` if the clip is usable; ``False`` if it was flagged under ``missing="skip"``.
    """
    if not audio_path.is_file():
        problems.flag(FileNotFoundError(f"{row_location}: audio file not found: {audio_path}"))
        return False
    try:
        check_audio_file(audio_path)
    except AudioDecodeError as error:
        problems.flag(AudioDecodeError(row_location, str(error)))
        return False
    return True


def audio_value(audio_path: Path) -> dict[str, bytes | str | None]:
    """The undecoded ``audio`` cell of the shared schema: no bytes, the absolute path."""
    # abspath, not resolve(): no per-clip system calls, and symlinked audio keeps the user's path.
    return {"bytes": None, "path": os.path.abspath(audio_path)}


def build_split(rows: list[dict], features: Features, provenance: Mapping[str, Any] | None = None) -> Dataset:
    """A ``Dataset`` of the shared schema from row dicts (possibly none), audio cast to ``Audio(decode=False)``,
    with ``provenance`` (:func:`split_provenance`) recorded in its ``info``."""
    columns = {name: [row[name] for row in rows] for name in features}
    dataset = finalize_audio_column(Dataset.from_dict(columns, features=features))
    if provenance is not None:
        set_corpus_provenance(dataset, {**provenance, "clips_found": len(dataset)})
    return dataset


def split_provenance(
    corpus: str,
    layout: str,
    split: str,
    metadata: Iterable[str | os.PathLike],
    official: tuple[str, int] | None,
    problems: CorpusProblems | None = None,
    corpus_split: str | None = None,
    **details: Any,
) -> dict[str, Any]:
    """The provenance record of one loaded split (:func:`hf_atr.data.schema.set_corpus_provenance`).

    Args:
        corpus: the corpus's name (``"Clotho"``).
        layout: the metadata layout read (``"official CSV"``, ``"WavCaps-style CSV"``, ...).
        split: the hf-atr split name; ``corpus_split`` the corpus's own when it differs.
        metadata: the metadata files read (only their names are kept: no local paths in a card).
        official: ``(release, clips)``: the split's size in that official release; ``None`` if unknown.
        problems: the split's :class:`CorpusProblems`, for the number of clips/rows skipped (``None``
            when not counted per split).
        details: further JSON-serialisable fields (e.g. ``source_ids``).
    """
    return {
        "corpus": corpus,
        "layout": layout,
        "split": split,
        "corpus_split": corpus_split or split,
        "metadata": [Path(name).name for name in metadata],
        "official_release": official[0] if official else None,
        "official_clips": official[1] if official else None,
        "skipped": len(problems.messages) if problems is not None else None,
        **details,
        "filters": [],
    }


def assemble_splits(
    splits: Mapping[str, Dataset], corpus: str, missing: str, sources: Mapping[str, str]
) -> DatasetDict:
    """The ``DatasetDict`` of the loaded splits, none of them empty.

    ``datasets`` cannot reload a saved split of 0 rows, and an empty split breaks every metric, so a
    split without clips is refused under ``missing="error"`` (it can only come from metadata without
    records) and dropped with a warning naming it under ``missing="skip"``.

    Args:
        sources: split name -> the metadata file (or description) it was read from, for the messages.

    Raises:
        CorpusFormatError: an empty split under ``missing="error"``, or no clip in any split.
    """
    empty = [split for split, dataset in splits.items() if len(dataset) == 0]
    named = ", ".join(f"'{split}' ({sources[split]})" for split in empty)
    if empty and missing == "error":
        raise CorpusFormatError(
            f"{corpus}: split(s) {named} have no records; remove the file(s) or choose other splits."
        )
    if len(empty) == len(splits):
        raise CorpusFormatError(
            f"{corpus}: no clip could be loaded: split(s) {named} are empty after skipping the problems "
            "logged above (missing='skip'); check audio_dir= and the metadata files."
        )
    if empty:
        logger.warning(
            f"{corpus}: dropped empty split(s) {named}: every clip was skipped (see the warnings above) "
            "or the file has no records."
        )
    return DatasetDict({split: dataset for split, dataset in splits.items() if len(dataset)})


def select_splits(requested: Iterable[str] | str | None, aliases: dict[str, str], corpus: str) -> list[str]:
    """Canonical split names for ``requested`` (all when ``None``), in ``aliases``' order.

    Args:
        aliases: every accepted name (canonical ones included) mapped to its canonical split name.
    """
    canonical = list(dict.fromkeys(aliases.values()))
    if requested is None:
        return canonical
    if isinstance(requested, str):
        requested = [requested]
    chosen = set()
    for name in requested:
        if name not in aliases:
            raise ValueError(f"Unknown {corpus} split {name!r}; choose from {sorted(aliases)}.")
        chosen.add(aliases[name])
    return [name for name in canonical if name in chosen]


def embed_audio_bytes(dataset: DatasetDict) -> DatasetDict:
    """Read every clip's file into the ``bytes`` of its ``audio`` cell, so the result no longer depends
    on the local audio paths (what ``save_to_disk`` and ``push_to_hub`` do themselves; ``to_parquet`` does not)."""
    embedded = DatasetDict()
    for split, split_dataset in dataset.items():
        output_format = split_dataset.format
        arrow_dataset = split_dataset.with_format("arrow").map(embed_table_storage, batched=True)
        embedded[split] = arrow_dataset.with_format(**output_format)
    return embedded
