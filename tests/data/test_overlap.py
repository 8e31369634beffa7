from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile
from datasets import DatasetDict, load_from_disk

from hf_atr.data.audio import resample
from hf_atr.data.corpus_utils import audio_value, build_split, split_provenance
from hf_atr.data.overlap import audio_content_hash, read_wavcaps_blocklist, remove_overlap
from hf_atr.data.schema import atr_features, corpus_provenance


def _waveform(seed: int, frames: int = 4410) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, frames).astype(np.float32)


def _dataset(rows: list[tuple[str, Path, str | None]], corpus: str, split: str):
    features = atr_features(with_source_id=True)
    records = [
        {"audio": audio_value(path), "audio_id": audio_id, "captions": ["x"], "source_id": source}
        for audio_id, path, source in rows
    ]
    return build_split(records, features, split_provenance(corpus, "test", split, [], None))


@pytest.fixture
def corpora(tmp_path):
    """An evaluation set (Clotho-like WAV, 44.1 kHz, Freesound ids) and a training set (WavCaps-like) that
    holds: one of its clips under the same Freesound id (but resampled), a lossless FLAC copy of another
    under an unknown id, a WAV copy of a third with a metadata chunk, a copy cut one sample shorter, and
    an unrelated clip, a text file renamed .wav."""
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    for index in range(4):
        soundfile.write(evaluation / f"clip {index}.wav", _waveform(index), 44100, subtype="PCM_16")
    reference = _dataset(
        [
            (f"clip {index}.wav", evaluation / f"clip {index}.wav", f"freesound:{100 + index}")
            for index in range(4)
        ],
        "Clotho",
        "test",
    )
    training = tmp_path / "wavcaps"
    training.mkdir()
    soundfile.write(training / "100.flac", resample(_waveform(0), 44100, 32000), 32000, format="FLAC")
    # Re-encodings of the evaluation files' 16-bit samples, as a converter would make them.
    samples = {index: soundfile.read(evaluation / f"clip {index}.wav", dtype="int16")[0] for index in (1, 2)}
    soundfile.write(training / "555.flac", samples[1], 44100, format="FLAC", subtype="PCM_16")
    with soundfile.SoundFile(training / "tagged.wav", "w", 44100, 1, subtype="PCM_16") as sound:
        sound.title = "a copy with a title tag"
        sound.write(samples[2])
    soundfile.write(training / "cut.wav", _waveform(3)[:-1], 44100, subtype="PCM_16")
    soundfile.write(training / "other.wav", _waveform(9), 44100, subtype="PCM_16")
    (training / "text.wav").write_text("not audio")
    train = _dataset(
        [
            ("100", training / "100.flac", "freesound:100"),
            ("555", training / "555.flac", "freesound:555"),
            ("tagged", training / "tagged.wav", None),
            ("cut", training / "cut.wav", "freesound:777"),
            ("other", training / "other.wav", "freesound:888"),
            ("text", training / "text.wav", None),
        ],
        "WavCaps",
        "train",
    )
    return reference, train, evaluation, training


def test_content_hash_is_of_the_samples_not_the_file(corpora):
    _, _, evaluation, training = corpora
    original, flac, tagged = evaluation / "clip 1.wav", training / "555.flac", training / "tagged.wav"
    assert original.read_bytes() != flac.read_bytes()
    assert (
        audio_content_hash(original)
        == audio_content_hash(flac)
        == audio_content_hash({"bytes": flac.read_bytes(), "path": "x"})
    )
    assert (evaluation / "clip 2.wav").read_bytes() != tagged.read_bytes()
    assert audio_content_hash(evaluation / "clip 2.wav") == audio_content_hash(tagged)
    assert audio_content_hash(evaluation / "clip 3.wav") != audio_content_hash(training / "cut.wav")


def test_remove_overlap_by_source_id_and_content(corpora, caplog, tmp_path):
    reference, train, _, _ = corpora
    with caplog.at_level(logging.INFO):
        filtered, report = remove_overlap(train, [reference], num_threads=2)
    assert filtered["audio_id"] == ["cut", "other", "text"]
    assert report.removed_by_source_id == ["100"]
    assert report.removed_by_content == ["555", "tagged"]
    assert report.removed == 3 and report.kept == 3 and report.without_source_id == 2
    assert len(report.unreadable) == 1 and report.unreadable[0].startswith("text: ")
    assert (
        "overlap filter: removed 3 of 6 clip(s) (1 by source id, 2 by audio content) that match Clotho test "
        "(4 reference clips); 2 clip(s) had no source id, 1 could not be hashed." in caplog.text
    )
    assert "kept 1 clip(s) whose audio could not be hashed" in caplog.text
    record = corpus_provenance(filtered)["filters"][0]
    assert record["name"] == "overlap" and record["removed_by_content"] == 2 and record["clips_after"] == 3
    assert record["reference"] == ["Clotho test"] and record["clips_checked"] == 6
    assert corpus_provenance(train)["filters"] == []
    DatasetDict({"train": filtered}).save_to_disk(str(tmp_path / "saved"))
    assert corpus_provenance(load_from_disk(str(tmp_path / "saved"))["train"])["filters"] == [record]


def test_one_criterion_a_block_list_and_a_dataset_dict(corpora, tmp_path):
    reference, train, _, _ = corpora
    by_id, report = remove_overlap(train, reference, by=["source_id"])
    assert report.removed_by_content == [] and by_id["audio_id"] == ["555", "tagged", "cut", "other", "text"]
    by_content, report = remove_overlap(train, reference, by=["content"])
    assert report.removed_by_source_id == [] and report.removed_by_content == ["555", "tagged"]
    blocklist = tmp_path / "blacklist_exclude_test_ac.json"
    blocklist.write_text(json.dumps({"AudioSet": ["Yb0RFKhbpFJA.wav"], "FreeSound": ["888", "Not found"]}))
    assert read_wavcaps_blocklist(blocklist) == {"youtube:b0RFKhbpFJA", "freesound:888"}
    filtered, reports = remove_overlap(
        DatasetDict({"train": train}), exclude_source_ids=read_wavcaps_blocklist(blocklist), by=["source_id"]
    )
    assert filtered["train"]["audio_id"] == ["100", "555", "tagged", "cut", "text"]
    assert reports["train"].reference == ["2 blocked source ids"]


def test_bad_arguments(corpora, tmp_path):
    reference, train, _, _ = corpora
    with pytest.raises(ValueError, match=r"by=\['hash'\]: choose from \['source_id', 'content'\]"):
        remove_overlap(train, reference, by=["hash"])
    with pytest.raises(ValueError, match="Give reference datasets and/or exclude_source_ids"):
        remove_overlap(train, [])
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"Clotho": ["1"]}))
    with pytest.raises(
        ValueError, match=r"unknown list\(s\) \['Clotho'\]; expected 'AudioSet' and/or 'FreeSound'"
    ):
        read_wavcaps_blocklist(path)


def _pcm16(seed: int, frames: int = 4410) -> np.ndarray:
    """16-bit sample values, as int32 (room for the shifts below)."""
    return np.random.default_rng(seed).integers(-(2**15), 2**15, frames).astype(np.int32)


@pytest.mark.parametrize(
    ("suffix", "subtype", "first", "second"),
    [
        # Float samples below one 16-bit step: read as 16-bit integers, both were all zeros.
        ("wav", "FLOAT", _waveform(0) * 1e-5, _waveform(1) * 1e-5),
        ("wav", "FLOAT", _waveform(0), _waveform(1)),
        ("wav", "DOUBLE", _waveform(0).astype(np.float64), _waveform(1).astype(np.float64)),
        # 24- and 32-bit samples that differ only below the top 16 bits.
        ("flac", "PCM_24", _pcm16(0) << 16, (_pcm16(0) << 16) + (0x55 << 8)),
        ("wav", "PCM_24", _pcm16(0) << 16, (_pcm16(0) << 16) + (1 << 8)),
        ("wav", "PCM_32", _pcm16(0) << 16, (_pcm16(0) << 16) + 1),
    ],
)
def test_content_hash_tells_apart_files_that_differ_in_any_sample(tmp_path, suffix, subtype, first, second):
    paths = [tmp_path / f"first.{suffix}", tmp_path / f"second.{suffix}"]
    for path, samples in zip(paths, (first, second)):
        soundfile.write(path, samples, 44100, subtype=subtype)
        assert soundfile.info(path).subtype == subtype
    assert audio_content_hash(paths[0]) != audio_content_hash(paths[1])
    assert audio_content_hash(paths[0]) == audio_content_hash({"bytes": paths[0].read_bytes(), "path": None})


def test_content_hash_matches_the_same_samples_at_any_bit_depth_and_container(tmp_path):
    """The same sample values match whatever the file stores them as (16-bit WAV, 24-bit FLAC, 32-bit
    integers, float, double); one changed sample, another rate or channel layout does not."""
    values = _pcm16(4)
    stored = {
        "pcm16.wav": (values.astype(np.int16), "PCM_16"),
        "pcm24.flac": (values << 16, "PCM_24"),
        "pcm24.wav": (values << 16, "PCM_24"),
        "pcm32.wav": (values << 16, "PCM_32"),
        "float.wav": ((values / 2**15).astype(np.float32), "FLOAT"),
        "double.wav": (values / 2**15, "DOUBLE"),
    }
    for name, (samples, subtype) in stored.items():
        soundfile.write(tmp_path / name, samples, 44100, subtype=subtype)
    assert len({audio_content_hash(tmp_path / name) for name in stored}) == 1
    # 32-bit values that float32 cannot hold (hashed as float64) match their double twin only.
    wide = (values << 16) + 1
    soundfile.write(tmp_path / "wide32.wav", wide, 44100, subtype="PCM_32")
    soundfile.write(tmp_path / "wide double.wav", wide / 2**31, 44100, subtype="DOUBLE")
    assert audio_content_hash(tmp_path / "wide32.wav") == audio_content_hash(tmp_path / "wide double.wav")
    assert audio_content_hash(tmp_path / "wide32.wav") != audio_content_hash(tmp_path / "pcm32.wav")
    changed = values.copy()
    changed[2000] += 1
    soundfile.write(tmp_path / "changed.wav", (changed / 2**15).astype(np.float32), 44100, subtype="FLOAT")
    soundfile.write(tmp_path / "rate.wav", values.astype(np.int16), 48000, subtype="PCM_16")
    soundfile.write(tmp_path / "stereo.wav", values.astype(np.int16).reshape(-1, 2), 44100, subtype="PCM_16")
    reference = audio_content_hash(tmp_path / "pcm16.wav")
    for name in ("changed.wav", "rate.wav", "stereo.wav"):
        assert audio_content_hash(tmp_path / name) != reference, name
    # A float file's negative zero is the integer file's zero.
    zeros = np.zeros(4410, np.float32)
    soundfile.write(tmp_path / "zeros.wav", zeros.astype(np.int16), 44100, subtype="PCM_16")
    soundfile.write(tmp_path / "negative zeros.wav", -zeros, 44100, subtype="FLOAT")
    assert np.signbit(soundfile.read(tmp_path / "negative zeros.wav")[0]).all()
    assert audio_content_hash(tmp_path / "zeros.wav") == audio_content_hash(tmp_path / "negative zeros.wav")


def test_remove_overlap_keeps_distinct_float_wav_files_of_one_length(tmp_path):
    """Float WAV files of one length were all one hash to the filter, which removed every training file
    as a copy of any reference file (silent data loss); it removes the true copy only."""
    for index in range(4):
        soundfile.write(tmp_path / f"{index}.wav", _waveform(index), 44100, subtype="FLOAT")
    reference = _dataset([("0.wav", tmp_path / "0.wav", None)], "Clotho", "test")
    train = _dataset(
        [(str(index), tmp_path / f"{index}.wav", None) for index in range(4)], "WavCaps", "train"
    )
    filtered, report = remove_overlap(train, reference, by=["content"], num_threads=2)
    assert report.removed_by_content == ["0"]
    assert filtered["audio_id"] == ["1", "2", "3"]
