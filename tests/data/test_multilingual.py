from __future__ import annotations

import csv
import hashlib
import json
import logging
import re
from pathlib import Path

import pytest

from hf_atr.data.audiocaps import load_audiocaps
from hf_atr.data.clotho import load_clotho
from hf_atr.data.corpus_utils import CorpusFormatError
from hf_atr.data.multilingual import load_translations
from hf_atr.data.synthcaps import load_synthcaps, write_audiocaps_layout, write_clotho_layout

SLOTS = [f"caption_{k}" for k in range(1, 6)]


@pytest.fixture(scope="module")
def synthcaps():
    return load_synthcaps(2, 3, 2, duration=0.5, languages=("eng", "fra", "deu", "jpn"))


@pytest.fixture
def clotho(tmp_path, synthcaps):
    """A Clotho-layout corpus and its base DatasetDict; per-language CSVs are written by the tests."""
    corpus = write_clotho_layout(synthcaps.remove_columns("translations"), tmp_path / "clotho")
    return corpus, load_clotho(corpus)


def _read(csv_path: Path) -> list[list[str]]:
    with csv_path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _write(csv_path: Path, rows: list[list[str]]) -> Path:
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return csv_path


def _clotho_translation_csv(path: Path, base, synthcaps, split: str, language: str) -> Path:
    rows = [["file_name", *SLOTS]]
    for audio_id, original in zip(base[split]["audio_id"], synthcaps[split]):
        rows.append([audio_id, *original["translations"][language]])
    return _write(path, rows)


def test_audiocaps_per_language_csvs_align_through_audiocap_id(tmp_path, synthcaps):
    corpus = write_audiocaps_layout(synthcaps, tmp_path)
    base = load_audiocaps(corpus)
    # Shuffled rows: the alignment must come from audiocap_id, not from the row order.
    shuffled = _read(corpus / "test_fra.csv")
    _write(corpus / "test_fra.csv", [shuffled[0], *reversed(shuffled[1:])])
    files = {
        "fra_Latn": {
            split: corpus / f"{name}_fra.csv" for split, name in [("train", "train"), ("test", "test")]
        },
        "deu": {"validation": corpus / "val_deu.csv"},
    }
    translated = load_translations(base, files)
    assert list(translated["test"].features["translations"]) == ["fra", "deu"]
    for split in ("train", "test"):
        for row, original in zip(translated[split], synthcaps[split]):
            expected = original["translations"]["fra"][: len(row["captions"])]
            assert row["translations"]["fra"] == expected
            assert row["translations"]["deu"] is None
    for row, original in zip(translated["validation"], synthcaps["validation"]):
        assert row["translations"] == {"fra": None, "deu": original["translations"]["deu"]}
    assert translated["test"]["captions"] == base["test"]["captions"]


def test_one_file_for_every_split_and_existing_translations_are_kept(tmp_path, synthcaps, caplog):
    corpus = write_audiocaps_layout(synthcaps, tmp_path)
    base = load_audiocaps(corpus)
    with caplog.at_level(logging.WARNING):
        french = load_translations(base, {"fra": corpus / "val_fra.csv"})
    assert french["train"]["translations"] == [{"fra": None}] * len(base["train"])
    assert "fra: 2 of 2 clip(s) of split 'train' have no complete translation" in caplog.text
    both = load_translations(french, {"jpn": {"validation": corpus / "val_jpn.csv"}})
    for row, original in zip(both["validation"], synthcaps["validation"]):
        assert row["translations"] == {
            language: original["translations"][language] for language in ("fra", "jpn")
        }
    with pytest.raises(ValueError, match=r"already has translations for \['fra'\]"):
        load_translations(french, {"fra_Latn": corpus / "val_fra.csv"})


def test_missing_or_blank_translation_gives_none_and_is_reported(tmp_path, synthcaps, caplog):
    corpus = write_audiocaps_layout(synthcaps, tmp_path)
    base = load_audiocaps(corpus, splits=["val"])
    rows = _read(corpus / "val_fra.csv")
    rows[2][3] = "  "  # a blank caption of clip 0
    del rows[7]  # a caption row of clip 1 (rows 6-10)
    _write(corpus / "val_fra.csv", rows)
    with caplog.at_level(logging.WARNING):
        translated = load_translations(base, {"fra": corpus / "val_fra.csv"})
    column = translated["validation"]["translations"]
    assert column[0] == {"fra": None} and column[1] == {"fra": None}
    assert column[2]["fra"] == synthcaps["validation"][2]["translations"]["fra"]
    ids = base["validation"]["audio_id"]
    assert (
        "2 of 3 clip(s) of split 'validation'" in caplog.text
        and ids[0] in caplog.text
        and ids[1] in caplog.text
    )


def test_wavcaps_style_translations_align_by_slot(tmp_path, synthcaps):
    corpus = write_audiocaps_layout(synthcaps, tmp_path, variant="wavcaps")
    base = load_audiocaps(corpus)
    files = {"deu": {"train": corpus / "train_deu.csv", "test": corpus / "test_deu.csv"}}
    translated = load_translations(base, files)
    for split in ("train", "test"):
        for row, original in zip(translated[split], synthcaps[split]):
            assert row["translations"]["deu"] == original["translations"]["deu"][: len(row["captions"])]


def test_clotho_layout_csv_per_language(tmp_path, synthcaps, clotho):
    corpus, base = clotho
    files = {
        language: {
            split: _clotho_translation_csv(
                tmp_path / f"{split}_{language}.csv", base, synthcaps, split, language
            )
            for split in base
        }
        for language in ("jpn", "fra")
    }
    translated = load_translations(base, files)
    for split in base:
        expected = [
            {language: row[language] for language in ("jpn", "fra")}
            for row in synthcaps[split]["translations"]
        ]
        assert translated[split]["translations"] == expected


def test_one_csv_with_language_columns_beside_english(tmp_path, synthcaps, clotho):
    _, base = clotho
    header = ["file_name"]
    for k in range(1, 6):
        header += [f"caption_{k}", f"fra_{k}", f"deu_Latn_{k}"]
    rows = [header]
    for audio_id, original in zip(base["validation"]["audio_id"], synthcaps["validation"]):
        row = [audio_id]
        for k in range(5):
            row += [
                original["captions"][k],
                original["translations"]["fra"][k],
                original["translations"]["deu"][k],
            ]
        rows.append(row)
    wide = _write(tmp_path / "validation_all.csv", rows)
    translated = load_translations(base, {"fra": {"validation": wide}, "deu": {"validation": wide}})
    expected = [{"fra": row["fra"], "deu": row["deu"]} for row in synthcaps["validation"]["translations"]]
    assert translated["validation"]["translations"] == expected
    assert translated["train"]["translations"] == [{"fra": None, "deu": None}] * len(base["train"])


# ML-CLAP's JSON (github.com/zyyan4/ml-clap, data/Clotho/test.json, data/AudioCaps/test.json): records with
# caption_k and its NLLB code in source_lang_k, "wav" (the clip under the authors' data folder), "audio" (a
# path on their machine), "duration", "id" (an md5 hash for Clotho, Y<youtube id>.wav for AudioCaps) and
# "duration_sample"; tools/prepare_ml_caps_json_to_wds.py groups a record's captions by source_lang_k.
NLLB = {"eng": "eng_Latn", "fra": "fra_Latn", "deu": "deu_Latn", "jpn": "jpn_Jpan"}
CLOTHO_FOLDERS = {
    "train": ("train", "development"),
    "validation": ("val", "validation"),
    "test": ("test", "evaluation"),
}


def _ml_clap_record(wav: str, audio: str, identifier: str, captions: dict[str, list[str]]) -> dict:
    """One record of ML-CLAP's JSON, fields in the order of its files; ``captions``: NLLB code -> captions."""
    slots = [(code, text) for code, texts in captions.items() for text in texts]
    record: dict = {f"caption_{k}": text for k, (_, text) in enumerate(slots, start=1)}
    record.update(wav=wav, audio=audio, duration=10.0, id=identifier, duration_sample=160000)
    record.update({f"source_lang_{k}": code for k, (code, _) in enumerate(slots, start=1)})
    return record


def _clotho_ml_clap_record(split: str, file_name: str, captions: dict[str, list[str]]) -> dict:
    folder, clotho_folder = CLOTHO_FOLDERS[split]
    return _ml_clap_record(
        f"Clotho/waveforms/{folder}/{file_name}",
        f"/path/clotho/clotho_v2/wav/16k/{clotho_folder}/{file_name}",
        hashlib.md5(file_name.encode()).hexdigest() + ".wav",
        captions,
    )


def _write_ml_clap(path: Path, records: list[dict], container: str = "ml-clap") -> Path:
    if container == "jsonl":
        path.write_text(
            "\n".join(json.dumps(record, ensure_ascii=False) for record in records), encoding="utf-8"
        )
    elif container == "list":
        path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    else:
        document = {
            "data": records,
            "num_captions_per_audio": sum(key.startswith("caption_") for key in records[0]),
        }
        path.write_text(json.dumps(document, ensure_ascii=False, indent=4), encoding="utf-8")
    return path


def _clotho_ml_clap_file(path: Path, base, synthcaps, split: str, languages: tuple[str, ...]) -> Path:
    """An ML-CLAP file for one Clotho split: each record with the English captions and ``languages``."""
    records = [
        _clotho_ml_clap_record(
            split,
            file_name,
            {NLLB["eng"]: english, **{NLLB[lang]: original["translations"][lang] for lang in languages}},
        )
        for file_name, english, original in zip(
            base[split]["audio_id"], base[split]["captions"], synthcaps[split]
        )
    ]
    return _write_ml_clap(path, records)


def _expected(synthcaps, split: str, languages: tuple[str, ...]) -> list[dict]:
    return [{lang: row[lang] for lang in languages} for row in synthcaps[split]["translations"]]


def test_ml_clap_clotho_records_join_by_their_wav_file_name(tmp_path, synthcaps, clotho, caplog):
    _, base = clotho
    path = _clotho_ml_clap_file(tmp_path / "clotho_test_ml.json", base, synthcaps, "test", ("jpn", "fra"))
    for key in (None, "wav", "audio"):
        with caplog.at_level(logging.INFO, logger="hf_atr"):
            translated = load_translations(base, {"jpn": {"test": path}, "fr": {"test": path}}, key=key)
        assert translated["test"]["translations"] == _expected(synthcaps, "test", ("jpn", "fra"))
        assert translated["train"]["translations"] == [{"jpn": None, "fra": None}] * len(base["train"])
    clips = len(base["test"])
    assert (
        f"jpn: {path}: joined {clips} clip(s) of split(s) ['test']: {clips} by their key, 0 by their English "
        "captions; 0 record(s) matched no clip." in caplog.text
    )


def test_ml_clap_clotho_hash_ids_and_renamed_files_join_by_english_captions(
    tmp_path, synthcaps, clotho, caplog
):
    _, base = clotho
    path = _clotho_ml_clap_file(tmp_path / "clotho_val_ml.json", base, synthcaps, "validation", ("deu",))
    records = json.loads(path.read_text(encoding="utf-8"))["data"]
    # The id is a hash that names no clip; a name may be written differently (WavCaps' own Clotho JSON has
    # "Grillons-d&#39;Italie-Ardeche.wav", HTML-escaped), and the English captions may come in another order.
    renamed = next(index for index, name in enumerate(base["validation"]["audio_id"]) if '"' in name)
    for field in ("wav", "audio"):
        records[renamed][field] = records[renamed][field].replace('"', "&quot;")
    for k_from, k_to in ((1, 3), (6, 8)):  # English slots 1 <-> 3 and their German translations alike
        records[0][f"caption_{k_from}"], records[0][f"caption_{k_to}"] = (
            records[0][f"caption_{k_to}"],
            records[0][f"caption_{k_from}"],
        )
    _write_ml_clap(path, records)
    expected = _expected(synthcaps, "validation", ("deu",))
    with caplog.at_level(logging.INFO, logger="hf_atr"):
        translated = load_translations(base, {"de": {"validation": path}})
    assert translated["validation"]["translations"] == expected
    clips = len(base["validation"])
    assert (
        f"joined {clips} clip(s) of split(s) ['validation']: {clips - 1} by their key, 1 by their English"
        in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_atr"):
        by_id = load_translations(base, {"de": {"validation": path}}, key="id")
    assert by_id["validation"]["translations"] == expected
    assert (
        f"joined {clips} clip(s) of split(s) ['validation']: 0 by their key, {clips} by their English"
        in caplog.text
    )


def test_ml_clap_caption_of_several_clips_is_reported_not_guessed(tmp_path, synthcaps, clotho, caplog):
    corpus, base = clotho
    validation = corpus / "clotho_captions_validation.csv"
    rows = _read(validation)
    rows[2][1:] = rows[1][1:]  # two validation clips with the same five captions
    _write(validation, rows)
    base = load_clotho(corpus)
    path = _clotho_ml_clap_file(tmp_path / "clotho_val_ml.json", base, synthcaps, "validation", ("fra",))
    with caplog.at_level(logging.WARNING):
        translated = load_translations(base, {"fra": {"validation": path}}, key="id")
    third = synthcaps["validation"][2]["translations"]["fra"]
    assert translated["validation"]["translations"] == [{"fra": None}, {"fra": None}, {"fra": third}]
    names = base["validation"]["audio_id"]
    assert (
        f"fra: 2 record(s) of {path} name no clip, and their English captions are those of several clips "
        f"(not joined, never guessed): {path}, record 1 matches {names[0]!r} (split 'validation' row 0) and "
        f"{names[1]!r} (split 'validation' row 1)" in caplog.text
    )
    # By the file names in "wav", the same records join to their own clips.
    assert load_translations(base, {"fra": {"validation": path}})["validation"]["translations"] == [
        {"fra": row["translations"]["fra"]} for row in synthcaps["validation"]
    ]


def test_ml_clap_audiocaps_records_join_through_their_youtube_ids(tmp_path, synthcaps):
    corpus = write_audiocaps_layout(synthcaps, tmp_path / "audiocaps")
    base = load_audiocaps(corpus)
    records = []
    for youtube_id, english, original in zip(
        base["test"]["audio_id"], base["test"]["captions"], synthcaps["test"]
    ):
        captions = {NLLB["eng"]: english, NLLB["fra"]: original["translations"]["fra"]}
        records.append(
            _ml_clap_record(
                f"AudioCaps/waveforms/test/Y{youtube_id}.wav", f"/path/audiocaps/16k/Y{youtube_id}.wav",
                f"Y{youtube_id}.wav", captions,
            )
        )  # fmt: skip
    path = _write_ml_clap(tmp_path / "audiocaps_test_ml.json", records)
    for key in (None, "id", "wav"):
        translated = load_translations(base, {"fra": {"test": path}}, key=key)
        assert translated["test"]["translations"] == _expected(synthcaps, "test", ("fra",))


@pytest.mark.parametrize("container", ["ml-clap", "list", "jsonl"])
def test_ml_clap_layout_with_one_language_per_file(tmp_path, synthcaps, clotho, container):
    _, base = clotho
    records = [
        _clotho_ml_clap_record("test", file_name, {NLLB["jpn"]: original["translations"]["jpn"]})
        for file_name, original in zip(base["test"]["audio_id"], synthcaps["test"])
    ]
    path = _write_ml_clap(
        tmp_path / ("test_jpn.jsonl" if container == "jsonl" else "test_jpn.json"), records, container
    )
    translated = load_translations(base, {"jpn_Jpan": {"test": path}})
    assert translated["test"]["translations"] == _expected(synthcaps, "test", ("jpn",))
    assert (
        load_translations(base, {"ja": {"test": path}})["test"]["translations"]
        == translated["test"]["translations"]
    )


def test_malformed_ml_clap_files(tmp_path, synthcaps, clotho):
    _, base = clotho
    path = _clotho_ml_clap_file(tmp_path / "test.json", base, synthcaps, "test", ())
    with pytest.raises(
        CorpusFormatError,
        match=r"test\.json: none of its 2 record\(s\) has a caption in fra \(its source_lang_k fields name "
        r"\['eng_Latn'\]\); load it as one of those languages or give the fra file\.",
    ):
        load_translations(base, {"fra": {"test": path}})
    records = [
        _clotho_ml_clap_record("test", name, {NLLB["jpn"]: original["translations"]["jpn"]})
        for name, original in zip(base["test"]["audio_id"], synthcaps["test"])
    ]
    records[1]["source_lang_3"] = "zho_Hans"
    mixed = _write_ml_clap(tmp_path / "mixed.json", records)
    with pytest.raises(
        CorpusFormatError, match=r"mixed\.json, record 2: 4 jpn caption\(s\) for clip .* which has 5"
    ):
        load_translations(base, {"jpn": {"test": mixed}})
    records[1]["source_lang_3"] = "jp"
    _write_ml_clap(mixed, records)
    with pytest.raises(CorpusFormatError, match=r"mixed\.json, record 2: Language code 'jp' is not an ISO"):
        load_translations(base, {"jpn": {"test": mixed}})
    records = json.loads(
        _clotho_ml_clap_file(tmp_path / "t.json", base, synthcaps, "test", ("fra",)).read_text()
    )["data"]
    del records[0]["caption_10"], records[0]["source_lang_10"]
    _write_ml_clap(tmp_path / "t.json", records)
    with pytest.raises(
        CorpusFormatError, match=r"t\.json, record 1: 4 caption\(s\) in fra but 5 in English \(eng_Latn\)"
    ):
        load_translations(base, {"fra": {"test": tmp_path / "t.json"}})
    for record in records:
        record["wav"] = record["audio"] = "Clotho/waveforms/test/another clip.wav"
        record["caption_1"] = "English captions of another clip"
    _write_ml_clap(tmp_path / "t.json", records[1:])
    with pytest.raises(
        CorpusFormatError, match=r"t\.json: none of its records matches a clip of split\(s\) \['test'\]"
    ):
        load_translations(base, {"fra": {"test": tmp_path / "t.json"}})
    for field in ("wav", "audio", "id"):
        del records[1][field]
    _write_ml_clap(tmp_path / "t.json", records[1:])
    with pytest.raises(
        CorpusFormatError, match=r"t\.json, record 1: none of the key fields \[.*'wav', 'id', 'audio'\]"
    ):
        load_translations(base, {"fra": {"test": tmp_path / "t.json"}})


def test_malformed_translation_files(tmp_path, synthcaps, clotho):
    corpus, base = clotho
    names = base["validation"]["audio_id"]
    path = _clotho_translation_csv(tmp_path / "fra.csv", base, synthcaps, "validation", "fra")
    rows = _read(path)

    _write(path, [*rows, [names[0], "a", "b"]])
    with pytest.raises(CorpusFormatError, match=rf"fra\.csv, line {len(rows) + 1}: expected 6 fields"):
        load_translations(base, {"fra": {"validation": path}})
    _write(path, [*rows, rows[1]])
    with pytest.raises(
        CorpusFormatError,
        match=rf"fra\.csv, line {len(rows) + 1}: file_name .* occurs twice \(first at .*line 2\)",
    ):
        load_translations(base, {"fra": {"validation": path}})
    _write(path, [["file_name", *SLOTS[:3]], *[row[:4] for row in rows[1:]]])
    with pytest.raises(CorpusFormatError, match="3 fra caption\\(s\\) for clip .* which has 5 English"):
        load_translations(base, {"fra": {"validation": path}})
    _write(path, [rows[0], ["unknown.wav", *rows[1][1:]]])
    with pytest.raises(CorpusFormatError, match="none of its records matches a clip"):
        load_translations(base, {"fra": {"validation": path}})
    _write(path, [["name", "text"], ["x", "y"]])
    with pytest.raises(CorpusFormatError, match="none of the key fields"):
        load_translations(base, {"fra": path})
    audiocaps_layout = _write(
        tmp_path / "ac.csv", [["audiocap_id", "youtube_id", "start_time", "caption"], ["1", "x", "0", "a"]]
    )
    with pytest.raises(CorpusFormatError, match="have no 'caption_ids' column"):
        load_translations(base, {"fra": audiocaps_layout})


def test_bad_arguments(tmp_path, clotho):
    _, base = clotho
    path = tmp_path / "fra.csv"
    with pytest.raises(ValueError, match="English is the base corpus's `captions`"):
        load_translations(base, {"eng": path})
    with pytest.raises(ValueError, match="Language fra is given twice"):
        load_translations(base, {"fra": path, "fra_Latn": path})
    with pytest.raises(ValueError, match=r"names split\(s\) \['dev'\] that base lacks"):
        load_translations(base, {"fra": {"dev": path}})
    with pytest.raises(FileNotFoundError, match="Translation file for fra not found"):
        load_translations(base, {"fra": path})


@pytest.fixture
def clotho_shared_name(tmp_path, synthcaps):
    """Clotho whose development and evaluation splits both have a clip named like the first development clip
    (as real Clotho has), with different English captions."""
    corpus = write_clotho_layout(synthcaps.remove_columns("translations"), tmp_path / "clotho")
    development = _read(corpus / "clotho_captions_development.csv")
    shared = development[1][0]
    (corpus / "evaluation" / shared).write_bytes((corpus / "development" / shared).read_bytes())
    evaluation = corpus / "clotho_captions_evaluation.csv"
    _write(evaluation, [*_read(evaluation), [shared, *[f"evaluation caption {k}" for k in range(1, 6)]]])
    return shared, load_clotho(corpus, splits=["train", "test"])


def _korean_rows(base, splits, with_english: bool) -> list[list[str]]:
    header = ["file_name"]
    for k in range(1, 6):
        header += [f"caption_{k}", f"ko_{k}"] if with_english else [f"caption_{k}"]
    rows = [header]
    for split in splits:
        for audio_id, english in zip(base[split]["audio_id"], base[split]["captions"]):
            korean = [f"{split} 한국어 {audio_id} {k}" for k in range(1, 6)]
            rows.append(
                [audio_id, *[text for pair in zip(english, korean) for text in pair]]
                if with_english
                else [audio_id, *korean]
            )
    return rows


def test_one_file_for_two_splits_is_joined_by_its_english_captions(tmp_path, clotho_shared_name, caplog):
    shared, base = clotho_shared_name
    korean = _write(tmp_path / "clotho_kor.csv", _korean_rows(base, ["test", "train"], with_english=True))
    translated = load_translations(base, {"ko": korean})
    for split in ("train", "test"):
        for row in translated[split]:
            assert row["translations"]["kor"] == [
                f"{split} 한국어 {row['audio_id']} {k}" for k in range(1, 6)
            ]
    assert translated["test"][-1]["audio_id"] == translated["train"][0]["audio_id"] == shared
    rows = _read(korean)
    rows[-1][1] = "an English caption the base does not have"
    _write(korean, rows)
    with caplog.at_level(logging.WARNING):
        translated = load_translations(base, {"kor": korean})
    assert translated["train"][-1]["translations"] == {"kor": None}
    assert f"kor: 1 clip(s) whose English captions differ from those in {korean}" in caplog.text
    assert f"(split 'train' row {len(base['train']) - 1}; {korean}, line {len(rows)})" in caplog.text


def test_one_file_for_two_splits_without_english_rejects_an_ambiguous_name(tmp_path, clotho_shared_name):
    shared, base = clotho_shared_name
    rows = _korean_rows(base, ["train"], with_english=False)
    korean = _write(tmp_path / "clotho_kor.csv", rows)
    last_test_row = len(base["test"]) - 1
    with pytest.raises(
        CorpusFormatError,
        match=rf"clotho_kor\.csv, line 2: {re.escape(repr(shared))} is ambiguous: it names split 'train' row 0 "
        rf"and split 'test' row {last_test_row}, and clotho_kor\.csv has no English captions",
    ):
        load_translations(base, {"kor": korean})
    translated = load_translations(base, {"kor": {"train": korean}})
    assert translated["train"][0]["translations"]["kor"][0] == f"train 한국어 {shared} 1"
    assert translated["test"][-1]["translations"] == {"kor": None}
