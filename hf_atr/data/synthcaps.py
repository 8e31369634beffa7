"""SynthCaps: an embedded, deterministic audio-captioning corpus for tests, demos and smoke training.

Every clip is a scene of one to three synthetic sound events (:data:`~hf_atr.data.synthcaps_audio.SOUND_EVENTS`), played one after the
other or two at a time, each loud or quiet, and described by five captions in each of the eight languages
of :data:`hf_atr.data.schema.LANGUAGES` (grammars in :mod:`hf_atr.data.synthcaps_grammar`; the sounds and
scenes in :mod:`hf_atr.data.synthcaps_audio`). The captions
are a function of the audio, and the events differ clearly in spectrum or time pattern, so a tiny model
on log-mel spectrograms can learn the retrieval task in minutes on a CPU.

The module also writes SynthCaps in the on-disk layouts of AudioCaps, Clotho and ESC-50
(:func:`write_audiocaps_layout`, :func:`write_clotho_layout`, :func:`write_esc50_layout`) so that the corpus
loaders can be tested against real layouts without downloading anything.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict

from hf_atr.data import synthcaps_audio
from hf_atr.data.audio import encode_wav
from hf_atr.data.language_codes import normalize_language_code
from hf_atr.data.schema import LANGUAGES, atr_features, finalize_audio_column, set_corpus_provenance
from hf_atr.data.synthcaps_audio import (
    MIN_SAMPLING_RATE,
    check_clip_format,
)
from hf_atr.data.synthcaps_grammar import NUM_CAPTION_STYLES
from hf_atr.deprecation import moved_names

# Names that moved to the module that defines them; their old path here warns.
MOVED_NAMES = {
    "SOUND_EVENTS": "hf_atr.data.synthcaps_audio",
    "SYNTHCAPS_SPLITS": "hf_atr.data.synthcaps_audio",
    "SynthClip": "hf_atr.data.synthcaps_audio",
    "event_phrase": "hf_atr.data.synthcaps_grammar",
    "generate_clip": "hf_atr.data.synthcaps_audio",
    "render_event": "hf_atr.data.synthcaps_audio",
}
__getattr__ = moved_names(__name__, MOVED_NAMES)

__all__ = [
    "load_synthcaps",
    "write_audiocaps_layout",
    "write_clotho_layout",
    "write_esc50_layout",
]

CORPUS_NAME = "synthcaps"


def load_synthcaps(
    num_train: int = 512,
    num_validation: int = 64,
    num_test: int = 128,
    *,
    duration: float = 2.0,
    sampling_rate: int = 16000,
    languages: Sequence[str] = LANGUAGES,
    seed: int = 0,
) -> DatasetDict:
    """The SynthCaps corpus as a ``DatasetDict`` (``train``, ``validation``, ``test``) in the shared schema.

    Rows: ``audio`` (``Audio(decode=False)``: 16-bit WAV ``bytes`` and a file name such as
    ``synthcaps_train_000012.wav`` as ``path``), ``audio_id`` (the file stem), ``captions`` (five English
    captions), ``translations`` (``{language: five captions}`` for the non-English ``languages``; absent
    when there are none), ``label`` (the event heard first, for zero-shot demos; see :func:`~hf_atr.data.synthcaps_grammar.event_phrase`).

    Each split records its provenance (:func:`~hf_atr.data.schema.corpus_provenance`) as the loaders do: corpus
    ``synthcaps``, its ``official_release`` the generator's settings (seed, clip length and rate), and as
    ``official_clips`` the clips generated for the split. Nothing can be missing from a generated split, so
    its official size is the size asked for, and an evaluation on it is on the complete split.

    Deterministic: the same arguments give the same bytes and captions; clip ``i`` of a split does not
    depend on the number of clips requested.

    Args:
        num_train, num_validation, num_test: clips per split (``>= 0``).
        duration: clip length in seconds (``>= 0.5``); every clip has ``round(duration * sampling_rate)``
            samples.
        sampling_rate: Hz, ``>= 12000`` (the chirps reach 5.5 kHz).
        languages: languages of :data:`LANGUAGES`, as ISO 639-1 (``"ja"``), ISO 639-3 (``"jpn"``) or NLLB
            codes (:func:`hf_atr.data.language_codes.normalize_language_code`); English captions are always
            produced.
        seed: base seed of the per-clip generators.
    """
    counts = {"train": num_train, "validation": num_validation, "test": num_test}
    for split, count in counts.items():
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"num_{split} must be a non-negative int, got {count!r}.")
    check_clip_format(duration, sampling_rate)
    if isinstance(languages, str):
        languages = (languages,)
    languages = [normalize_language_code(language) for language in languages]
    unknown = [language for language in languages if language not in LANGUAGES]
    if unknown:
        raise ValueError(f"SynthCaps has no captions in {unknown}; available languages: {list(LANGUAGES)}.")
    translation_languages = [
        language for language in LANGUAGES if language in languages and language != "eng"
    ]
    features = atr_features(translation_languages, with_label=True)

    splits = {}
    for split, count in counts.items():
        columns: dict[str, list] = {name: [] for name in features}
        for index in range(count):
            clip = synthcaps_audio.generate_clip(
                split, index, duration=duration, sampling_rate=sampling_rate, seed=seed
            )
            audio_id = f"synthcaps_{split}_{index:06d}"
            columns["audio"].append(
                {"bytes": encode_wav(clip.waveform, sampling_rate), "path": f"{audio_id}.wav"}
            )
            columns["audio_id"].append(audio_id)
            columns["captions"].append(clip.captions["eng"])
            if translation_languages:
                columns["translations"].append(
                    {language: clip.captions[language] for language in translation_languages}
                )
            columns["label"].append(clip.label)
        splits[split] = set_corpus_provenance(
            finalize_audio_column(Dataset.from_dict(columns, features=features)),
            {
                "corpus": CORPUS_NAME,
                "layout": "in memory, from hf_atr.data.synthcaps.load_synthcaps",
                "split": split,
                "corpus_split": split,
                "metadata": [],
                "official_release": f"generated with seed {seed}, {duration:g}-s clips at {sampling_rate} Hz",
                "official_clips": count,
                "clips_found": count,
                "skipped": 0,
                "filters": [],
                "classes": list(synthcaps_audio.SOUND_EVENTS),
            },
        )
    return DatasetDict(splits)


def write_audiocaps_layout(
    dataset_dict: DatasetDict,
    out_dir: str | os.PathLike,
    *,
    filename_pattern: str = "{youtube_id}.wav",
    variant: str = "official",
) -> Path:
    """Write ``dataset_dict`` in the AudioCaps layout under ``out_dir`` (for loader tests).

    Files (``<csv>`` is ``train``, ``val``, ``test`` for the splits ``train``, ``validation``, ``test``;
    only the splits present are written):

    - ``variant="official"``: ``<csv>.csv`` with header ``audiocap_id,youtube_id,start_time,caption``; train
      has one row per clip (its first caption), val/test one row per caption (five per clip). Each clip
      gets a fake 11-character YouTube id (``[A-Za-z0-9_-]``, derived from ``audio_id``), an integer
      ``start_time`` in seconds, and ``audiocap_id`` is a unique integer per caption row (unique across
      splits).
    - ``variant="wavcaps"``: ``<csv>.csv`` with header ``file_name,caption`` (train, first caption) or
      ``file_name,caption_1,...,caption_5`` (val/test); ``file_name`` is the audio file name.
    - Audio: ``out_dir/audio/<csv>/`` (``audio/train``, ``audio/val``, ``audio/test``), named by
      ``filename_pattern`` with the fields ``{youtube_id}`` and ``{start_time}`` (e.g. ``"Y{youtube_id}.wav"``,
      ``"{youtube_id}_{start_time}.wav"``).
    - Translations, when the split has a ``translations`` column: ``<csv>_<lang>.csv`` (e.g. ``val_fra.csv``)
      in the same layout and order as ``<csv>.csv``, row by row: the same ``audiocap_id``/``youtube_id``/
      ``start_time`` (official) or ``file_name`` (wavcaps), with caption ``k`` translated.

    Returns:
        ``Path(out_dir)``.
    """
    if variant not in ("official", "wavcaps"):
        raise ValueError(f"variant must be 'official' or 'wavcaps', got {variant!r}.")
    try:
        filename_pattern.format(youtube_id="x", start_time=0)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"filename_pattern {filename_pattern!r} may only use the fields {{youtube_id}} and {{start_time}}."
        ) from error
    csv_names = {"train": "train", "validation": "val", "test": "test"}
    _check_split_names(dataset_dict, csv_names)
    out_dir = Path(out_dir)
    next_audiocap_id = 1
    for split, dataset in dataset_dict.items():
        csv_name = csv_names[split]
        audio_dir = out_dir / "audio" / csv_name
        one_caption = split == "train"
        languages = ["eng", *_translation_languages(dataset)]
        tables: dict[str, list[list]] = {language: [] for language in languages}
        for row in dataset:
            youtube_id = _fake_youtube_id(row["audio_id"])
            start_time = int.from_bytes(hashlib.sha256(row["audio_id"].encode()).digest()[:4], "big") % 300
            file_name = filename_pattern.format(youtube_id=youtube_id, start_time=start_time)
            _write_audio(row, audio_dir / file_name)
            captions_by_language = {"eng": row["captions"], **(row.get("translations") or {})}
            num_captions = 1 if one_caption else len(row["captions"])
            if variant == "wavcaps" and not one_caption and num_captions != NUM_CAPTION_STYLES:
                raise ValueError(
                    f"The WavCaps-style layout needs {NUM_CAPTION_STYLES} captions per clip; "
                    f"{row['audio_id']} has {num_captions}."
                )
            audiocap_ids = list(range(next_audiocap_id, next_audiocap_id + num_captions))
            next_audiocap_id += num_captions
            for language in languages:
                captions = captions_by_language[language][:num_captions]
                if variant == "wavcaps":
                    tables[language].append([file_name, *captions])
                else:
                    tables[language].extend(
                        [audiocap_id, youtube_id, start_time, caption]
                        for audiocap_id, caption in zip(audiocap_ids, captions)
                    )
        if variant == "wavcaps":
            header = ["file_name", "caption"] if one_caption else ["file_name"] + _caption_columns()
        else:
            header = ["audiocap_id", "youtube_id", "start_time", "caption"]
        for language, table in tables.items():
            suffix = "" if language == "eng" else f"_{language}"
            _write_csv(out_dir / f"{csv_name}{suffix}.csv", header, table)
    return out_dir


def write_clotho_layout(dataset_dict: DatasetDict, out_dir: str | os.PathLike) -> Path:
    """Write ``dataset_dict`` in the Clotho (v2) layout under ``out_dir`` (for loader tests).

    ``clotho_captions_development.csv``, ``clotho_captions_validation.csv``,
    ``clotho_captions_evaluation.csv`` (from ``train``, ``validation``, ``test``; only the splits present)
    with header ``file_name,caption_1,...,caption_5``, and the audio in ``development/``, ``validation/``,
    ``evaluation/``. Like real Clotho, file names contain spaces, commas, apostrophes and double quotes
    (cycling with the row index), and captions with commas are quoted by the ``csv`` module.

    Returns:
        ``Path(out_dir)``.
    """
    clotho_names = {"train": "development", "validation": "validation", "test": "evaluation"}
    _check_split_names(dataset_dict, clotho_names)
    out_dir = Path(out_dir)
    for split, dataset in dataset_dict.items():
        clotho_split = clotho_names[split]
        table = []
        for index, row in enumerate(dataset):
            if len(row["captions"]) != NUM_CAPTION_STYLES:
                raise ValueError(
                    f"The Clotho layout needs {NUM_CAPTION_STYLES} captions per clip; "
                    f"{row['audio_id']} has {len(row['captions'])}."
                )
            file_name = _clotho_file_name(row, index)
            _write_audio(row, out_dir / clotho_split / file_name)
            table.append([file_name, *row["captions"]])
        _write_csv(out_dir / f"clotho_captions_{clotho_split}.csv", ["file_name"] + _caption_columns(), table)
    return out_dir


def write_esc50_layout(
    out_dir: str | os.PathLike,
    *,
    clips_per_class: int = 4,
    sampling_rate: int = 44100,
    duration: float = 5.0,
    seed: int = 0,
) -> Path:
    """Write an ESC-50-style corpus of SynthCaps events under ``out_dir`` (for loader tests).

    ``meta/esc50.csv`` with header ``filename,fold,target,category,esc10,src_file,take`` (rows sorted by
    file name, like the real file) and mono WAV files ``audio/{fold}-{src_file}-{take}.wav``. One class per
    :data:`~hf_atr.data.synthcaps_audio.SOUND_EVENTS` entry: ``category`` is the event name (``chirp_up``), ``target`` its index; clip
    ``j`` of a class is in fold ``j % 5 + 1``; ``esc10`` is ``True`` for the first ten classes; ``take`` is
    ``A``, ``B``, ... for the clips cut from one ``src_file``. Every clip is one loud event.

    Returns:
        ``Path(out_dir)``.
    """
    if not isinstance(clips_per_class, int) or clips_per_class < 1:
        raise ValueError(f"clips_per_class must be a positive int, got {clips_per_class!r}.")
    if sampling_rate < MIN_SAMPLING_RATE:
        raise ValueError(f"sampling_rate must be at least {MIN_SAMPLING_RATE} Hz, got {sampling_rate}.")
    if duration <= 0:
        raise ValueError(f"duration must be positive, got {duration}.")
    out_dir = Path(out_dir)
    audio_dir = out_dir / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    num_samples = round(duration * sampling_rate)
    rows = []
    for target, category in enumerate(synthcaps_audio.SOUND_EVENTS):
        for clip in range(clips_per_class):
            rng = np.random.default_rng([seed, target, clip])
            fold = clip % 5 + 1
            # Two takes per source recording, as ESC-50 often cuts several clips from one freesound file.
            src_file = 100000 + 1000 * target + clip // 2
            take = "AB"[clip % 2]
            file_name = f"{fold}-{src_file}-{take}.wav"
            waveform = synthcaps_audio.render_event(category, num_samples, sampling_rate, rng, "loud")
            (audio_dir / file_name).write_bytes(encode_wav(waveform, sampling_rate))
            rows.append([file_name, fold, target, category, target < 10, src_file, take])
    rows.sort(key=lambda row: row[0])
    _write_csv(
        out_dir / "meta" / "esc50.csv",
        ["filename", "fold", "target", "category", "esc10", "src_file", "take"],
        rows,
    )
    return out_dir


def _check_split_names(dataset_dict: DatasetDict, known: dict[str, str]) -> None:
    unknown = [split for split in dataset_dict if split not in known]
    if unknown or not len(dataset_dict):
        raise ValueError(f"Expected splits among {list(known)}, got {list(dataset_dict)}.")


def _translation_languages(dataset: Dataset) -> list[str]:
    if "translations" not in dataset.features:
        return []
    return list(dataset.features["translations"])


def _caption_columns() -> list[str]:
    return [f"caption_{index + 1}" for index in range(NUM_CAPTION_STYLES)]


def _fake_youtube_id(audio_id: str) -> str:
    """11 characters of the URL-safe base64 alphabet, like a YouTube video id."""
    return base64.urlsafe_b64encode(hashlib.sha256(audio_id.encode()).digest()).decode()[:11]


def _clotho_file_name(row: dict, index: int) -> str:
    stem = row["audio_id"].replace("_", " ")
    label = (row.get("label") or "sound").replace("_", " ").capitalize()
    decorations = (
        f"{label} {stem}.wav",
        f"{label}, {stem}, take {index}.wav",
        f'"{label}" recorded {stem}.wav',
        f"{label}'s echo {stem}.wav",
    )
    return decorations[index % len(decorations)]


def _write_audio(row: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    audio = row["audio"]
    if audio.get("bytes") is not None:
        path.write_bytes(audio["bytes"])
    elif audio.get("path") and Path(audio["path"]).is_file():
        path.write_bytes(Path(audio["path"]).read_bytes())
    else:
        raise ValueError(
            f"Clip {row['audio_id']} has neither audio bytes nor an existing audio file ({audio.get('path')!r})."
        )


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
