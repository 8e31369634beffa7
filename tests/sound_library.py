"""A tiny sound library as a user has one for ``hf-atr serve``: a saved model, a folder of recordings (one long
recording with a tone at a known time, two short clips), its index written by ``hf-atr index``, and a query."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ranking_margin import clear_best_among
from synthetic_audio import recording_with_event
from tiny_models import SAMPLING_RATE, make_model, make_processor, random_waveforms

from hf_atr.audio_encoding import encode_audio, encode_audio_windows
from hf_atr.cli import main
from hf_atr.data.audio import encode_wav
from hf_atr.windowing import Windowing

LONG_RECORDING = "field/long take.wav"
EVENT_AT = 20.2
"""Where the long recording's tone starts, in seconds (the query holds the same tone)."""


@dataclass(frozen=True)
class SoundLibrary:
    model_dir: Path
    audio_dir: Path
    index_dir: Path
    query: Path
    """A 1-s clip holding the long recording's tone: its best match is the long recording, at the tone."""


def make_sound_library(root: Path) -> SoundLibrary:
    model_dir, audio_dir, index_dir = root / "model", root / "audio", root / "index"
    processor = make_processor()
    model = make_model(processor=processor)
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    (audio_dir / "field").mkdir(parents=True)
    recording, query = recording_with_event(30, EVENT_AT, SAMPLING_RATE)
    (audio_dir / LONG_RECORDING).write_bytes(encode_wav(recording, SAMPLING_RATE, subtype="FLOAT"))
    for name, waveform in zip(["dog_bark.wav", "siren.wav"], random_waveforms(2, seed=3)):
        (audio_dir / name).write_bytes(encode_wav(waveform, SAMPLING_RATE, subtype="FLOAT"))
    (root / "query.wav").write_bytes(encode_wav(query, SAMPLING_RATE, subtype="FLOAT"))
    assert (
        main(["index", "--model", str(model_dir), "--audio-dir", str(audio_dir), "--out", str(index_dir)])
        == 0
    )
    library = SoundLibrary(model_dir, audio_dir, index_dir, root / "query.wav")
    _assert_the_query_clearly_finds_the_tone(library, model, processor)
    return library


def _assert_the_query_clearly_finds_the_tone(library: SoundLibrary, model, processor) -> None:
    """The windows of the long recording that hold the tone score highest for the query, by a wide margin over
    every other window (brute force): tests read the best hit as the tone's on every CPU."""
    files = sorted(library.audio_dir.rglob("*.wav"))
    rows = [{"audio": str(path)} for path in files]
    encoded = encode_audio_windows(model, processor, rows, windowing=Windowing())
    query = encode_audio(model, processor, [{"audio": str(library.query)}])
    long_recording = files.index(library.audio_dir / LONG_RECORDING)
    holds_tone = (
        (encoded.clip_indices == long_recording)
        & (encoded.starts <= EVENT_AT)
        & (encoded.ends >= EVENT_AT + 0.5)
    )
    clear_best_among((query @ encoded.embeddings.T)[0], holds_tone)
