"""Input pipeline: per-clip transformers feature extractors vs hf_atr's batched torch features.

Side by side in one run, on the same 5-s and 10-s clips (``--seconds``) cut from 44.1-kHz recordings:

1. decode + resample, per clip (what a DataLoader worker does): soundfile decoding of the clip's WAV
   bytes (16-bit, as Clotho ships them), then ``scipy.signal.resample_poly`` from 44.1 kHz to 16 kHz
   (AST, Whisper), 48 kHz (CLAP) and 32 kHz (PANNs), through :func:`hf_atr.data.audio.decode_audio`;
2. features only, waveforms already in memory at the extractor's rate, for AST, Whisper, CLAP and PANNs
   (hf_atr's NumPy ``PannsFeatureExtractor``) with their default (released-checkpoint) settings:
   - per clip, the transformers extractor's ``__call__`` (what ``AtrProcessor`` and ``Dataset.map`` run);
     for Whisper also its NumPy path (``_np_extract_fbank_features``, what transformers runs without
     torch), because with torch installed transformers' Whisper call is itself torch, per clip;
   - batched, :func:`hf_atr.features.batched_features_for` on ``--device`` (float32, batches of
     ``--batch-size``): from the list of arrays (``featurize_arrays``: padding and host-to-device copy
     included, what ``AtrProcessor(feature_backend="torch")`` runs), and from a batch already padded on the
     device (what the training step runs on :class:`~hf_atr.training.waveform_collator.WaveformCollator`'s
     output, whose DataLoader workers pad).
   The largest difference between the per-clip and the batched outputs is printed (dB for CLAP and PANNs,
   log-mel units for the others);
3. a raw-audio batch from the DataLoader worker to device-ready inputs (``--transfer-clips`` clips of
   ``--transfer-seconds`` s of mono 16-bit WAV at 48 kHz, CLAP's rate, which ``WaveformCollator`` sends as int16
   PCM), float32 against int16 side by side: in the worker, decoding and padding the batch
   (:func:`hf_atr.data.audio.decode_audio` to float32 against :func:`hf_atr.data.pcm.decode_pcm16`); in the
   training process, the bytes each batch moves, the CPU time of receiving it from a real DataLoader worker
   (``next()``, this thread only: the worker's own copy into shared memory is not the training process's cost),
   and the wall time of making it device-ready (pinning on CUDA, the copy to ``--device``, and for int16 the
   scaling to float32, :func:`hf_atr.training.device_features.waveforms_as_float`). ``--transfer-only`` runs
   this part alone.

Timings are the best (``--statistic median``: the median) of ``--repeats`` rounds in which the methods
alternate, by wall clock and by this thread's CPU time; CPU runs use one thread
(``torch.set_num_threads(1)``). Clips come from the 44.1-kHz recordings under ``--real-audio`` when
that folder exists, else from synthetic audio (said so in the output).

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
from real_audio import add_real_audio_argument
from transformers import ASTFeatureExtractor, ClapFeatureExtractor, WhisperFeatureExtractor

from hf_atr.data.audio import decode_audio, encode_wav, resample
from hf_atr.data.pcm import decode_pcm16
from hf_atr.features import batched_features_for, pad_waveforms
from hf_atr.models.panns.feature_extraction_panns import PannsFeatureExtractor
from hf_atr.training.device_features import waveforms_as_float

FILE_RATE = 44100
FROM_ARRAYS = "batched, from arrays"
FROM_PADDED = "batched, padded batch"
REAL_AUDIO_HELP = (
    "folder of real recordings whose 44.1-kHz WAV/FLAC files the clips are cut from: samples of AudioCaps and "
    "Clotho (validation) in their official layouts and labelled Freesound clips (default: the samples kept beside "
    "the checkout, if any; synthetic audio when the folder does not exist)"
)
TRANSFER_RATE = 48000
"""CLAP's rate: the raw-audio batch of part 3 is stored (and sent) at it."""


class ReadyBatches(torch.utils.data.Dataset):
    """``count`` copies of one collated waveform batch, each a fresh tensor: what a worker hands over per batch."""

    def __init__(self, batch: torch.Tensor, count: int) -> None:
        self.batch, self.count = batch, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.batch.clone()


def transfer_timings(batch: torch.Tensor, device: torch.device, rounds: int) -> tuple[float, float]:
    """Median seconds per batch in the training process: (this thread's CPU time in ``next()`` on a one-worker
    DataLoader, wall time from the received batch to float32 on ``device``, read once as the featurizer will)."""
    loader = torch.utils.data.DataLoader(
        ReadyBatches(batch, rounds + 1), batch_size=None, num_workers=1, prefetch_factor=2
    )
    receive, ready = [], []
    batches = iter(loader)
    next(batches)  # the worker's start-up
    for _ in range(rounds):
        cpu = time.thread_time()
        received = next(batches)
        receive.append(time.thread_time() - cpu)
        wall = time.perf_counter()
        if device.type == "cuda":
            received = received.pin_memory()
        waveforms = waveforms_as_float(received.to(device, non_blocking=True))
        waveforms.sum()  # the featurizer's first read: on the CPU, where the pages of shared memory fault in
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ready.append(time.perf_counter() - wall)
        del received, waveforms
    return statistics.median(receive), statistics.median(ready)


def transfer_section(sources: list[np.ndarray], args: argparse.Namespace, device: torch.device) -> None:
    """Part 3 of the module docstring."""
    clips = cut_clips(sources, args.transfer_seconds, args.transfer_clips)
    encoded = [encode_wav(resample(clip, FILE_RATE, TRANSFER_RATE), TRANSFER_RATE) for clip in clips]
    as_float = partial(decode_all, encoded, TRANSFER_RATE)

    def as_stored() -> list[np.ndarray]:
        return [decode_pcm16({"bytes": data, "path": None}, TRANSFER_RATE) for data in encoded]

    collated = {
        "float32": lambda: pad_waveforms(as_float())[0],
        "int16": lambda: pad_waveforms(as_stored(), dtype=torch.int16)[0],
    }
    worker = timed_seconds(collated, args.repeats, args.statistic)
    batches = {name: collate() for name, collate in collated.items()}
    assert torch.equal(waveforms_as_float(batches["int16"]), batches["float32"]), "int16 path differs"
    per_256 = 256 / args.transfer_clips
    print(
        f"\nRaw-audio batch, worker to device-ready: {args.transfer_clips} clips of {args.transfer_seconds:g} s, mono "
        f"16-bit WAV at {TRANSFER_RATE // 1000} kHz; device {device}; ms per 256 clips (scaled from "
        f"{args.transfer_clips}); receive = this thread's CPU time in next() on a 1-worker DataLoader, device-ready "
        f"= {'pin + ' if device.type == 'cuda' else ''}copy to {device} + scaling to float32 + one read (median of "
        f"{args.transfer_rounds} batches); int16 is scaled to exactly the float32 batch:"
    )
    print(
        "| waveforms | bytes per batch | worker: decode + pad | receive | device-ready | training process |"
    )
    print("|---|---|---|---|---|---|")
    rows = {}
    for name, batch in batches.items():
        receive, ready = transfer_timings(batch, device, args.transfer_rounds)
        rows[name] = (worker[name][0], receive, ready)
        print(
            f"| {name} | {batch.nbytes / 1e6:.1f} MB | {1000 * worker[name][0] * per_256:.0f} | "
            f"{1000 * receive * per_256:.1f} | {1000 * ready * per_256:.1f} | {1000 * (receive + ready) * per_256:.1f} |"
        )
    ratios = [rows["int16"][index] / rows["float32"][index] for index in range(3)]
    print(
        f"| int16 / float32 | {batches['int16'].nbytes / batches['float32'].nbytes:.2f} | {ratios[0]:.2f} | "
        f"{ratios[1]:.2f} | {ratios[2]:.2f} | {(rows['int16'][1] + rows['int16'][2]) / (rows['float32'][1] + rows['float32'][2]):.2f} |"
    )


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
    """``count`` clips of ``seconds`` cut one after another from the sources (cycling through them); when no
    source is that long, from the sources joined end to end."""
    samples = int(seconds * FILE_RATE)
    usable = [source for source in sources if len(source) >= samples] or [np.concatenate(sources)]
    if len(usable[0]) < samples:
        raise ValueError(
            f"The recordings last {len(usable[0]) / FILE_RATE:.1f} s in all, less than {seconds} s."
        )
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


def timed_seconds(
    functions: dict[str, Callable[[], object]], repeats: int, statistic: str
) -> dict[str, tuple[float, float]]:
    """Best or median (wall-clock, this thread's CPU) seconds of each function over ``repeats`` rounds, the
    functions alternating in every round. On a shared machine other jobs only ever add time, so the best
    round is the least disturbed; CPU time is less disturbed than wall time; on a GPU it means nothing."""
    for function in functions.values():
        function()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            wall, cpu = time.perf_counter(), time.thread_time()
            function()
            timings[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
    summary = min if statistic == "best" else statistics.median
    return {
        name: (summary(v[0] for v in values), summary(v[1] for v in values))
        for name, values in timings.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clips", type=int, default=32, help="clips per duration")
    parser.add_argument("--seconds", type=float, nargs="+", default=[5.0, 10.0], help="clip durations")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--statistic", choices=("best", "median"), default="best", help="of the rounds")
    parser.add_argument(
        "--extractors",
        default="AST,Whisper,CLAP,PANNs",
        help="comma-separated subset of AST,Whisper,CLAP,PANNs",
    )
    add_real_audio_argument(parser, "--real-audio", "--realaudio", help=REAL_AUDIO_HELP)
    parser.add_argument("--transfer-clips", type=int, default=256, help="clips per raw-audio batch (part 3)")
    parser.add_argument("--transfer-seconds", type=float, default=10.0, help="their duration")
    parser.add_argument("--transfer-rounds", type=int, default=5, help="batches received per dtype")
    parser.add_argument("--transfer-only", action="store_true", help="run part 3 alone")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="At least one mel filter has all zero values")

    sources = recordings(args.real_audio) if args.real_audio.is_dir() else []
    if sources:
        origin = f"{len(sources)} real 44.1-kHz recordings from {args.real_audio.name}/"
    else:
        sources = synthetic_recordings(8, 12.0, seed=0)
        origin = f"SYNTHETIC audio (no recordings in {args.real_audio.name}/)"
    print(
        f"Clips cut from {origin}; {args.clips} clips per duration; torch threads {torch.get_num_threads()}; "
        f"device {device}; {args.statistic} of {args.repeats} rounds."
    )
    if device.type == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(device)}")
    if args.transfer_only:
        transfer_section(sources, args, device)
        return

    extractors = {
        "AST": ASTFeatureExtractor(),
        "Whisper": WhisperFeatureExtractor(),
        "CLAP": ClapFeatureExtractor(),
        "PANNs": PannsFeatureExtractor(),
    }
    unknown = sorted(set(args.extractors.split(",")) - set(extractors))
    if unknown:
        parser.error(f"unknown extractor(s) {unknown}; choose from {sorted(extractors)}")
    extractors = {name: extractors[name] for name in args.extractors.split(",")}
    rates = sorted({extractor.sampling_rate for extractor in extractors.values()})
    rows = []
    decode_rows = []
    for seconds in args.seconds:
        clips = cut_clips(sources, seconds, args.clips)
        encoded = [encode_wav(clip, FILE_RATE) for clip in clips]
        at_rate = {rate: decode_all(encoded, rate) for rate in rates}
        decode_timings = timed_seconds(
            {
                "decode": partial(decode_all, encoded, None),
                **{
                    f"decode + resample to {rate // 1000} kHz": partial(decode_all, encoded, rate)
                    for rate in rates
                },
            },
            args.repeats,
            args.statistic,
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

            def from_arrays(batched=batched, waveforms=waveforms):
                outputs = [
                    batched.featurize_arrays(waveforms[start : start + args.batch_size], device=device)
                    for start in range(0, len(waveforms), args.batch_size)
                ]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                return outputs

            padded_batches = [
                pad_waveforms(waveforms[start : start + args.batch_size], device=device)
                for start in range(0, len(waveforms), args.batch_size)
            ]

            def from_padded(batched=batched, padded_batches=padded_batches):
                outputs = [batched(padded, lengths) for padded, lengths in padded_batches]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                return outputs

            baselines = {"per-clip extractor": per_clip}
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

                baselines = {
                    "per-clip, transformers' torch path": per_clip,
                    "per-clip NumPy path": numpy_path,
                }
            timings = timed_seconds(
                {**baselines, FROM_ARRAYS: from_arrays, FROM_PADDED: from_padded},
                args.repeats,
                args.statistic,
            )
            key = extractor.model_input_names[0]
            reference = torch.cat([output[key] for output in per_clip()])
            ours = torch.cat([output[key].cpu() for output in from_arrays()])
            difference = float((reference - ours).abs().max())
            clips_per_second = {
                method: (len(clips) / wall, len(clips) / cpu) for method, (wall, cpu) in timings.items()
            }
            for baseline in baselines:
                rows.append((name, seconds, baseline, clips_per_second, difference))

    print("\nDecode + resample (soundfile + scipy resample_poly, per clip, 16-bit WAV bytes in memory):")
    print("| step | clip | ms per clip | clips/s |")
    print("|---|---|---|---|")
    for name, seconds, value in decode_rows:
        print(f"| {name} | {seconds:.0f} s | {1000 * value:.1f} | {1 / value:.0f} |")

    print(
        f"\nFeatures only, clips/s (waveforms in memory; batched on {device} in batches of {args.batch_size}, "
        "from the list of arrays (padding included) or from an already padded batch (as the training step "
        "gets it from WaveformCollator's workers); speed-up of batched over per clip by wall clock / by CPU time:"
    )
    print(
        "| extractor | clip | per clip | clips/s | batched, from arrays | speed-up | batched, padded batch "
        "| speed-up | max abs difference |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, seconds, baseline, clips_per_second, difference in rows:
        base_wall, base_cpu = clips_per_second[baseline]
        cells = []
        for method in (FROM_ARRAYS, FROM_PADDED):
            wall, cpu = clips_per_second[method]
            ratio = f"{wall / base_wall:.1f}x" + (f" / {cpu / base_cpu:.1f}x" if device.type == "cpu" else "")
            cells += [f"{wall:.0f}", ratio]
        print(
            f"| {name} | {seconds:.0f} s | {baseline} | {base_wall:.0f} | {' | '.join(cells)} | {difference:.1e} |"
        )
    transfer_section(sources, args, device)


if __name__ == "__main__":
    main()
