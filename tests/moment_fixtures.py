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


def with_release_patterns(annotations: Path) -> Path:
    """Rewrite a moment file of :func:`write_moment_set` (two recordings or more) in place with what the released
    files of the field hold (CASTELLA, Lighthouse's ActivityNet and Clotho-Moment releases): queries with white
    space around them, and windows running outside their recording of ``duration`` d:

    - line 1: its query starts with a space, and it gains ``[d, d + 1]``, a window starting exactly at the end;
    - line 2: its only window is ``[d, d + 4501]``, far past the end (the query has no window inside);
    - line 3: it gains ``[d - 1, d + 2]``, two seconds past the end;
    - line 4: its query ends with a space.
    """
    lines = [json.loads(text) for text in annotations.read_text(encoding="utf-8").splitlines()]
    duration = lines[0]["duration"]
    lines[0]["query"] = " " + lines[0]["query"]
    lines[0]["relevant_windows"].append([duration, duration + 1])
    lines[1]["relevant_windows"] = [[duration, duration + 4501]]
    lines[2]["relevant_windows"].append([lines[2]["duration"] - 1, lines[2]["duration"] + 2])
    lines[3]["query"] += " "
    annotations.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return annotations
