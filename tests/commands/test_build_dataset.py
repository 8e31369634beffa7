"""``hf-atr build-dataset BUILDER``, end to end on corpora in their real layouts, and the ``datasets_scripts/`` that
run the same builders under their own names."""

from __future__ import annotations

import csv
import json
import re
import runpy
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow.parquet
import pytest
import soundfile
from datasets import DatasetDict, load_from_disk
from synthetic_audio import synthetic_clip

from hf_atr.cli import main as hf_atr_main
from hf_atr.commands.build_dataset.command import build_dataset
from hf_atr.data.audiocaps import load_audiocaps
from hf_atr.data.clotho import load_clotho
from hf_atr.data.esc50 import class_prompts, load_esc50
from hf_atr.data.schema import corpus_provenance
from hf_atr.data.synthcaps import (
    load_synthcaps,
    write_audiocaps_layout,
    write_clotho_layout,
    write_esc50_layout,
)

SCRIPTS = Path(__file__).parents[2] / "datasets_scripts"
SCRIPT_BUILDERS = {
    "build_audio_text_folder.py": "audiofolder",
    "build_audiocaps.py": "audiocaps",
    "build_clotho.py": "clotho",
    "build_esc50.py": "esc50",
    "build_moments.py": "moments",
    "build_translations.py": "translations",
    "build_wavcaps.py": "wavcaps",
    "write_shards.py": "shards",
}


def command(builder: str) -> Callable[[Sequence[str]], int]:
    """``hf-atr build-dataset BUILDER ARGS`` as a function of ``ARGS``."""
    return lambda argv: hf_atr_main(["build-dataset", builder, *argv])


@pytest.fixture(scope="module")
def synthcaps():
    return load_synthcaps(4, 2, 2, duration=0.5, languages=("eng",))


@pytest.fixture(scope="module")
def esc50_dir(tmp_path_factory):
    return write_esc50_layout(
        tmp_path_factory.mktemp("esc50"), clips_per_class=5, sampling_rate=16000, duration=0.5
    )


def _write_wav(path: Path, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, synthetic_clip(800, 16000, seed), 16000)


def _read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)


def test_hf_atr_help_lists_the_command_and_its_help_lists_every_builder(capsys):
    with pytest.raises(SystemExit) as exit_info:
        hf_atr_main(["--help"])
    assert exit_info.value.code == 0 and "build-dataset" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        hf_atr_main(["build-dataset", "--help"])
    listed = capsys.readouterr().out
    assert exit_info.value.code == 0 and listed.startswith("usage: hf-atr build-dataset")
    assert all(re.search(rf"^\s+{name}\b", listed, re.MULTILINE) for name in SCRIPT_BUILDERS.values())
    with pytest.raises(SystemExit) as exit_info:
        hf_atr_main(["build-dataset", "librispeech", "x"])
    assert exit_info.value.code == 2 and "invalid choice: 'librispeech'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("builder", "script", "arguments", "message"),
    [
        ("audiofolder", "build_audio_text_folder.py", [], r"data_dir .*nowhere is not a directory\."),
        ("audiocaps", "build_audiocaps.py", [], r"AudioCaps data_dir .*nowhere is not a directory"),
        ("clotho", "build_clotho.py", [], r"Clotho data_dir .*nowhere is not a directory\."),
        ("esc50", "build_esc50.py", [], r"Corpus metadata file not found: .*nowhere/meta/esc50\.csv"),
        ("translations", "build_translations.py", ["--translation", "fra=x.csv"], r"nowhere"),
        ("wavcaps", "build_wavcaps.py", [], r"WavCaps JSON file not found: .*nowhere"),
    ],
)
def test_builders_end_with_the_loaders_message_and_take_an_encoding(
    tmp_path, capsys, builder, script, arguments, message
):
    argv = [
        str(tmp_path / "nowhere"),
        *arguments,
        "--encoding",
        "cp1252",
        "--output-dir",
        str(tmp_path / "out"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        command(builder)(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert re.fullmatch(rf"hf-atr build-dataset {builder}: error: .*{message}.*\n", error, re.DOTALL)
    assert "Traceback" not in error and not (tmp_path / "out").exists()
    # The script: the same one line under its own name.
    main = runpy.run_path(str(SCRIPTS / script))["main"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    script_error = capsys.readouterr().err
    assert exit_info.value.code == 1 and re.fullmatch(
        rf"\S+: error: .*{message}.*\n", script_error, re.DOTALL
    )
    assert "Traceback" not in script_error and not (tmp_path / "out").exists()
    assert script_error.partition(": error: ")[2] == error.partition(": error: ")[2]


@pytest.mark.parametrize(("script", "builder"), sorted(SCRIPT_BUILDERS.items()))
def test_each_script_is_its_builder_under_the_scripts_name(script, builder, monkeypatch, capsys):
    """The script's ``--help`` is the builder's, option for option, with its description."""
    with pytest.raises(SystemExit) as exit_info:
        command(builder)(["--help"])
    command_help = capsys.readouterr().out
    assert exit_info.value.code == 0
    monkeypatch.setattr(sys, "argv", [f"hf-atr build-dataset {builder}"])  # the script's name is its prog
    main = runpy.run_path(str(SCRIPTS / script))["main"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == command_help


def test_build_dataset_names_the_builders_when_the_name_is_unknown():
    with pytest.raises(
        ValueError, match=r"No dataset builder 'clothoo'; the builders: audiocaps, clotho, .*shards"
    ):
        build_dataset("clothoo", ["x"])


def test_audiofolder_writes_a_reloadable_dataset(tmp_path, capsys):
    _write_wav(tmp_path / "folder" / "train" / "a.wav")
    _write_wav(tmp_path / "folder" / "test" / "b.wav", 1)
    _write_csv(
        tmp_path / "folder" / "metadata.csv",
        [["file_name", "caption"], ["train/a.wav", "a"], ["test/b.wav", "b"], ["test/c.wav", "c"]],
    )
    main = command("audiofolder")
    out = tmp_path / "saved"
    assert main([str(tmp_path / "folder"), "--missing", "skip", "--output-dir", str(out)]) == 0
    saved = load_from_disk(str(out))
    assert saved["train"]["captions"] == [["a"]] and saved["test"]["audio_id"] == ["test/b.wav"]
    assert corpus_provenance(saved["test"])["skipped"] == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "metadata.csv" in capsys.readouterr().out


def test_audiofolder_applies_the_overlap_filter_it_offers(tmp_path, capsys):
    _write_wav(tmp_path / "evaluation" / "test clip.wav", 1)
    _write_csv(tmp_path / "evaluation" / "metadata.csv", [["file_name", "caption"], ["test clip.wav", "b"]])
    _write_wav(tmp_path / "folder" / "a.wav")
    _write_wav(tmp_path / "folder" / "b.wav", 1)  # the evaluation clip, renamed
    _write_csv(
        tmp_path / "folder" / "metadata.csv", [["file_name", "caption"], ["a.wav", "a"], ["b.wav", "b"]]
    )
    main = command("audiofolder")
    assert main([str(tmp_path / "evaluation"), "--output-dir", str(tmp_path / "reference")]) == 0
    capsys.readouterr()
    out = tmp_path / "saved"
    argv = [
        str(tmp_path / "folder"),
        "--exclude-overlap-with",
        str(tmp_path / "reference"),
        "--output-dir",
        str(out),
    ]
    assert main(argv) == 0
    assert "train: overlap filter: removed 1 of 2 clip(s) (0 by source id, 1 by audio content)" in (
        capsys.readouterr().out
    )
    saved = load_from_disk(str(out))["train"]
    assert saved["audio_id"] == ["a.wav"] and corpus_provenance(saved)["filters"][0]["name"] == "overlap"


@pytest.fixture(scope="module")
def audiocaps_synthcaps():
    return load_synthcaps(2, 3, 3, duration=0.5, languages=("eng",))


def test_audiocaps_saves_to_disk_and_parquet(tmp_path, audiocaps_synthcaps, capsys):
    corpus = write_audiocaps_layout(audiocaps_synthcaps, tmp_path / "corpus")
    main = command("audiocaps")
    assert main([str(corpus), "--splits", "val", "test", "--output-dir", str(tmp_path / "saved")]) == 0
    saved = load_from_disk(str(tmp_path / "saved"))
    expected = load_audiocaps(corpus, splits=["val", "test"])
    assert list(saved) == ["validation", "test"]
    for split in saved:
        assert (
            saved[split].remove_columns("audio").to_dict()
            == expected[split].remove_columns("audio").to_dict()
        )
        # save_to_disk copies the audio files' bytes into the saved dataset.
        for saved_audio, audio in zip(saved[split]["audio"], expected[split]["audio"]):
            assert saved_audio["bytes"] == Path(audio["path"]).read_bytes()
    expected_validation = expected["validation"]
    assert main([str(corpus), "--output-dir", str(tmp_path / "pq"), "--parquet", "--embed-audio"]) == 0
    assert sorted(path.name for path in (tmp_path / "pq").iterdir()) == [
        "test.parquet",
        "train.parquet",
        "validation.parquet",
    ]
    table = pyarrow.parquet.read_table(tmp_path / "pq" / "validation.parquet")
    assert table.column("audio_id").to_pylist() == expected_validation["audio_id"]
    first_audio = table.column("audio").to_pylist()[0]
    assert first_audio["bytes"] == Path(expected_validation[0]["audio"]["path"]).read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "--push-to-hub" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main([str(corpus)])
    assert exit_info.value.code == 2 and "--output-dir" in capsys.readouterr().err


def test_audiocaps_paths_with_a_tilde_and_a_split_left_empty(tmp_path, audiocaps_synthcaps, monkeypatch):
    corpus = write_audiocaps_layout(
        audiocaps_synthcaps, tmp_path / "audiocaps", filename_pattern="Y{youtube_id}.wav"
    )
    for path in (corpus / "audio" / "val").iterdir():
        path.unlink()
    monkeypatch.setenv("HOME", str(tmp_path))
    main = command("audiocaps")
    assert main(["~/audiocaps", "--missing", "skip", "--output-dir", "~/saved"]) == 0
    assert list(load_from_disk(str(tmp_path / "saved"))) == ["train", "test"]


def test_clotho_round_trip_through_the_command_and_the_script(tmp_path, synthcaps, capsys):
    corpus = write_clotho_layout(synthcaps, tmp_path / "corpus")
    main = command("clotho")
    assert main([str(corpus), "--splits", "evaluation", "--output-dir", str(tmp_path / "saved")]) == 0
    printed = capsys.readouterr().out
    saved = load_from_disk(str(tmp_path / "saved"))
    expected = load_clotho(corpus, splits="test")["test"]
    assert list(saved) == ["test"]
    assert saved["test"].remove_columns("audio").to_dict() == expected.remove_columns("audio").to_dict()
    assert saved["test"][0]["audio"]["bytes"] == Path(expected[0]["audio"]["path"]).read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "clotho_captions" in capsys.readouterr().out
    # The script: the same options, the same output, the same dataset.
    script = runpy.run_path(str(SCRIPTS / "build_clotho.py"))["main"]
    assert script([str(corpus), "--splits", "evaluation", "--output-dir", str(tmp_path / "by_script")]) == 0
    assert capsys.readouterr().out == printed.replace(str(tmp_path / "saved"), str(tmp_path / "by_script"))
    by_script = load_from_disk(str(tmp_path / "by_script"))["test"]
    assert by_script.to_dict() == saved["test"].to_dict()


def test_clotho_split_left_empty_is_not_written_under_skip(tmp_path, synthcaps):
    corpus = write_clotho_layout(synthcaps, tmp_path / "corpus")
    shutil.rmtree(corpus / "validation")
    main = command("clotho")
    assert main([str(corpus), "--missing", "skip", "--output-dir", str(tmp_path / "saved")]) == 0
    assert list(load_from_disk(str(tmp_path / "saved"))) == ["train", "test"]


def test_clotho_non_utf8_captions_need_encoding(tmp_path, synthcaps, capsys):
    write_clotho_layout(synthcaps, tmp_path)
    csv_path = tmp_path / "clotho_captions_validation.csv"
    rows = _read_csv(csv_path)
    rows[1][1] = "A caf\u00e9 with people talking"
    csv_path.write_bytes("\n".join(",".join(f'"{v}"' for v in row) for row in rows).encode("cp1252"))
    main = command("clotho")
    argv = [str(tmp_path), "--splits", "validation", "--output-dir", str(tmp_path / "saved")]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in error
    assert (
        "clotho_captions_validation.csv, line 2: not valid utf-8" in error
        and "'cp1252' it reads '…0000.wav\",\"A café with people talking" in error
    )
    assert main([*argv, "--encoding", "cp1252"]) == 0
    saved = load_from_disk(str(tmp_path / "saved"))
    assert saved["validation"][0]["captions"][0] == "A caf\u00e9 with people talking"


def test_esc50_round_trip(esc50_dir, tmp_path, capsys):
    main = command("esc50")
    output = tmp_path / "saved"
    argv = [str(esc50_dir), "--folds", "1", "5", "--template", "A {class}.", "--template", "Some {class}."]
    assert main([*argv, "--output-dir", str(output)]) == 0
    saved = load_from_disk(str(output))
    assert list(saved) == ["fold1", "fold5"]
    assert saved["fold5"][0]["captions"] == class_prompts(
        saved["fold5"][0]["label"], ["A {class}.", "Some {class}."]
    )
    expected = load_esc50(esc50_dir, folds=[1, 5], templates=["A {class}.", "Some {class}."])
    assert (
        saved["fold1"].remove_columns("audio").to_dict()
        == expected["fold1"].remove_columns("audio").to_dict()
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "--template" in capsys.readouterr().out


def test_esc50_pushes_only_when_asked(esc50_dir, monkeypatch, capsys):
    pushed = []
    monkeypatch.setattr(
        DatasetDict,
        "push_to_hub",
        lambda self, repo_id, **kwargs: pushed.append((list(self), repo_id, kwargs)),
    )
    main = command("esc50")
    assert main([str(esc50_dir), "--folds", "2", "--push-to-hub", "someone/esc50", "--private"]) == 0
    assert pushed == [(["fold2"], "someone/esc50", {"private": True})]
    assert "hub:someone/esc50" in capsys.readouterr().out


def test_esc50_fold_left_empty_is_not_written(esc50_dir, tmp_path):
    corpus = shutil.copytree(esc50_dir, tmp_path / "esc50")
    with (corpus / "meta" / "esc50.csv").open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["fold"] == "2":
                (corpus / "audio" / row["filename"]).unlink()
    main = command("esc50")
    assert (
        main([str(corpus), "--folds", "1", "2", "--missing", "skip", "--output-dir", str(tmp_path / "saved")])
        == 0
    )
    assert list(load_from_disk(str(tmp_path / "saved"))) == ["fold1"]


def test_translations_are_added_to_a_saved_dataset(tmp_path, capsys):
    synthcaps = load_synthcaps(2, 3, 2, duration=0.5, languages=("eng", "fra", "deu", "jpn"))
    corpus = write_audiocaps_layout(synthcaps, tmp_path / "corpus")
    load_audiocaps(corpus).save_to_disk(str(tmp_path / "base"))
    main = command("translations")
    argv = [
        str(tmp_path / "base"),
        "--translation",
        f"validation:fra_Latn={corpus / 'val_fra.csv'}",
        "--translation",
        f"test:fra={corpus / 'test_fra.csv'}",
        "--translation",
        f"deu={corpus / 'val_deu.csv'}",
        "--output-dir",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    saved = load_from_disk(str(tmp_path / "out"))
    for row, original in zip(saved["test"], synthcaps["test"]):
        assert row["translations"] == {"fra": original["translations"]["fra"], "deu": None}
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "base"), "--translation", "fra", "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "expected [SPLIT:]LANG=PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "--translation" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("translation", "message"),
    [
        ("fra=a.csv", "fra is given twice"),
        ("test:fra=a.csv", "fra is given both for all splits and for test"),
        ("xx_Qqqq=a.csv", "Language code 'xx_Qqqq' is not an ISO 639-1 ('ja'), ISO 639-3 ('jpn') or NLLB"),
    ],
)
def test_translation_arguments_that_cannot_be_grouped_end_the_command(tmp_path, capsys, translation, message):
    argv = ["base", "--translation", "fra_Latn=b.csv", "--translation", translation, "--output-dir", "out"]
    with pytest.raises(SystemExit) as exit_info:
        command("translations")(
            [str(tmp_path / argument) if argument in ("base", "out") else argument for argument in argv]
        )
    error = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and f"hf-atr build-dataset translations: error: --translation {translation!r}" in error
    )
    assert message in error


def _freesound_record(identifier: str, caption: str) -> dict:
    """A record of WavCaps' ``json_files/FreeSound/fsd_final.json`` (the fields the release has that name a clip)."""
    return {
        "id": identifier,
        "file_name": "UK Mello.wav",
        "caption": caption,
        "audio": "wav_path",
        "duration": 0.1,
    }


def test_wavcaps_without_clotho_evaluation_clips_reloads(tmp_path, capsys):
    clotho = write_clotho_layout(
        load_synthcaps(2, 2, 2, duration=0.5, languages=("eng",)), tmp_path / "clotho"
    )
    names = [row[0] for row in _read_csv(clotho / "clotho_captions_evaluation.csv")[1:]]
    _write_csv(
        clotho / "clotho_metadata_evaluation.csv",
        [["file_name", "sound_id"], *[[name, str(7000 + i)] for i, name in enumerate(names)]],
    )
    build_clotho = command("clotho")
    assert (
        build_clotho([str(clotho), "--splits", "evaluation", "--output-dir", str(tmp_path / "clotho_test")])
        == 0
    )
    identifiers = ["7000", "42", "7001", "43"]
    records = [_freesound_record(i, f"caption {i}") for i in identifiers]
    (tmp_path / "fsd_final.json").write_text(json.dumps({"num_captions_per_audio": 1, "data": records}))
    for seed, identifier in enumerate(identifiers):
        path = tmp_path / "audio" / f"{identifier}.flac"
        path.parent.mkdir(exist_ok=True)
        soundfile.write(path, synthetic_clip(3200, 32000, seed), 32000, format="FLAC")
    main = command("wavcaps")
    argv = [str(tmp_path / "fsd_final.json"), "--audio-dir", str(tmp_path / "audio")]
    out = tmp_path / "wavcaps"
    assert (
        main([*argv, "--exclude-overlap-with", str(tmp_path / "clotho_test"), "--output-dir", str(out)]) == 0
    )
    assert (
        "train: overlap filter: removed 2 of 4 clip(s) (2 by source id, 0 by audio content)"
        in capsys.readouterr().out
    )
    saved = load_from_disk(str(out))["train"]
    assert saved["audio_id"] == ["42", "43"]
    assert corpus_provenance(saved)["filters"][0]["reference"] == ["Clotho test"]
    blocklist = tmp_path / "blacklist.json"
    blocklist.write_text(json.dumps({"FreeSound": identifiers}))
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--blocklist", str(blocklist), "--output-dir", str(tmp_path / "none")])
    assert exit_info.value.code == 1
    assert "error: Every split is empty (['train']); nothing to write." in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "--exclude-overlap-with" in capsys.readouterr().out


@pytest.fixture
def saved_corpus(tmp_path) -> Path:
    """A saved shared-schema DatasetDict: 5 training and 2 test clips."""
    synthcaps = load_synthcaps(5, 1, 2, duration=0.5, languages=("eng",))
    DatasetDict({"train": synthcaps["train"], "test": synthcaps["test"]}).save_to_disk(
        str(tmp_path / "corpus")
    )
    return tmp_path / "corpus"


def test_shards_of_every_split_through_the_command_and_the_script(
    tmp_path, saved_corpus, monkeypatch, capsys
):
    argv = [str(saved_corpus), "--output-dir", str(tmp_path / "shards"), "--num-shards", "4"]
    assert command("shards")(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "train: 5 clips in 4 webdataset shards" in printed
        and "test: 2 clips in 2 webdataset shards" in printed
    )
    assert len(list((tmp_path / "shards" / "train").glob("*.tar"))) == 4
    with pytest.raises(SystemExit) as exit_info:
        command("shards")([*argv, "--splits", "validation"])
    assert exit_info.value.code == 2
    assert "has no split(s) ['validation']; it has ['test', 'train']." in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        command("shards")([*argv, "--clips-per-shard", "2"])
    assert exit_info.value.code == 2 and "not allowed with argument --num-shards" in capsys.readouterr().err
    # The script, run as a program: the same shards, the same report.
    script = str(SCRIPTS / "write_shards.py")
    by_script = tmp_path / "by_script"
    monkeypatch.setattr(
        sys, "argv", [script, str(saved_corpus), "--output-dir", str(by_script), "--num-shards", "4"]
    )
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(script, run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == printed.replace(str(tmp_path / "shards"), str(by_script))
    assert len(list((by_script / "train").glob("*.tar"))) == 4


def test_the_shards_script_names_a_missing_dataset_in_one_line(tmp_path, monkeypatch, capsys):
    script = str(SCRIPTS / "write_shards.py")
    monkeypatch.setattr(
        sys, "argv", [script, str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "shards")]
    )
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(script, run_name="__main__")
    assert exit_info.value.code == 1
    assert f"write_shards.py: error: Directory {tmp_path / 'nowhere'} not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        command("shards")([str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "shards")])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        f"hf-atr build-dataset shards: error: Directory {tmp_path / 'nowhere'} not found\n"
    )


def test_moments_synthesises_from_a_saved_dataset_without_the_test_clips(tmp_path, synthcaps, capsys):
    synthcaps.save_to_disk(tmp_path / "source")
    backgrounds = tmp_path / "backgrounds"
    for seed in range(2):
        _write_wav(backgrounds / f"bg{seed}.wav", seed)
    test_clips = DatasetDict({"test": synthcaps["train"].select([0])})
    test_clips.save_to_disk(tmp_path / "test_set")
    arguments = [str(tmp_path / "source"), "--backgrounds", str(backgrounds), "--num-recordings", "3"]
    options = ["--duration", "2", "3", "--events", "1", "2", "--sampling-rate", "16000", "--seed", "1"]
    overlap = ["--exclude-overlap-with", str(tmp_path / "test_set")]
    assert command("moments")([*arguments, *options, *overlap, "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "train: overlap filter" in printed and "moments in 3 recordings" in printed
    lines = [json.loads(line) for line in (tmp_path / "out" / "moments_train_release.jsonl").open()]
    removed = synthcaps["train"][0]["audio_id"]
    assert lines and all(line["source_audio_id"] != removed for line in lines)
    assert sorted(path.name for path in (tmp_path / "out" / "audio").iterdir()) == [
        f"train_{index:06d}.flac" for index in range(3)
    ]
    # The script writes the same files.
    main = runpy.run_path(str(SCRIPTS / "build_moments.py"))["main"]
    assert main([*arguments, *options, *overlap, "--output-dir", str(tmp_path / "script")]) == 0
    assert (tmp_path / "script" / "moments_train_release.jsonl").read_text() == (
        tmp_path / "out" / "moments_train_release.jsonl"
    ).read_text()
    with pytest.raises(SystemExit) as exit_info:
        command("moments")([*arguments, "--source-split", "dev", "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "has no split 'dev'; it has ['test', 'train', 'validation']" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exit_info:
        command("moments")([*arguments, "--events", "0", "2", "--output-dir", str(tmp_path / "x")])
    assert exit_info.value.code == 1 and capsys.readouterr().err == (
        "hf-atr build-dataset moments: error: events_range=(0, 2): expected 1 <= fewest <= most events.\n"
    )
