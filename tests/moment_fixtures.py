"""A tiny moment-retrieval set on disk, in the layout ``load_moments`` reads: recordings of quiet noise with tone
events whose pitch names their class (a tiny model can learn them), and the Moment-DETR JSON Lines file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from tests.tiny_models import SAMPLING_RATE, WORD_CLASSES

EVENT_SECONDS = 1.5


def event_tone(label: int, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A tone of class ``label`` (its own pitch, 300 Hz + 450 Hz per class) with a little noise."""
    time = np.arange(int(seconds * SAMPLING_RATE)) / SAMPLING_RATE
    tone = 0.4 * np.sin(2 * np.pi * (300 + 450 * label) * time)
    return (tone + 0.01 * rng.standard_normal(len(time))).astype(np.float32)


def write_moment_set(
    folder: Path,
    recordings: int = 4,
    *,
    seconds: float = 8.0,
    split: str = "train",
    seed: int = 0,
    classes: int = 4,
) -> Path:
    """Write ``recordings`` recordings of ``seconds`` with two events each (distinct classes, at non-overlapping
    random times) under ``folder/audio`` and their queries to ``folder/moments_<split>_release.jsonl``."""
    rng = np.random.default_rng(seed)
    audio_dir = folder / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(recordings):
        vid = f"{split}_{index:03d}"
        recording = (0.01 * rng.standard_normal(int(seconds * SAMPLING_RATE))).astype(np.float32)
        labels = rng.choice(classes, size=2, replace=False)
        half = seconds / 2
        for number, label in enumerate(labels):
            start = round(float(rng.uniform(number * half, (number + 1) * half - EVENT_SECONDS)), 2)
            first = int(start * SAMPLING_RATE)
            tone = event_tone(int(label), EVENT_SECONDS, rng)
            recording[first : first + len(tone)] += tone
            lines.append(
                {
                    "qid": f"{vid}_{number + 1}",
                    "query": f"a {WORD_CLASSES[int(label)]} sound",
                    "duration": seconds,
                    "vid": vid,
                    "relevant_windows": [[start, round(start + EVENT_SECONDS, 2)]],
                }
            )
        soundfile.write(audio_dir / f"{vid}.wav", recording, SAMPLING_RATE, subtype="PCM_16")
    annotations = folder / f"moments_{split}_release.jsonl"
    annotations.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return annotations
