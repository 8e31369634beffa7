from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile

from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.schema import corpus_provenance
from hf_atr.data.wavcaps import load_wavcaps, wavcaps_source


def _write_flac(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    waveform = np.random.default_rng(seed).uniform(-0.5, 0.5, 3200).astype(np.float32)
    soundfile.write(path, waveform, 32000, format="FLAC")


def _write_json(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"num_captions_per_audio": 1, "data": records}), encoding="utf-8")
    return path


# The first record of each released file (WavCaps json_files/), with further ids of the same form.
def _freesound(identifier: str, caption: str) -> dict:
    return {
        "id": identifier,
        "file_name": "UK Mello.wav",
        "href": f"/people/Tempouser/sounds/{identifier}/",
        "tags": ["Standard", "ringtone"],
        "description": "Standard traditional basic ringtone, in mello tone.",
        "author": "Tempouser",
        "duration": 3.204375,
        "download_link": f"https://freesound.org/people/Tempouser/sounds/{identifier}/download/x.wav",
        "caption": caption,
        "audio": "wav_path",
    }


def _audioset(youtube_id: str, caption: str) -> dict:
    return {"id": f"Y{youtube_id}.wav", "caption": caption, "audio": "wav_path", "duration": 10.0}


def _bbc(identifier: str, caption: str) -> dict:
    return {
        "description": "Greengrocer Cicada - close-up stridulation.",
        "category": "['Nature']",
        "caption": caption,
        "id": identifier,
        "duration": 88.84353125,
        "audio": "wav_path",
        "download_link": f"https://sound-effects-media.bbcrewind.co.uk/zip/{identifier}.wav.zip",
    }


def _soundbible(identifier: str, caption: str) -> dict:
    return {
        "title": "Airplane Landing Airport",
        "description": "Large commercial airplane landing at an airport runway.",
        "author": "Daniel Simion",
        "href": f"{identifier}-Airplane-Landing-Airport.html",
        "caption": caption,
        "id": identifier,
        "duration": 14.1424375,
        "audio": "wav_path",
        "download_link": f"http://soundbible.com/grab.php?id={identifier}&type=wav",
    }


@pytest.mark.parametrize(
    ("folder", "file_name", "make", "ids", "audio_names", "source_ids"),
    [
        ("FreeSound", "fsd_final.json", _freesound, ["180913", "2523"], ["180913.flac", "2523.flac"],
         ["freesound:180913", "freesound:2523"]),
        ("AudioSet_SL", "as_final.json", _audioset, ["b0RFKhbpFJA", "-0xPrh2sJK0"],
         ["Yb0RFKhbpFJA.flac", "Y-0xPrh2sJK0.flac"], ["youtube:b0RFKhbpFJA", "youtube:-0xPrh2sJK0"]),
        ("BBC_Sound_Effects", "bbc_final.json", _bbc, ["NHU05051026", "07075040"],
         ["NHU05051026.flac", "07075040.flac"], ["bbc:NHU05051026", "bbc:07075040"]),
        ("SoundBible", "sb_final.json", _soundbible, ["2219", "2218"], ["2219.flac", "2218.flac"],
         ["soundbible:2219", "soundbible:2218"]),
    ],
    ids=["FreeSound", "AudioSet_SL", "BBC", "SoundBible"],
)  # fmt: skip
def test_each_source_of_the_release(
    tmp_path, monkeypatch, folder, file_name, make, ids, audio_names, source_ids
):
    json_path = _write_json(
        tmp_path / "json_files" / folder / file_name, [make(i, f"caption {i}") for i in ids]
    )
    for seed, name in enumerate(audio_names):
        _write_flac(tmp_path / "audio" / folder / name, seed)
    monkeypatch.setenv("HOME", str(tmp_path))
    loaded = load_wavcaps(f"~/json_files/{folder}/{file_name}", audio_dir=f"~/audio/{folder}")
    assert list(loaded) == ["train"]
    train = loaded["train"]
    expected_ids = [make(i, "")["id"] for i in ids]
    assert train["audio_id"] == expected_ids
    assert train["captions"] == [[f"caption {i}"] for i in ids]
    assert train["source_id"] == source_ids
    assert [Path(row["path"]).name for row in train["audio"]] == audio_names
    provenance = corpus_provenance(train)
    assert provenance["corpus"] == "WavCaps" and provenance["source"] == folder
    assert provenance["official_release"] == f"WavCaps {folder}" and provenance["clips_found"] == 2
    assert provenance["metadata"] == [file_name] and provenance["missing_records"] == 0
    assert wavcaps_source(json_path) == folder


def test_audio_fields_caption_slots_and_unknown_source(tmp_path, caplog):
    audio = tmp_path / "waveforms" / "val"
    _write_flac(audio / "Crowd, int, echoes.wav", 0)
    _write_flac(tmp_path / "elsewhere" / "b.wav", 1)
    records = [
        {**{f"caption_{k}": f"crowd {k}" for k in range(1, 6)}, "wav": "val/Crowd, int, echoes.wav",
         "audio": "/machine/of/the/authors/Crowd, int, echoes.wav"},
        {"caption": "a b", "id": "b", "audio": str(tmp_path / "elsewhere" / "b.wav"), "duration": 1.0},
    ]  # fmt: skip
    json_path = _write_json(tmp_path / "clotho_val.json", records)
    with caplog.at_level(logging.INFO):
        train = load_wavcaps(json_path, audio_dir=tmp_path / "waveforms")["train"]
    assert train["audio_id"] == ["Crowd, int, echoes.wav", "b"]
    assert train["captions"][0] == [f"crowd {k}" for k in range(1, 6)]
    assert train["source_id"] == [None, None]
    assert "WavCaps source not recognised (pass source=)" in caplog.text
    assert load_wavcaps(json_path, audio_dir=tmp_path / "waveforms", source="freesound")["train"][
        "source_id"
    ] == [
        None,
        None,
    ]
    with pytest.raises(ValueError, match="Unknown WavCaps source 'Freesound.org'"):
        load_wavcaps(json_path, source="Freesound.org")


def _clotho_val_record(name: str, identifier: str, seed: int) -> dict:
    """A record of WavCaps' own Clotho ``val.json`` (``retrieval/data/Clotho/json_files/``), field by field."""
    return {
        **{f"caption_{k}": f"{name} caption {k} {seed}." for k in range(1, 6)},
        "wav": f"Clotho/waveforms/val/{name}",
        "audio": f"/mnt/fast/nobackup/users/xm00178/data/Clotho/waveforms/val/{name}",
        "id": identifier,
        "duration": 17.531,
    }


@pytest.mark.parametrize("missing", ["error", "skip"])
def test_placeholder_ids_are_missing_records_not_duplicates(tmp_path, caplog, missing):
    # val.json has 6 records with the id "Not found" (the first is record 9); their audio exists.
    names = [f"clip {index}.wav" for index in range(1, 13)]
    placeholders = {9: names[8], 11: names[10], 12: names[11]}
    records = [
        _clotho_val_record(name, "Not found" if number in placeholders else str(100000 + number), number)
        for number, name in enumerate(names, start=1)
    ]
    json_path = tmp_path / "json_files" / "Clotho" / "val.json"
    json_path.parent.mkdir(parents=True)
    json_path.write_text(json.dumps({"data": records, "num_captions_per_audio": 5}), encoding="utf-8")
    for seed, name in enumerate(names):
        _write_flac(tmp_path / "Clotho" / "waveforms" / "val" / name, seed)
    with caplog.at_level(logging.WARNING):
        train = load_wavcaps(json_path, audio_dir=tmp_path, missing=missing)["train"]
    kept = [number for number in range(1, 13) if number not in placeholders]
    assert train["audio_id"] == [str(100000 + number) for number in kept]
    assert train["captions"][0] == [f"clip 1.wav caption {k} 1." for k in range(1, 6)]
    assert [Path(row["path"]).name for row in train["audio"]] == [names[number - 1] for number in kept]
    assert f"{json_path}: left out 3 missing record(s): WavCaps found no source id for them" in caplog.text
    for number, name in placeholders.items():
        assert (
            f"{json_path}, record {number}: id 'Not found' is a placeholder, not an id (audio {name!r})"
            in caplog.text
        )
    assert "already in record" not in caplog.text
    provenance = corpus_provenance(train)
    assert provenance["missing_records"] == 3 and provenance["skipped"] == 0
    assert provenance["clips_found"] == 9


def test_bad_records_are_named_or_skipped(tmp_path, caplog):
    for seed, name in enumerate(["1", "2", "3"]):
        _write_flac(tmp_path / "audio" / f"{name}.flac", seed)
    (tmp_path / "audio" / "4.flac").write_bytes(b"not audio")
    records = [
        _freesound("1", "a dog barks"),
        _freesound("2", "  "),
        _freesound("1", "again"),
        _freesound("5", "no file"),
        _freesound("4", "corrupt file"),
        _freesound("3", "a cat"),
    ]
    json_path = _write_json(tmp_path / "fsd_final.json", records)
    audio_dir = tmp_path / "audio"
    with pytest.raises(CorpusFormatError, match=r"fsd_final\.json, record 2: empty or non-text caption\."):
        load_wavcaps(json_path, audio_dir=audio_dir)
    with caplog.at_level(logging.WARNING):
        train = load_wavcaps(json_path, audio_dir=audio_dir, missing="skip")["train"]
    assert train["audio_id"] == ["1", "3"]
    assert "WavCaps split 'train': skipped 4 clip(s)/row(s)" in caplog.text
    assert "record 3: id '1' already in record 1." in caplog.text
    assert f"record 4: audio file not found: {audio_dir.resolve() / '5.flac'}" in caplog.text
    assert corpus_provenance(train)["skipped"] == 4
    _write_json(json_path, [records[4]])
    with pytest.raises(AudioDecodeError, match=r"fsd_final\.json, record 1: .*unreadable or corrupt"):
        load_wavcaps(json_path, audio_dir=audio_dir)
    with pytest.raises(CorpusFormatError, match="WavCaps: no clip could be loaded"):
        load_wavcaps(json_path, audio_dir=audio_dir, missing="skip")
    json_path.write_text('{"data": [\n{"id": 1,}\n]}', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"fsd_final\.json, line 2: not valid JSON"):
        load_wavcaps(json_path, audio_dir=audio_dir)
    json_path.write_text('{"items": []}', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r'expected \{"data": \[records\]\} or a list of records'):
        load_wavcaps(json_path, audio_dir=audio_dir)
    with pytest.raises(FileNotFoundError, match="WavCaps JSON file not found"):
        load_wavcaps(tmp_path / "absent.json")
