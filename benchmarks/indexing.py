"""``hf-atr index`` throughput on a folder of real recordings, clean and with 10 % unreadable files.

The folder holds copies of every recording under ``--real-audio`` (measured on 75: AudioCaps 10-s FLAC at
32 kHz, Clotho 15-30-s WAV at 44.1 kHz with spaces in their names, Freesound 4-17-s WAV at 44.1/48 kHz, mono and
stereo). The messy copy adds, for every ten good files, one bad one, cycling through what real folders
hold: a 0-byte file, a macOS ``._*`` AppleDouble file, a text file renamed ``.wav`` and a WAV cut off
half-way (decoded with a warning, so it is indexed). Each round runs ``hf-atr index`` (its handler, in this
process: the model is loaded once per run, as the command does) on both folders, alternating; the table
gives the median over ``--rounds`` rounds of files indexed per second (the cut-off WAV counts: it is
indexed) and the ratio of the messy folder's throughput to the clean one's. The model is the random-init ``hf-atr demo``
model (2-s window, long files indexed window by window); one torch thread.

    OMP_NUM_THREADS=1 python benchmarks/indexing.py --real-audio DIR

Run from the repository root with hf_atr importable (``pip install -e .`` or ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import soundfile
import torch
from real_audio import add_real_audio_argument
from transformers.utils import logging

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.cli import main as hf_atr_main
from hf_atr.data.audio import AUDIO_EXTENSIONS
from hf_atr.demo import tiny_feature_extractor, tiny_model_config
from hf_atr.tokenization import train_caption_tokenizer

REAL_AUDIO_HELP = (
    "folder of real recordings, every audio file under it indexed: samples of AudioCaps and Clotho (validation) in "
    "their official layouts and labelled Freesound clips (default: the samples kept beside the checkout, if any)"
)
BAD_EVERY = 10


def recordings(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.suffix.lower() in AUDIO_EXTENSIONS)


def write_bad_file(kind: int, directory: Path, number: int, source: Path, wav: Path) -> None:
    if kind == 0:
        (directory / f"empty {number}.wav").write_bytes(b"")
    elif kind == 1:
        (directory / f"._{source.name}").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    elif kind == 2:
        (directory / f"notes {number}.wav").write_text("take list, renamed by mistake\n" * 20)
    else:
        (directory / f"cut off {number}.wav").write_bytes(wav.read_bytes()[: wav.stat().st_size // 2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    add_real_audio_argument(parser, "--real-audio", help=REAL_AUDIO_HELP)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources = recordings(args.real_audio)
    if not sources:
        raise SystemExit(f"No recordings under {args.real_audio}; this benchmark measures real recordings.")
    minutes = sum(soundfile.info(path).duration for path in sources) / 60
    work = Path(tempfile.mkdtemp(prefix="hf-atr-indexing-"))
    try:
        clean, messy = work / "clean", work / "messy"
        for folder in (clean, messy):
            folder.mkdir()
            for source in sources:
                shutil.copy(source, folder / source.name)
        bad = -(-len(sources) // BAD_EVERY)
        wav = next(path for path in sources if path.suffix.lower() == ".wav")  # one bad file is it cut off
        for number in range(bad):
            write_bad_file(number % 4, messy, number, sources[number], wav)
        tokenizer = train_caption_tokenizer(["a dog barks", "rain falls on a roof"] * 4, vocab_size=60)
        torch.manual_seed(0)
        extractor = tiny_feature_extractor()
        AtrDualEncoderModel(tiny_model_config(extractor, len(tokenizer))).save_pretrained(work / "model")
        AtrProcessor(extractor, tokenizer).save_pretrained(work / "model")
        logging.set_verbosity_error()  # the skipped files and the cut-off file are reported every round
        seconds: dict[str, list[float]] = {"clean": [], "messy": []}
        summaries, indexed = {}, {}
        for round_number in range(args.rounds):
            for name, folder in (("clean", clean), ("messy", messy)):
                out = work / f"index-{name}-{round_number}"
                printed = io.StringIO()
                started = time.perf_counter()
                with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
                    hf_atr_main(
                        [
                            "index",
                            "--model",
                            str(work / "model"),
                            "--audio-dir",
                            str(folder),
                            "--out",
                            str(out),
                        ]
                    )
                seconds[name].append(time.perf_counter() - started)
                summaries[name] = printed.getvalue().strip().splitlines()[-1]
                indexed[name] = len(set(json.loads((out / "audio_index.json").read_text())["ids"]))
        print(
            f"{len(sources)} real recordings ({minutes:.1f} min of audio); the messy folder adds {bad} bad files "
            f"({100 * bad / len(sources):.0f} %): 0-byte, AppleDouble, text renamed .wav, a WAV cut off half-way"
        )
        print("| folder | files | indexed | s (median) | files indexed / s | throughput / clean |")
        print("|---|---|---|---|---|---|")
        clean_rate = indexed["clean"] / statistics.median(seconds["clean"])
        for name, folder in (("clean", clean), ("messy", messy)):
            median = statistics.median(seconds[name])
            rate = indexed[name] / median
            files = len(list(folder.iterdir()))
            print(
                f"| {name} | {files} | {indexed[name]} | {median:.2f} | {rate:.2f} | {rate / clean_rate:.2f}x |"
            )
        for name, summary in summaries.items():
            print(f"{name}: {summary.replace(str(work), '<tmp>')}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
