"""The overlap filter's content check: what it finds and what it costs, side by side in one run.

Reference (evaluation) set: the real Clotho validation sample under ``--real-audio`` (15 clips,
16-29 s, 44.1 kHz WAV) when present, else synthetic 20-s clips. Training set: ``--train`` synthetic
10-s 32 kHz FLAC clips (WavCaps' format) plus, as overlaps, every reference clip re-saved losslessly as
FLAC and as WAV with a title tag (what converters and taggers do), and one reference clip resampled to
32 kHz (what WavCaps did: only a source id can find that one).

Compared, each over the whole training set:

* ``bytes``: blake2b of every file's bytes (the cheap content hash);
* ``pcm all``: :func:`hf_atr.data.overlap.audio_content_hash` of every file (decode everything);
* ``remove_overlap``: the filter as shipped: a header read per file, the PCM hash only for files whose
  (rate, channels, frames) equals a reference clip's.

Printed: seconds, the speed ratio to ``pcm all``, and how many of the planted overlaps each finds.

    python benchmarks/overlap_filter.py              # 400 training clips (about a minute on 2 cores)
    python benchmarks/overlap_filter.py --train 100  # quick

Measured on the project machine (2 shared cores, loaded; real Clotho sample as reference, 400 synthetic
+ 31 planted training files, 2 threads; ``remove_overlap`` includes hashing the 15 reference clips):

    bytes            0.51 s   7.5x vs pcm all   finds  0 of 30 lossless copies
    pcm all          3.77 s   1.0x              finds 30 of 30
    remove_overlap   2.27 s   1.7x              finds 30 of 30

(with the samples hashed as exact floats; the former 16-bit hash, in the same session: 0.63 s, 3.49 s,
1.38 s; the machine's load makes runs vary by about 1.5x), so the filter finds what hashing the bytes
misses. None finds the
resampled copy: the source id does. Run from the repository root with hf_atr
importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
from datasets import Dataset
from real_audio import add_real_audio_argument

from hf_atr.data.audio import resample
from hf_atr.data.corpus_utils import audio_value, build_split
from hf_atr.data.overlap import audio_content_hash, remove_overlap
from hf_atr.data.schema import atr_features

CLOTHO_SAMPLE = Path("clotho-validation-sample") / "validation"
"""Where, under ``--real-audio``, the Clotho validation sample's WAV files are (Clotho's official layout)."""
REAL_AUDIO_HELP = (
    "folder of real recordings whose Clotho validation sample (clotho-validation-sample/validation/*.wav, "
    "Clotho's official layout) is the reference set; it may also hold AudioCaps samples and labelled Freesound "
    "clips (default: the samples kept beside the checkout, if any; synthetic clips when the sample is missing)"
)


def _dataset(paths: list[Path]) -> Dataset:
    rows = [
        {"audio": audio_value(path), "audio_id": path.name, "captions": ["x"], "source_id": None}
        for path in paths
    ]
    return build_split(rows, atr_features(with_source_id=True))


def _reference(directory: Path, real_audio: Path) -> list[Path]:
    if (real_audio / CLOTHO_SAMPLE).is_dir():
        return sorted((real_audio / CLOTHO_SAMPLE).glob("*.wav"))
    rng = np.random.default_rng(1)
    paths = []
    for index in range(15):
        path = directory / f"reference {index}.wav"
        soundfile.write(path, rng.uniform(-0.3, 0.3, 20 * 44100).astype(np.float32), 44100, subtype="PCM_16")
        paths.append(path)
    return paths


def _training(directory: Path, reference: list[Path], count: int) -> tuple[list[Path], int]:
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = directory / f"{index}.flac"
        soundfile.write(path, rng.uniform(-0.3, 0.3, 10 * 32000).astype(np.float32), 32000, format="FLAC")
        paths.append(path)
    planted = 0
    for index, source in enumerate(reference):
        samples, rate = soundfile.read(source, dtype="int16")
        soundfile.write(directory / f"copy {index}.flac", samples, rate, format="FLAC", subtype="PCM_16")
        with soundfile.SoundFile(
            directory / f"tagged {index}.wav",
            "w",
            rate,
            1 if samples.ndim == 1 else samples.shape[1],
            subtype="PCM_16",
        ) as sound:
            sound.title = "re-tagged copy"
            sound.write(samples)
        paths += [directory / f"copy {index}.flac", directory / f"tagged {index}.wav"]
        planted += 2
    samples, rate = soundfile.read(reference[0], dtype="float32")
    soundfile.write(
        directory / "resampled.flac",
        resample(samples if samples.ndim == 1 else samples.mean(1), rate, 32000),
        32000,
        format="FLAC",
    )
    paths.append(directory / "resampled.flac")
    return paths, planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train", type=int, default=400, help="Synthetic training clips besides the planted copies."
    )
    parser.add_argument("--threads", type=int, default=2)
    add_real_audio_argument(parser, "--real-audio", help=REAL_AUDIO_HELP)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        reference_paths = _reference(directory, args.real_audio)
        training_paths, planted = _training(directory, reference_paths, args.train)
        reference_bytes = {
            hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest() for path in reference_paths
        }
        reference_pcm = {audio_content_hash(path) for path in reference_paths}

        start = time.perf_counter()
        found_bytes = sum(
            hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest() in reference_bytes
            for path in training_paths
        )
        bytes_seconds = time.perf_counter() - start

        start = time.perf_counter()
        found_pcm = sum(audio_content_hash(path) in reference_pcm for path in training_paths)
        pcm_seconds = time.perf_counter() - start

        training, reference = _dataset(training_paths), _dataset(reference_paths)
        start = time.perf_counter()
        _, report = remove_overlap(training, reference, by=["content"], num_threads=args.threads)
        filter_seconds = time.perf_counter() - start

    print(
        f"{len(training_paths)} training files ({planted} lossless copies of {len(reference_paths)} reference clips, 1 resampled copy)"
    )
    for name, seconds, found in [
        ("bytes", bytes_seconds, found_bytes),
        ("pcm all", pcm_seconds, found_pcm),
        ("remove_overlap", filter_seconds, len(report.removed_by_content)),
    ]:
        print(
            f"{name:<16} {seconds:8.2f} s  {pcm_seconds / seconds:6.1f}x vs pcm all   finds {found} of {planted}"
        )


if __name__ == "__main__":
    main()
