"""Input pipeline: per-clip transformers feature extractors vs hf_atr's batched torch features.

Side by side in one run, on the same 5-s and 10-s clips cut from 44.1-kHz recordings:

1. decode + resample, per clip (what a DataLoader worker does): soundfile decoding of the clip's WAV
   bytes (16-bit, as Clotho ships them), then ``scipy.signal.resample_poly`` from 44.1 kHz to 16 kHz
   (AST, Whisper) and to 48 kHz (CLAP), through :func:`hf_atr.data.audio.decode_audio`;
2. features only, waveforms already in memory at the extractor's rate, for AST, Whisper and CLAP with
   their default (released-checkpoint) settings:
   - per clip, the transformers extractor's ``__call__`` (what ``AtrProcessor`` and ``Dataset.map`` run);
     for Whisper also its NumPy path (``_np_extract_fbank_features``, what transformers runs without
     torch), because with torch installed transformers' Whisper call is itself torch, per clip;
   - batched, :func:`hf_atr.features.batched_features_for` on ``--device`` (float32, batches of
     ``--batch-size``), padding and host-to-device copy included.
   The largest difference between the two outputs is printed (dB for CLAP, log-mel units for the others).

Timings are medians over ``--repeats`` rounds in which the methods alternate; CPU runs use one thread
(``torch.set_num_threads(1)``). Clips come from ``../shared/realaudio`` (the 44.1-kHz files) when it is
there, else from synthetic audio (said so in the output).

    OMP_NUM_THREADS=1 python benchmarks/input_pipeline.py                 # CPU
    python benchmarks/input_pipeline.py --device cuda                      # features on a GPU

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import soundfile
import torch
from transformers import ASTFeatureExtractor, ClapFeatureExtractor, WhisperFeatureExtractor

from hf_atr.data.audio import decode_audio, encode_wav
from hf_atr.features import batched_features_for

FILE_RATE = 44100
REALAUDIO = Path(__file__).resolve().parents[1] / ".." / "shared" / "realaudio"


def recordings(folder: Path) -> list[np.ndarray]:
    """Every 44.1-kHz recording under ``folder``, mono float32."""
    waveforms = []
    for path in sorted(folder.rglob("*")):
        if path.suffix.lower() not in (".wav", ".flac"):
            continue
        if soundfile.info(path).samplerate == FILE_RATE:
            waveforms.append(decode_audio(str(path)))
    return waveforms


def synthetic_recordings(count: int, seconds: float, seed: int) -> list[np.ndarray]:
    """Noise bursts, tones and sweeps at 44.1 kHz (used when no real recordings are available)."""
    rng = np.random.default_rng(seed)
    time_axis = np.arange(int(seconds * FILE_RATE)) / FILE_RATE
    clips = []
    for _ in range(count):
        tone = np.sin(2 * np.pi * rng.uniform(100, 4000) * time_axis)
        sweep = np.sin(2 * np.pi * (rng.uniform(50, 500) + rng.uniform(100, 2000) * time_axis) * time_axis)
        noise = (
            rng.standard_normal(time_axis.size)
            * (rng.random(time_axis.size // 4410 + 1) > 0.5).repeat(4410)[: time_axis.size]
        )
        clips.append((0.3 * tone + 0.2 * sweep + 0.1 * noise).astype(np.float32))
    return clips


def cut_clips(sources: list[np.ndarray], seconds: float, count: int) -> list[np.ndarray]:
    """``count`` clips of ``seconds`` cut one after another from the sources (cycling through them)."""
    samples = int(seconds * FILE_RATE)
    usable = [source for source in sources if len(source) >= samples]
    if not usable:
        raise ValueError(f"No recording is {seconds} s long.")
    clips, offsets = [], [0] * len(usable)
    while len(clips) < count:
        for index, source in enumerate(usable):
            if offsets[index] + samples > len(source):
                offsets[index] = 0
            clips.append(source[offsets[index] : offsets[index] + samples])
            offsets[index] += samples // 2
            if len(clips) == count:
                break
    return clips


def decode_all(encoded: list[bytes], rate: int | None) -> list[np.ndarray]:
    """Decode WAV bytes with soundfile, resampling to ``rate`` (None: keep 44.1 kHz)."""
    return [decode_audio({"bytes": data, "path": None}, rate) for data in encoded]


def median_seconds(
    functions: dict[str, Callable[[], object]], repeats: int
) -> dict[str, tuple[float, float]]:
    """Median (wall-clock, this thread's CPU) seconds of each function, the functions alternating in
    every round. CPU time is less disturbed by other jobs on a shared machine; on a GPU it means nothing."""
    for function in functions.values():
        function()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            wall, cpu = time.perf_counter(), time.thread_time()
            function()
            timings[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
    return {
        name: (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
        for name, values in timings.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clips", type=int, default=32, help="clips per duration")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--realaudio", type=Path, default=REALAUDIO)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="At least one mel filter has all zero values")

    sources = recordings(args.realaudio) if args.realaudio.is_dir() else []
    if sources:
        origin = f"{len(sources)} real 44.1-kHz recordings from {args.realaudio.resolve()}"
    else:
        sources = synthetic_recordings(8, 12.0, seed=0)
        origin = f"SYNTHETIC audio ({args.realaudio} not found)"
    print(
        f"Clips cut from {origin}; {args.clips} clips per duration; torch threads {torch.get_num_threads()}; device {device}."
    )
    if device.type == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(device)}")

    extractors = {
        "AST": ASTFeatureExtractor(),
        "Whisper": WhisperFeatureExtractor(),
        "CLAP": ClapFeatureExtractor(),
    }
    rows = []
    decode_rows = []
    for seconds in (5.0, 10.0):
        clips = cut_clips(sources, seconds, args.clips)
        encoded = [encode_wav(clip, FILE_RATE) for clip in clips]
        at_rate = {rate: decode_all(encoded, rate) for rate in (16000, 48000)}
        decode_timings = median_seconds(
            {
                "decode": partial(decode_all, encoded, None),
                "decode + resample to 16 kHz": partial(decode_all, encoded, 16000),
                "decode + resample to 48 kHz": partial(decode_all, encoded, 48000),
            },
            args.repeats,
        )
        decode_rows += [(name, seconds, wall / len(clips)) for name, (wall, _) in decode_timings.items()]

        for name, extractor in extractors.items():
            waveforms = at_rate[extractor.sampling_rate]
            batched = batched_features_for(extractor)

            def per_clip(extractor=extractor, waveforms=waveforms):
                return [
                    extractor(waveform, sampling_rate=extractor.sampling_rate, return_tensors="pt")
                    for waveform in waveforms
                ]

            def torch_batches(batched=batched, waveforms=waveforms):
                outputs = [
                    batched.featurize_arrays(waveforms[start : start + args.batch_size], device=device)
                    for start in range(0, len(waveforms), args.batch_size)
                ]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                return outputs

            methods = {"per-clip transformers": per_clip, "batched torch": torch_batches}
            if name == "Whisper":

                def numpy_path(extractor=extractor, waveforms=waveforms):
                    return [
                        extractor._np_extract_fbank_features(
                            np.pad(
                                waveform[: extractor.n_samples],
                                (0, max(0, extractor.n_samples - len(waveform))),
                            )[None],
                            "cpu",
                        )
                        for waveform in waveforms
                    ]

                methods = {"per-clip NumPy path": numpy_path, **methods}
            timings = median_seconds(methods, args.repeats)
            key = extractors[name].model_input_names[0]
            reference = torch.cat([output[key] for output in per_clip()])
            ours = torch.cat([output[key].cpu() for output in torch_batches()])
            difference = float((reference - ours).abs().max())
            for method, (wall, cpu) in timings.items():
                rows.append((name, seconds, method, len(clips) / wall, len(clips) / cpu, difference))

    print("\nDecode + resample (soundfile + scipy resample_poly, per clip, 16-bit WAV bytes in memory):")
    print("| step | clip | ms per clip | clips/s |")
    print("|---|---|---|---|")
    for name, seconds, value in decode_rows:
        print(f"| {name} | {seconds:.0f} s | {1000 * value:.1f} | {1 / value:.0f} |")

    print(f"\nFeatures only (waveforms in memory; batched on {device}, batches of {args.batch_size}):")
    print(
        "| extractor | clip | method | clips/s | speed-up of batched torch | by CPU time | max abs difference |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, seconds, method, per_wall, per_cpu, difference in rows:
        ours = next(row for row in rows if row[:2] == (name, seconds) and row[2] == "batched torch")
        ratios = (
            ("", "")
            if method == "batched torch"
            else (f"{ours[3] / per_wall:.1f}x", f"{ours[4] / per_cpu:.1f}x")
        )
        if device.type != "cpu":
            ratios = (ratios[0], "")
        print(
            f"| {name} | {seconds:.0f} s | {method} | {per_wall:.0f} | {ratios[0]} | {ratios[1]} | {difference:.1e} |"
        )


if __name__ == "__main__":
    main()
