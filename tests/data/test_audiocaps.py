from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import Audio

from hf_atr.data.audio import decode_audio
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.audiocaps import load_audiocaps
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.schema import corpus_provenance
from hf_atr.data.synthcaps import load_synthcaps, write_audiocaps_layout


@pytest.fixture(scope="module")
def synthcaps():
    return load_synthcaps(2, 3, 3, duration=0.5, languages=("eng",))


def _rows(csv_path: Path) -> list[list[str]]:
    with csv_path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _audio_path(dataset, index: int) -> Path:
    return Path(dataset[index]["audio"]["path"])


def test_official_layout_round_trip(tmp_path, synthcaps):
    write_audiocaps_layout(synthcaps, tmp_path)
    loaded = load_audiocaps(tmp_path)
    assert list(loaded) == ["train", "validation", "test"]
    for split in loaded:
        original, dataset = synthcaps[split], loaded[split]
        assert dataset.features["audio"] == Audio(decode=False)
        assert len(dataset) == len(original)
        csv_rows = _rows(
            tmp_path / {"train": "train.csv", "validation": "val.csv", "test": "test.csv"}[split]
        )[1:]
        for index, row in enumerate(dataset):
            expected = original[index]["captions"][:1] if split == "train" else original[index]["captions"]
            assert row["captions"] == expected
            assert row["audio"]["bytes"] is None and Path(row["audio"]["path"]).is_absolute()
            assert row["audio_id"] == Path(row["audio"]["path"]).stem
            clip_rows = [csv_row for csv_row in csv_rows if csv_row[1] == row["audio_id"]]
            assert row["caption_ids"] == [csv_row[0] for csv_row in clip_rows]
            np.testing.assert_array_equal(decode_audio(row["audio"]), decode_audio(original[index]["audio"]))


@pytest.mark.parametrize("pattern", ["Y{youtube_id}.wav", "{youtube_id}_{start_time}.wav"])
def test_common_file_names_are_detected_or_given(tmp_path, synthcaps, pattern):
    write_audiocaps_layout(synthcaps, tmp_path, filename_pattern=pattern)
    detected = load_audiocaps(tmp_path, splits=["val"])
    given = load_audiocaps(tmp_path, splits="validation", filename_pattern=pattern)
    assert list(detected) == ["validation"]
    assert detected["validation"]["audio"] == given["validation"]["audio"]
    assert all(Path(audio["path"]).is_file() for audio in detected["validation"]["audio"])


def test_explicit_audio_dir_and_bad_pattern(tmp_path, synthcaps):
    write_audiocaps_layout(synthcaps, tmp_path)
    moved = tmp_path / "elsewhere"
    (tmp_path / "audio").rename(moved)
    loaded = load_audiocaps(tmp_path, audio_dir=moved, splits=["test"])
    assert Path(loaded["test"][0]["audio"]["path"]).parent == (moved / "test").resolve()
    with pytest.raises(ValueError, match="may use only the fields"):
        load_audiocaps(tmp_path, audio_dir=moved, filename_pattern="{ytid}.wav")
    with pytest.raises(ValueError, match="Unknown AudioCaps split 'dev'"):
        load_audiocaps(tmp_path, audio_dir=moved, splits=["dev"])
    with pytest.raises(ValueError, match="missing='ignore' is not supported"):
        load_audiocaps(tmp_path, audio_dir=moved, missing="ignore")


def test_wavcaps_style_layout(tmp_path, synthcaps):
    write_audiocaps_layout(synthcaps, tmp_path, variant="wavcaps")
    loaded = load_audiocaps(tmp_path)
    assert "caption_ids" not in loaded["train"].column_names
    for split in loaded:
        for index, row in enumerate(loaded[split]):
            expected = synthcaps[split][index]["captions"]
            assert row["captions"] == (expected[:1] if split == "train" else expected)
            assert row["audio_id"] == Path(row["audio"]["path"]).name


def test_missing_clip_raises_with_row_or_is_skipped_and_logged(tmp_path, synthcaps, caplog):
    write_audiocaps_layout(synthcaps, tmp_path)
    loaded = load_audiocaps(tmp_path, splits=["val"])
    removed = _audio_path(loaded["validation"], 1)
    removed.unlink()
    # The clip's first caption row: header is line 1 and every validation clip has five rows.
    with pytest.raises(FileNotFoundError, match=rf"val\.csv, line 7: audio file not found: .*{removed.name}"):
        load_audiocaps(tmp_path, splits=["val"])
    with caplog.at_level(logging.WARNING):
        skipped = load_audiocaps(tmp_path, splits=["val"], missing="skip")
    assert skipped["validation"]["audio_id"] == [
        loaded["validation"][0]["audio_id"],
        loaded["validation"][2]["audio_id"],
    ]
    assert "skipped 1 clip(s)/row(s)" in caplog.text and removed.name in caplog.text


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda path: path.write_bytes(b"not a wav file at all"), "unreadable or corrupt"),
        (lambda path: path.write_bytes(b""), "unreadable or corrupt"),
        (lambda path: soundfile.write(path, np.zeros(0, dtype=np.float32), 16000), "zero length"),
    ],
    ids=["corrupt", "empty-file", "zero-frames"],
)
def test_bad_audio_raises_with_row_or_is_skipped(tmp_path, synthcaps, damage, message):
    write_audiocaps_layout(synthcaps, tmp_path)
    loaded = load_audiocaps(tmp_path, splits=["test"])
    damage(_audio_path(loaded["test"], 0))
    with pytest.raises(AudioDecodeError, match=rf"test\.csv, line 2: .*{message}"):
        load_audiocaps(tmp_path, splits=["test"])
    skipped = load_audiocaps(tmp_path, splits=["test"], missing="skip")
    assert skipped["test"]["audio_id"] == loaded["test"]["audio_id"][1:]


def test_multichannel_audio_is_accepted_and_downmixed_on_decode(tmp_path, synthcaps):
    write_audiocaps_layout(synthcaps, tmp_path)
    path = _audio_path(load_audiocaps(tmp_path, splits=["train"])["train"], 0)
    left = np.linspace(-0.5, 0.5, 800, dtype=np.float32)
    soundfile.write(path, np.stack([left, -left + 0.25], axis=1), 16000, subtype="FLOAT")
    loaded = load_audiocaps(tmp_path, splits=["train"])
    waveform = decode_audio(loaded["train"][0]["audio"])
    np.testing.assert_allclose(waveform, np.full(800, 0.125, dtype=np.float32), atol=1e-6)


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        ("99,abcdefghijk,30,a dog, barking loudly", "expected 4 fields"),
        ("99,abcdefghijk,30,", "empty caption"),
        ("99,abcdefghijk,thirty,a dog barks", "start_time 'thirty' is not a number"),
    ],
    ids=["column-count", "empty-caption", "bad-start-time"],
)
def test_malformed_row_raises_with_line_or_is_skipped(tmp_path, synthcaps, caplog, bad_row, message):
    write_audiocaps_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "train.csv"
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    lines.insert(2, bad_row)
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=rf"train\.csv, line 3: {message}"):
        load_audiocaps(tmp_path, splits=["train"])
    with caplog.at_level(logging.WARNING):
        skipped = load_audiocaps(tmp_path, splits=["train"], missing="skip")
    assert len(skipped["train"]) == len(synthcaps["train"])
    assert "skipped 1 clip(s)/row(s)" in caplog.text and "line 3" in caplog.text


def test_conflicting_start_times_and_bad_header(tmp_path, synthcaps):
    write_audiocaps_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "val.csv"
    rows = _rows(csv_path)
    rows[2][2] = str(int(rows[2][2]) + 10)
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    with pytest.raises(
        CorpusFormatError, match=r"val\.csv, line 3: youtube_id .* has start_time .* on line 2"
    ):
        load_audiocaps(tmp_path, splits=["val"])
    csv_path.write_text("id,video,caption\n1,abc,a dog\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"val\.csv, line 1: header .* is neither"):
        load_audiocaps(tmp_path, splits=["val"])
    with pytest.raises(FileNotFoundError, match="No AudioCaps metadata"):
        load_audiocaps(tmp_path / "audio")


def test_source_ids_provenance_and_empty_split(tmp_path, synthcaps, caplog, monkeypatch):
    corpus = write_audiocaps_layout(synthcaps, tmp_path / "audiocaps", filename_pattern="Y{youtube_id}.wav")
    loaded = load_audiocaps(corpus)
    youtube_ids = [row[1] for row in _rows(corpus / "test.csv")[1:]]
    assert loaded["test"]["source_id"] == [f"youtube:{i}" for i in dict.fromkeys(youtube_ids)]
    provenance = corpus_provenance(loaded["validation"])
    assert provenance["official_release"] == "AudioCaps v1" and provenance["official_clips"] == 495
    assert provenance["corpus_split"] == "val" and provenance["clips_found"] == len(synthcaps["validation"])
    for path in (corpus / "audio" / "val").iterdir():
        path.unlink()
    monkeypatch.setenv("HOME", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        skipped = load_audiocaps("~/audiocaps", missing="skip")
    assert (
        list(skipped) == ["train", "test"] and "AudioCaps: dropped empty split(s) 'validation'" in caplog.text
    )
    wavcaps = write_audiocaps_layout(
        synthcaps, tmp_path / "wavcaps", filename_pattern="Y{youtube_id}.wav", variant="wavcaps"
    )
    assert load_audiocaps(wavcaps)["test"]["source_id"] == loaded["test"]["source_id"]
