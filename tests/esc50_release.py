"""ESC-50 in the layout of its release (Piczak 2015, ``ESC-50-master``), for loader and zero-shot tests.

``meta/esc50.csv`` has all 2,000 rows of the release, with its columns and its 50 classes in the order of
their ``target``; ``audio/`` holds only the clips a test asks for, as a user's partial copy does.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

from synthetic_audio import synthetic_clip

from hf_atr.data.audio import encode_wav

ESC50_CATEGORIES: tuple[str, ...] = (
    "dog", "rooster", "pig", "cow", "frog", "cat", "hen", "insects", "sheep", "crow",
    "rain", "sea_waves", "crackling_fire", "crickets", "chirping_birds", "water_drops", "wind",
    "pouring_water", "toilet_flush", "thunderstorm", "crying_baby", "sneezing", "clapping", "breathing",
    "coughing", "footsteps", "laughing", "brushing_teeth", "snoring", "drinking_sipping", "door_wood_knock",
    "mouse_click", "keyboard_typing", "door_wood_creaks", "can_opening", "washing_machine", "vacuum_cleaner",
    "clock_alarm", "clock_tick", "glass_breaking", "helicopter", "chainsaw", "siren", "car_horn", "engine",
    "train", "church_bells", "airplane", "fireworks", "hand_saw",
)  # fmt: skip
"""The 50 ESC-50 categories; the index of each is its ``target``."""
ESC10_CATEGORIES = frozenset(
    ("dog", "rooster", "rain", "sea_waves", "crackling_fire", "crying_baby", "sneezing", "clock_tick",
     "helicopter", "chainsaw")
)  # fmt: skip
HEADER = ("filename", "fold", "target", "category", "esc10", "src_file", "take")
CLIPS_PER_CLASS_AND_FOLD = 8
SAMPLING_RATE = 44100
SECONDS = 5.0


def esc50_rows() -> list[dict[str, str]]:
    """The 2,000 rows of ``esc50.csv``: 8 clips per class in each of the 5 folds, two takes (``A``, ``B``) per
    Freesound source file, file names ``{fold}-{src_file}-{take}-{target}.wav``, sorted by name as in the release."""
    rows = []
    for target, category in enumerate(ESC50_CATEGORIES):
        for clip in range(5 * CLIPS_PER_CLASS_AND_FOLD):
            fold, src_file, take = (
                clip // CLIPS_PER_CLASS_AND_FOLD + 1,
                100000 + 100 * target + clip // 2,
                "AB"[clip % 2],
            )
            values = (f"{fold}-{src_file}-{take}-{target}.wav", fold, target, category,
                      category in ESC10_CATEGORIES, src_file, take)  # fmt: skip
            rows.append({name: str(value) for name, value in zip(HEADER, values)})
    return sorted(rows, key=lambda row: row["filename"])


def write_esc50_release(out_dir: Path, clips_per_fold: Mapping[int, int]) -> list[dict[str, str]]:
    """Write ``meta/esc50.csv`` (all 2,000 rows) and, for each fold in ``clips_per_fold``, the audio of that many
    of its clips, one class after the other (the first clip of classes 0, 1, ..., 49, then the second ...), as
    44.1 kHz mono 16-bit WAV of 5 s like the release's; returns the rows whose audio was written."""
    rows = esc50_rows()
    (out_dir / "meta").mkdir(parents=True, exist_ok=True)
    (out_dir / "audio").mkdir(exist_ok=True)
    with (out_dir / "meta" / "esc50.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, HEADER)
        writer.writeheader()
        writer.writerows(rows)
    written = []
    for fold, count in clips_per_fold.items():
        in_fold = [row for row in rows if row["fold"] == str(fold)]
        # Rows sorted by name come class by class, 8 each: position % 8 is the clip's number within its class.
        order = sorted(
            range(len(in_fold)), key=lambda i: (i % CLIPS_PER_CLASS_AND_FOLD, int(in_fold[i]["target"]))
        )
        by_class = [in_fold[i] for i in order]
        for seed, row in enumerate(by_class[:count]):
            waveform = synthetic_clip(round(SECONDS * SAMPLING_RATE), SAMPLING_RATE, seed=seed)
            (out_dir / "audio" / row["filename"]).write_bytes(encode_wav(waveform, SAMPLING_RATE))
            written.append(row)
    return written
