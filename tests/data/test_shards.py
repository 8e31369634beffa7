"""WebDataset / parquet shards: written from the shared schema, read back streamed, without torchcodec."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import soundfile
from datasets import Dataset, IterableDataset

from hf_atr.data.audio import decode_audio, encode_wav
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.schema import atr_features, finalize_audio_column
from hf_atr.data.shards import SIZES_FILE, load_audio_text_shards, write_audio_text_shards

RATE = 16000


def _flac(seed: int) -> bytes:
    buffer = io.BytesIO()
    waveform = np.random.default_rng(seed).uniform(-0.5, 0.5, 1600).astype(np.float32)
    soundfile.write(buffer, waveform, RATE, format="FLAC")
    return buffer.getvalue()


def _clips(count: int, translations: bool = False) -> Dataset:
    rows = {"audio": [], "audio_id": [], "captions": [], "label": []}
    if translations:
        rows["translations"] = []
    for index in range(count):
        data = _flac(index) if index % 2 else encode_wav(np.full(800, 0.1 * index, np.float32), RATE)
        rows["audio"].append({"bytes": data, "path": f"clip.{index}.wav"})
        rows["audio_id"].append(f"clip.{index}")  # a dot, which a WebDataset key could not hold
        rows["captions"].append([f"sound {index}", f"again {index}"])
        rows["label"].append(f"class{index % 3}")
        if translations:
            rows["translations"].append({"fra": None if index == 1 else [f"son {index}", f"encore {index}"]})
    features = atr_features(["fra"] if translations else [], with_label=True)
    return finalize_audio_column(Dataset.from_dict(rows, features=features))


@pytest.mark.parametrize("shard_format", ["webdataset", "parquet"])
def test_shards_stream_back_the_clips_in_order(tmp_path, shard_format):
    clips = _clips(7, translations=True)
    report = write_audio_text_shards(clips, tmp_path, shard_format=shard_format, num_shards=3)
    assert [path.name.split(".")[0] for path in report.files] == ["shard-00000", "shard-00001", "shard-00002"]
    assert report.clips == 7 and report.skipped == []
    stream = load_audio_text_shards(report.files, translation_languages=["fra"])
    assert isinstance(stream, IterableDataset) and stream.n_shards == 3
    rows = list(stream)
    assert [row["audio_id"] for row in rows] == clips["audio_id"]
    assert [row["captions"] for row in rows] == clips["captions"]
    assert rows[1]["translations"] == {"fra": None} and rows[2]["translations"]["fra"] == [
        "son 2",
        "encore 2",
    ]
    for row, clip in zip(rows, clips):
        np.testing.assert_array_equal(decode_audio(row["audio"]), decode_audio(clip["audio"]))
    assert sorted(load_audio_text_shards(report.files, streaming=False).column_names) == [
        "audio",
        "audio_id",
        "captions",
    ]


def test_webdataset_shards_follow_the_laion_clap_layout(tmp_path):
    report = write_audio_text_shards(_clips(4), tmp_path, clips_per_shard=3)
    # ceil(4 / 3) = 2 shards, balanced
    assert json.loads((tmp_path / SIZES_FILE).read_text()) == {"shard-00000.tar": 2, "shard-00001.tar": 2}
    with tarfile.open(report.files[0]) as tar:
        names = tar.getnames()
        metadata = json.load(tar.extractfile("000000001.json"))
    assert names[:4] == ["000000000.wav", "000000000.json", "000000001.flac", "000000001.json"]
    assert metadata == {
        "text": ["sound 1", "again 1"],
        "audio_id": "clip.1",
        "original_data": {"label": "class1"},
    }


def test_foreign_laion_shards_are_read_by_key_and_extra_fields_ignored(tmp_path):
    path = tmp_path / "laion-0.tar"
    with tarfile.open(path, "w") as tar:
        for name, payload in (
            ("17.flac", _flac(0)),
            ("17.json", json.dumps({"text": ["A door creaks."], "tag": ["door"], "original_data": {"x": 1}})),
            ("18.json", json.dumps({"text": ["no audio here"]})),
        ):
            data = payload if isinstance(payload, bytes) else payload.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    rows = iter(load_audio_text_shards(str(path)))
    first = next(rows)
    assert first["audio_id"] == "17" and first["captions"] == ["A door creaks."]
    assert first["audio"]["path"] == "17.flac" and len(decode_audio(first["audio"])) == 1600
    with pytest.raises(ValueError, match=r"laion-0.tar: sample '18' has no audio member \(one of flac, wav"):
        next(rows)


def test_bad_clips_are_skipped_and_reported_or_raise(tmp_path):
    rows = _clips(3).to_list()
    rows[1]["audio"] = {"bytes": b"not audio", "path": "clip.1.wav"}
    broken = finalize_audio_column(Dataset.from_list(rows, features=atr_features(with_label=True)))
    with pytest.raises(AudioDecodeError, match="Clip 'clip.1': the audio file is unreadable or corrupt"):
        write_audio_text_shards(broken, tmp_path / "strict")
    report = write_audio_text_shards(broken, tmp_path / "lenient", missing="skip", shard_format="parquet")
    assert report.clips == 2 and [audio_id for audio_id, _ in report.skipped] == ["clip.1"]
    assert [row["audio_id"] for row in load_audio_text_shards(report.files)] == ["clip.0", "clip.2"]


def test_bad_arguments_are_named(tmp_path):
    clips = _clips(2)
    with pytest.raises(ValueError, match="shard_format must be one of"):
        write_audio_text_shards(clips, tmp_path, shard_format="zip")
    with pytest.raises(ValueError, match=r"num_shards must be an int in \[1, 2\]"):
        write_audio_text_shards(clips, tmp_path, num_shards=3)
    with pytest.raises(ValueError, match=r"lacks the shared-schema column\(s\) \['captions'\]"):
        write_audio_text_shards(clips.remove_columns("captions"), tmp_path)
    with pytest.raises(ValueError, match=r"must all be .tar \(WebDataset\) or all .parquet"):
        load_audio_text_shards([str(tmp_path / "a.tar"), str(tmp_path / "b.parquet")])
    clips.remove_columns("captions").to_parquet(str(tmp_path / "plain.parquet"))
    with pytest.raises(ValueError, match=r"lack the shared-schema column\(s\) \['captions'\]"):
        load_audio_text_shards(str(tmp_path / "plain.parquet"))
