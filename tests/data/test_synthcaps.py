from __future__ import annotations

import csv
import re

import numpy as np
import pytest
import soundfile

from hf_atr.data.audio import decode_audio
from hf_atr.data.schema import LANGUAGES, class_list, corpus_provenance, describe_dataset, official_clip_count
from hf_atr.data.synthcaps import (
    load_synthcaps,
    write_audiocaps_layout,
    write_clotho_layout,
    write_esc50_layout,
)
from hf_atr.data.synthcaps_audio import SOUND_EVENTS, generate_clip
from hf_atr.data.synthcaps_grammar import (
    GRAMMARS,
    NUM_CAPTION_STYLES,
    SoundOccurrence,
    caption_scene,
    event_phrase,
)

RATE = 16000


@pytest.fixture(scope="module")
def corpus():
    return load_synthcaps(26, 3, 4)


def _read_csv(path):
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


# ---------------------------------------------------------------- dataset


def test_schema_and_naming(corpus):
    assert list(corpus) == ["train", "validation", "test"]
    assert [len(corpus[split]) for split in corpus] == [26, 3, 4]
    row = corpus["train"][12]
    assert row["audio_id"] == "synthcaps_train_000012"
    assert row["audio"]["path"] == "synthcaps_train_000012.wav"
    assert set(row["translations"]) == set(LANGUAGES) - {"eng"}
    assert row["label"] in SOUND_EVENTS
    assert corpus["train"].features["audio"].decode is False


def test_every_split_records_its_provenance_with_the_generated_size_as_official(corpus):
    provenance = corpus_provenance(corpus["test"])
    assert provenance == {
        "corpus": "synthcaps", "layout": "in memory, from hf_atr.data.synthcaps.load_synthcaps", "split": "test",
        "corpus_split": "test", "metadata": [], "official_release": "generated with seed 0, 2-s clips at 16000 Hz",
        "official_clips": 4, "clips_found": 4, "skipped": 0, "filters": [], "classes": list(SOUND_EVENTS),
    }  # fmt: skip
    # a split holding 4 clips of 13 classes still records all 13: zero-shot scores against the whole set
    assert class_list(provenance) == list(SOUND_EVENTS) and len(set(corpus["test"]["label"])) < len(
        SOUND_EVENTS
    )
    assert official_clip_count(corpus_provenance(corpus["train"])) == 26
    assert describe_dataset(corpus["validation"], "x") == "synthcaps validation"
    other = corpus_provenance(load_synthcaps(0, 0, 2, seed=5, duration=1.0, sampling_rate=22050)["test"])
    assert other["official_release"] == "generated with seed 5, 1-s clips at 22050 Hz"


def test_deterministic_and_independent_of_split_size(corpus):
    again = load_synthcaps(3, 1, 1)
    for index in range(3):
        assert again["train"][index]["audio"]["bytes"] == corpus["train"][index]["audio"]["bytes"]
        assert again["train"][index]["captions"] == corpus["train"][index]["captions"]
        assert again["train"][index]["translations"] == corpus["train"][index]["translations"]
    other_seed = load_synthcaps(3, 0, 0, seed=1)
    assert other_seed["train"][1]["audio"]["bytes"] != corpus["train"][1]["audio"]["bytes"]
    # Splits are generated independently.
    assert corpus["validation"][1]["audio"]["bytes"] != corpus["train"][1]["audio"]["bytes"]


def test_every_event_class_is_produced(corpus):
    assert set(corpus["train"]["label"]) == set(SOUND_EVENTS)
    heard = {
        occurrence.event
        for index in range(26)
        for part in generate_clip("train", index).scene
        for occurrence in part
    }
    assert len(SOUND_EVENTS) >= 12
    assert heard == set(SOUND_EVENTS)


def test_five_distinct_captions_in_every_language(corpus):
    for split in corpus:
        for row in corpus[split]:
            english = row["captions"]
            assert len(english) == NUM_CAPTION_STYLES == len(set(english))
            assert all(caption.strip() for caption in english)
            for language, captions in row["translations"].items():
                assert len(captions) == NUM_CAPTION_STYLES == len(set(captions)), (language, captions)
                assert all(caption.strip() for caption in captions)
                assert all(caption != original for caption, original in zip(captions, english)), (
                    language,
                    captions,
                )


def _keyword(event: str) -> str:
    return re.sub(r"^an? ", "", event_phrase(event))


def test_english_captions_describe_the_scene():
    for index in range(39):
        clip = generate_clip("validation", index)
        occurrences = [occurrence for part in clip.scene for occurrence in part]
        loud = sum(occurrence.loudness == "loud" for occurrence in occurrences)
        quiet = sum(occurrence.loudness == "quiet" for occurrence in occurrences)
        assert clip.label in {occurrence.event for occurrence in clip.scene[0]}
        for part in clip.scene:
            # Overlaps are named in a canonical order (louder first), since the audio has no order there.
            key = [
                (occurrence.loudness != "loud", SOUND_EVENTS.index(occurrence.event)) for occurrence in part
            ]
            assert key == sorted(key)
        for caption in clip.captions["eng"]:
            positions = [caption.lower().index(_keyword(occurrence.event)) for occurrence in occurrences]
            # Events are named in the order of the scene (parts in sequence, overlapping events a then b).
            assert positions == sorted(positions), caption
            assert len(re.findall(r"\bloud\b", caption, re.IGNORECASE)) == loud, caption
            assert len(re.findall(r"\bquiet\b", caption, re.IGNORECASE)) == quiet, caption
        if len(clip.scene) > 1:
            assert all(
                re.search(r"followed by|then|after that|ends with", caption)
                for caption in clip.captions["eng"]
            )
        if any(len(part) == 2 for part in clip.scene):
            assert all(
                re.search(r"together with|at the same time|mixed with| over |accompanied by", caption)
                for caption in clip.captions["eng"]
            )


def test_a_siren_scene_says_siren_in_every_language():
    scene = ((SoundOccurrence("siren", "loud"), SoundOccurrence("white_noise", "quiet")),)
    names = {
        "eng": "siren",
        "fra": "sirène",
        "deu": "Sirene",
        "spa": "sirena",
        "nld": "sirene",
        "cat": "sirena",
        "jpn": "サイレン",
        "zho": "警笛",
    }
    for language, name in names.items():
        assert all(name in caption for caption in caption_scene(scene, language)), language


def test_audio_is_finite_mono_at_the_right_rate_and_length(corpus):
    for row in corpus["test"]:
        info = soundfile.info(_bytes_file(row["audio"]["bytes"]))
        assert (info.samplerate, info.channels, info.frames) == (RATE, 1, 2 * RATE)
        waveform = decode_audio(row["audio"], RATE, source=row["audio_id"])
        assert np.isfinite(waveform).all() and np.abs(waveform).max() <= 1.0
        assert waveform.std() > 1e-3 or row["label"] == "silence"


def test_silence_clip_is_silent(corpus):
    silent = [row for row in corpus["train"] if row["label"] == "silence"]
    assert silent
    for row in silent:
        assert np.abs(decode_audio(row["audio"])).max() == 0.0
        assert all("silence" in caption.lower() for caption in row["captions"])


def _bytes_file(data: bytes):
    import io

    return io.BytesIO(data)


def test_language_selection():
    english_only = load_synthcaps(2, 0, 0, languages=("eng",))
    assert "translations" not in english_only["train"].features
    two = load_synthcaps(2, 0, 0, languages=("jpn", "eng"))
    assert list(two["train"][0]["translations"]) == ["jpn"]
    assert list(load_synthcaps(1, 0, 0, languages="fra")["train"][0]["translations"]) == ["fra"]
    assert list(load_synthcaps(1, 0, 0, languages=("ja", "en"))["train"][0]["translations"]) == ["jpn"]
    with pytest.raises(ValueError, match=r"no captions in \['kor'\]"):
        load_synthcaps(1, 0, 0, languages=("eng", "ko"))
    with pytest.raises(ValueError, match="Language code 'xx' is not an ISO 639-1"):
        load_synthcaps(1, 0, 0, languages=("eng", "xx"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_train": -1}, "num_train must be a non-negative int"),
        ({"duration": 0.1}, "duration must be at least"),
        ({"sampling_rate": 8000}, "sampling_rate must be at least"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_synthcaps(**{"num_train": 1, "num_validation": 0, "num_test": 0, **kwargs})


# ---------------------------------------------------------------- grammars


def test_grammars_cover_the_schema_languages_and_every_event():
    assert tuple(GRAMMARS) == LANGUAGES
    for language in LANGUAGES:
        for event in SOUND_EVENTS:
            loudness = None if event == "silence" else "quiet"
            captions = caption_scene(((SoundOccurrence(event, loudness),),), language)
            assert len(set(captions)) == NUM_CAPTION_STYLES, (language, event)


def test_grammatical_details():
    siren = (SoundOccurrence("siren", "loud"),)
    low = (SoundOccurrence("low_tone", "quiet"),)
    noise = (SoundOccurrence("white_noise", "quiet"),)
    assert caption_scene((siren,), "fra")[4] == "L'extrait ne contient qu'une sirène forte."
    assert caption_scene((siren, low), "fra")[0] == "Une sirène forte, suivie d'un son grave et faible."
    assert (
        caption_scene((noise, siren), "fra")[2]
        == "Un enregistrement de bruit blanc faible, puis d'une sirène forte."
    )
    assert (
        caption_scene((siren, low), "deu")[4]
        == "Der Clip beginnt mit einer lauten Sirene und endet mit einem leisen tiefen Ton."
    )
    assert caption_scene((low,), "deu")[4] == "Der Clip enthält nur einen leisen tiefen Ton."
    assert (
        caption_scene((noise, siren), "deu")[2]
        == "Eine Aufnahme von leisem weißem Rauschen, danach von einer lauten Sirene."
    )
    assert caption_scene((siren, low), "spa")[0] == "Una sirena fuerte, seguida de un tono grave y suave."
    assert caption_scene(((SoundOccurrence("buzz", "loud"),),), "nld")[0] == "Een hard zoemend geluid."
    assert caption_scene((siren,), "cat")[2] == "Un enregistrament d'una sirena forta."


@pytest.mark.parametrize(
    ("scene", "message"),
    [
        ((), "1 to 3 parts"),
        (((SoundOccurrence("siren", "loud"),),) * 4, "1 to 3 parts"),
        (((SoundOccurrence("siren", "loud"),) * 3,), "1 or 2 overlapping events"),
        (((SoundOccurrence("siren", None),),), "needs loudness in"),
        (((SoundOccurrence("silence", None), SoundOccurrence("siren", "loud")),), "Silence cannot overlap"),
        (((SoundOccurrence("bird", "loud"),),), "Unknown SynthCaps sound event 'bird'"),
    ],
)
def test_invalid_scenes_are_rejected(scene, message):
    with pytest.raises(ValueError, match=message):
        caption_scene(scene)


def test_unknown_language_and_event_phrase():
    with pytest.raises(ValueError, match="No SynthCaps grammar for language 'kor'"):
        caption_scene(((SoundOccurrence("siren", "loud"),),), "kor")
    assert event_phrase("siren") == "a siren"
    assert event_phrase("white_noise") == "white noise"
    assert len({event_phrase(event) for event in SOUND_EVENTS}) == len(SOUND_EVENTS)
    with pytest.raises(ValueError, match="Unknown SynthCaps sound event"):
        event_phrase("bird")


# ---------------------------------------------------------------- on-disk layouts


def test_audiocaps_official_layout(corpus, tmp_path):
    root = write_audiocaps_layout(corpus, tmp_path, filename_pattern="Y{youtube_id}_{start_time}.wav")
    train, val = _read_csv(root / "train.csv"), _read_csv(root / "val.csv")
    assert train[0] == val[0] == ["audiocap_id", "youtube_id", "start_time", "caption"]
    assert len(train) - 1 == 26 and len(val) - 1 == 3 * 5 and len(_read_csv(root / "test.csv")) - 1 == 4 * 5
    assert [row[3] for row in train[1:3]] == [
        corpus["train"][0]["captions"][0],
        corpus["train"][1]["captions"][0],
    ]
    assert [row[3] for row in val[1:6]] == corpus["validation"][0]["captions"]
    all_ids = [row[0] for name in ("train", "val", "test") for row in _read_csv(root / f"{name}.csv")[1:]]
    assert len(set(all_ids)) == len(all_ids) and all(audiocap_id.isdigit() for audiocap_id in all_ids)
    for _, youtube_id, start_time, _ in val[1:]:
        assert re.fullmatch(r"[A-Za-z0-9_-]{11}", youtube_id) and start_time.isdigit()
        path = root / "audio" / "val" / f"Y{youtube_id}_{start_time}.wav"
        assert soundfile.info(path).frames == 2 * RATE
    french = _read_csv(root / "val_fra.csv")
    assert [row[:3] for row in french] == [row[:3] for row in val]
    assert [row[3] for row in french[1:6]] == corpus["validation"][0]["translations"]["fra"]
    assert (root / "train_zho.csv").is_file() and len(_read_csv(root / "train_zho.csv")) == 27
    assert sorted(p.name for p in (root / "audio").iterdir()) == ["test", "train", "val"]
    assert len(list((root / "audio" / "train").iterdir())) == 26


def test_audiocaps_wavcaps_layout(corpus, tmp_path):
    root = write_audiocaps_layout(corpus, tmp_path, variant="wavcaps")
    train, test = _read_csv(root / "train.csv"), _read_csv(root / "test.csv")
    assert train[0] == ["file_name", "caption"] and len(train) == 27
    assert test[0] == ["file_name", "caption_1", "caption_2", "caption_3", "caption_4", "caption_5"]
    assert test[1][1:] == corpus["test"][0]["captions"]
    assert all((root / "audio" / "test" / row[0]).is_file() for row in test[1:])
    assert _read_csv(root / "test_deu.csv")[1] == [test[1][0], *corpus["test"][0]["translations"]["deu"]]


def test_audiocaps_layout_rejects_bad_arguments(corpus, tmp_path):
    with pytest.raises(ValueError, match="variant must be"):
        write_audiocaps_layout(corpus, tmp_path, variant="clotho")
    with pytest.raises(ValueError, match="may only use the fields"):
        write_audiocaps_layout(corpus, tmp_path, filename_pattern="{video}.wav")


def test_clotho_layout_survives_a_csv_round_trip(corpus, tmp_path):
    root = write_clotho_layout(corpus, tmp_path)
    for split, clotho_split in (
        ("train", "development"),
        ("validation", "validation"),
        ("test", "evaluation"),
    ):
        rows = _read_csv(root / f"clotho_captions_{clotho_split}.csv")
        assert rows[0] == ["file_name", "caption_1", "caption_2", "caption_3", "caption_4", "caption_5"]
        assert len(rows) - 1 == len(corpus[split])
        for row, clip in zip(rows[1:], corpus[split]):
            assert row[1:] == clip["captions"]
            assert (root / clotho_split / row[0]).read_bytes() == clip["audio"]["bytes"]
    names = [row[0] for row in _read_csv(root / "clotho_captions_development.csv")[1:]]
    assert any("," in name for name in names) and any('"' in name for name in names)
    assert any("'" in name for name in names) and all(" " in name for name in names)
    assert any(
        "," in caption
        for row in _read_csv(root / "clotho_captions_development.csv")[1:]
        for caption in row[1:]
    )
    raw = (root / "clotho_captions_development.csv").read_text(encoding="utf-8")
    assert '""' in raw  # embedded double quotes are escaped by doubling


def test_esc50_layout(tmp_path):
    root = write_esc50_layout(tmp_path, clips_per_class=2, duration=0.5)
    rows = _read_csv(root / "meta" / "esc50.csv")
    assert rows[0] == ["filename", "fold", "target", "category", "esc10", "src_file", "take"]
    body = rows[1:]
    assert len(body) == 2 * len(SOUND_EVENTS) and body == sorted(body, key=lambda row: row[0])
    assert {row[3] for row in body} == set(SOUND_EVENTS)
    assert all(SOUND_EVENTS[int(row[2])] == row[3] for row in body)
    assert {row[1] for row in body} == {"1", "2"} and {row[4] for row in body} == {"True", "False"}
    for filename, fold, _, _, _, src_file, take in body:
        assert filename == f"{fold}-{src_file}-{take}.wav"
        info = soundfile.info(root / "audio" / filename)
        assert (info.samplerate, info.channels, info.frames) == (44100, 1, 22050)
    folds = {
        row[1]
        for row in _read_csv(
            write_esc50_layout(tmp_path / "full", clips_per_class=5, duration=0.2) / "meta" / "esc50.csv"
        )[1:]
    }
    assert folds == {"1", "2", "3", "4", "5"}
    with pytest.raises(ValueError, match="clips_per_class must be a positive int"):
        write_esc50_layout(tmp_path, clips_per_class=0)
