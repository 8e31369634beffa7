"""synthesize_moments: every written window holds its clip at its stated time and level, reproducibly."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile
from ranking_margin import clear_best_among
from scipy.signal import correlate

from hf_atr.data.audio import decode_audio
from hf_atr.data.corpus_utils import audio_value, build_split
from hf_atr.data.moment_synthesis import audio_files, event_gain, synthesize_moments
from hf_atr.data.moments import load_moments
from hf_atr.data.schema import atr_features

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

RATE = 8000


def _noise_burst(seconds: float, seed: int) -> np.ndarray:
    """Independent noise under a smooth envelope: its cross-correlation with anything else is flat, so the peak
    against the recording marks where it was laid."""
    rng = np.random.default_rng(seed)
    samples = int(seconds * RATE)
    envelope = np.sin(np.pi * (np.arange(samples) + 0.5) / samples) ** 0.5
    return (0.3 * rng.standard_normal(samples) * envelope).astype(np.float32)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources")
    rows = []
    for k, seconds in enumerate([0.5, 0.8, 1.0, 0.6, 1.2, 0.7]):
        path = folder / f"clip {k}.wav"
        soundfile.write(path, _noise_burst(seconds, seed=100 + k), RATE, subtype="FLOAT")
        rows.append(
            {
                "audio": audio_value(path),
                "audio_id": path.name,
                "captions": [f"sound {k} first caption", f"sound {k} second caption"],
                "source_id": f"freesound:{1000 + k}",
            }
        )
    return build_split(rows, atr_features(with_source_id=True))


@pytest.fixture(scope="module")
def backgrounds(tmp_path_factory):
    """Two 2-s backgrounds of steady noise at different levels: every recording of 4–6 s joins several."""
    folder = tmp_path_factory.mktemp("backgrounds")
    for k in range(2):
        noise = np.random.default_rng(k).standard_normal(2 * RATE) * 0.05
        soundfile.write(folder / f"bg{k}.flac", noise.astype(np.float32), RATE)
    return folder


def _synthesize(sources, backgrounds, out: Path, **options):
    settings = dict(duration_range=(4.0, 6.0), events_range=(1, 4), snr_db=(0.0, 12.0), sampling_rate=RATE)
    folders = backgrounds if isinstance(backgrounds, list) else [backgrounds]
    return synthesize_moments(sources, folders, out, 6, **{**settings, **options})


@pytest.fixture(scope="module")
def synthesized(sources, backgrounds, tmp_path_factory):
    out = tmp_path_factory.mktemp("moments")
    report = _synthesize(sources, backgrounds, out, seed=3)
    lines = [json.loads(line) for line in report.annotations.read_text(encoding="utf-8").splitlines()]
    return report, lines


def test_every_window_holds_its_clip_at_its_stated_position_and_level(synthesized, sources):
    report, lines = synthesized
    clips = {row["audio_id"]: decode_audio(row["audio"], RATE) for row in sources}
    by_recording: dict[str, list[dict]] = {}
    for line in lines:
        by_recording.setdefault(line["vid"], []).append(line)
    for vid, queries in by_recording.items():
        recording, rate = soundfile.read(report.audio_dir / f"{vid}.flac", dtype="float64")
        assert rate == RATE and len(recording) == round(queries[0]["duration"] * RATE)
        outside = np.ones(len(recording), dtype=bool)
        for query in queries:
            [[start, end]] = query["relevant_windows"]
            clip = clips[query["source_audio_id"]].astype(np.float64)
            assert end - start == pytest.approx(len(clip) / RATE)
            # Cross-correlation over the whole recording peaks within one sample of the stated start, by a wide
            # margin over every lag further away.
            correlation = correlate(recording, clip, mode="valid", method="fft")
            near_start = np.abs(np.arange(len(correlation)) - start * RATE) <= 1
            peak = clear_best_among(correlation, near_start)
            assert abs(peak - start * RATE) <= 1, (query["qid"], peak, start * RATE)
            outside[peak : peak + len(clip)] = False
        background_power = np.mean(recording[outside] ** 2)
        for query in queries:
            clip = clips[query["source_audio_id"]].astype(np.float64)
            first = round(query["relevant_windows"][0][0] * RATE)
            gain = (
                recording[first : first + len(clip)] @ clip / (clip @ clip)
            )  # least-squares gain of the clip
            snr = 10 * np.log10(gain**2 * np.mean(clip**2) / background_power)
            assert snr == pytest.approx(query["snr_db"], abs=0.3)  # Eq. (1), measured on the written file


def test_windows_do_not_overlap_and_counts_are_in_range(synthesized):
    report, lines = synthesized
    assert report.recordings == 6 and report.queries == len(lines) and not report.skipped
    recordings = {}
    for line in lines:
        recordings.setdefault(line["vid"], []).append(line)
        assert 0.0 <= line["snr_db"] <= 12.0 and line["source_id"].startswith("freesound:")
        assert line["query"].startswith(
            line["source_audio_id"].replace("clip ", "sound ").removesuffix(".wav")
        )
    for vid, queries in recordings.items():
        assert 4.0 <= queries[0]["duration"] <= 6.0 and 1 <= len(queries) <= 4
        assert [query["qid"] for query in queries] == [f"{vid}_{n}" for n in range(1, len(queries) + 1)]
        assert len({query["source_audio_id"] for query in queries}) == len(queries)
        windows = sorted(query["relevant_windows"][0] for query in queries)
        assert windows[0][0] >= 0 and windows[-1][1] <= queries[0]["duration"]
        assert all(left[1] <= right[0] for left, right in zip(windows, windows[1:]))


def test_the_output_loads_as_moments(synthesized):
    report, lines = synthesized
    moments = load_moments(report.annotations)
    assert moments["qid"] == [line["qid"] for line in lines]
    assert moments["windows"] == [line["relevant_windows"] for line in lines]
    assert moments["source_audio_id"] == [line["source_audio_id"] for line in lines]
    assert moments["source_id"] == [line["source_id"] for line in lines]


def test_the_seed_fixes_the_output(synthesized, sources, backgrounds, tmp_path):
    report, _ = synthesized
    again = _synthesize(sources, backgrounds, tmp_path / "again", seed=3)
    assert again.annotations.read_text() == report.annotations.read_text()
    for file in sorted(report.audio_dir.iterdir()):
        np.testing.assert_array_equal(soundfile.read(again.audio_dir / file.name)[0], soundfile.read(file)[0])
    other = _synthesize(sources, backgrounds, tmp_path / "other", seed=4)
    assert other.annotations.read_text() != report.annotations.read_text()


def test_splits_built_with_one_seed_differ(synthesized, sources, backgrounds, tmp_path):
    """A test split made with the training split's seed repeats none of its recordings (lengths, event times)."""
    _, train = synthesized
    test = [
        json.loads(line)
        for line in _synthesize(sources, backgrounds, tmp_path, seed=3, split="test")
        .annotations.read_text()
        .splitlines()
    ]
    assert all(line["vid"].startswith("test_") for line in test)

    def layout(lines):
        return {
            (line["vid"].split("_")[1], line["duration"], tuple(map(tuple, line["relevant_windows"])))
            for line in lines
        }

    assert not layout(train) & layout(test)


def test_event_gain_puts_the_event_at_the_snr():
    event = np.random.default_rng(0).standard_normal(1000)
    gain = event_gain(event, background_power=0.25, snr_db=6.0)
    assert 10 * np.log10(np.mean((gain * event) ** 2) / 0.25) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="the event is silent"):
        event_gain(np.zeros(10), 1.0, 0.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"duration_range": (6.0, 4.0)}, r"duration_range=\(6\.0, 4\.0\): expected 0 < shortest <= longest"),
        ({"events_range": (0, 2)}, r"events_range=\(0, 2\): expected 1 <= fewest <= most events"),
        ({"events_range": (1, 7)}, r"6 source clip\(s\) cannot give 7 distinct events in one recording"),
        ({"snr_db": (5.0, 1.0)}, r"snr_db=\(5\.0, 1\.0\): expected lowest <= highest"),
        ({"sampling_rate": 0}, r"sampling_rate=0 is not a positive number of Hz"),
        ({"duration_range": (0.2, 0.3)}, r"No readable source clip fits in a recording of 0\.\d+ s"),
    ],
)
def test_bad_arguments_are_refused_with_their_value(sources, backgrounds, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        _synthesize(sources, backgrounds, tmp_path, **options)


def test_bad_sources_and_backgrounds(sources, backgrounds, tmp_path, caplog):
    with pytest.raises(ValueError, match=r"no column\(s\) \['captions'\]"):
        _synthesize(sources.remove_columns("captions"), backgrounds, tmp_path)
    with pytest.raises(
        FileNotFoundError, match=r"Background .*nowhere is neither an audio file nor a folder"
    ):
        synthesize_moments(sources, [tmp_path / "nowhere"], tmp_path, 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"No readable background audio in \["):
        synthesize_moments(sources, [tmp_path / "empty"], tmp_path, 1)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF not audio")
    assert audio_files([backgrounds, broken])[-1] == broken
    # An unreadable clip is skipped and reported; under missing="error" it stops the run, named.
    bad_rows = sources.to_list()
    bad_rows[0]["audio"] = audio_value(broken)
    bad = build_split(bad_rows, atr_features(with_source_id=True))
    with caplog.at_level(logging.WARNING):
        report = _synthesize(bad, [backgrounds, broken], tmp_path / "skip", events_range=(1, 4))
    assert [problem.split(": ")[0] for problem in report.skipped] == [str(broken), "clip 0.wav"]
    assert "skipped 2 clip(s)/row(s)" in caplog.text
    assert all(json.loads(line)["source_audio_id"] != "clip 0.wav" for line in report.annotations.open())
    with pytest.raises(ValueError, match=r"clip 0\.wav: the audio is unreadable or corrupt"):
        _synthesize(bad, [backgrounds], tmp_path / "error", missing="error")
