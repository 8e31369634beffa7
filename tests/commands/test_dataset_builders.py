"""The table of ``hf-atr build-dataset``: options as rows, each loader's options reaching it by keyword, a builder
that loads no corpus added as one more row, and the output options."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, load_from_disk

from hf_atr.cli import main as hf_atr_main
from hf_atr.commands import dataset_builders
from hf_atr.commands.dataset_builders import (
    BUILDERS,
    OUTPUT_OPTIONS,
    OVERLAP_OPTIONS,
    add_options,
    dataset_builder,
    export_dataset_dict,
    option,
    single_builder_parser,
)
from hf_atr.data.corpora import CORPUS_LOADERS, loader_options
from hf_atr.data.synthcaps import load_synthcaps


def test_options_keep_their_groups_destinations_and_exclusions(capsys):
    parser = argparse.ArgumentParser(prog="builder")
    options = [
        option("location"),
        option("--clip-seconds", type=float, group="clips"),
        option("--template", dest="templates", action="append", group="clips"),
        option("--num-shards", type=int, exclusive="size"),
        option("--clips-per-shard", type=int, exclusive="size"),
    ]
    add_options(parser, options)
    assert [argument.dest for argument in options] == [
        "location",
        "clip_seconds",
        "templates",
        "num_shards",
        "clips_per_shard",
    ]
    parsed = parser.parse_args(["here", "--clip-seconds", "2.5", "--template", "a", "--template", "b"])
    assert vars(parsed) == {
        "location": "here",
        "clip_seconds": 2.5,
        "templates": ["a", "b"],
        "num_shards": None,
        "clips_per_shard": None,
    }
    assert "\nclips:\n  --clip-seconds CLIP_SECONDS\n  --template TEMPLATES\n" in parser.format_help()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["here", "--num-shards", "2", "--clips-per-shard", "3"])
    assert exit_info.value.code == 2
    assert "argument --clips-per-shard: not allowed with argument --num-shards" in capsys.readouterr().err


@pytest.mark.parametrize("loader", sorted(CORPUS_LOADERS))
def test_every_loader_is_a_builder_whose_options_reach_it_by_keyword(loader, monkeypatch, tmp_path, capsys):
    calls = []

    def load_corpus(name, data_dir, **options):
        calls.append((name, data_dir, options))
        raise FileNotFoundError(f"{data_dir} was not read")

    monkeypatch.setattr(dataset_builders, "load_corpus", load_corpus)
    builder = BUILDERS[loader]
    parser = single_builder_parser(loader, prog=f"build {loader}")
    args = parser.parse_args(["~/corpus", "--missing", "skip", "--encoding", "cp1252", "--output-dir", "out"])
    with pytest.raises(SystemExit) as exit_info:
        builder.run(parser, args)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"build {loader}: error: {Path.home() / 'corpus'} was not read\n"
    [(name, data_dir, options)] = calls
    shared = {argument.dest for argument in (*OUTPUT_OPTIONS, *OVERLAP_OPTIONS)}
    offered = {argument.dest for argument in builder.arguments[1:]} - shared
    assert name == loader and data_dir == Path.home() / "corpus"
    assert set(options) == offered and offered <= set(loader_options(loader))
    assert options["missing"] == "skip" and options["encoding"] == "cp1252"


def test_a_builder_that_loads_no_corpus_is_one_more_row(monkeypatch, tmp_path, capsys):
    """What a synthesizer adds: its options and the function that makes its DatasetDict; the output is shared."""
    row = dataset_builder(
        help="synthetic clips",
        description="Generate SynthCaps clips.",
        arguments=(option("--clips", type=int, default=2, help="Training clips."),),
        make=lambda parser, args: DatasetDict(
            {"train": load_synthcaps(args.clips, 0, 0, duration=0.5, languages=("eng",))["train"]}
        ),
    )
    monkeypatch.setitem(BUILDERS, "synthcaps", row)
    assert (
        hf_atr_main(["build-dataset", "synthcaps", "--clips", "3", "--output-dir", str(tmp_path / "out")])
        == 0
    )
    assert f"written: {tmp_path / 'out'}" in capsys.readouterr().out
    assert load_from_disk(str(tmp_path / "out"))["train"].num_rows == 3
    with pytest.raises(SystemExit) as exit_info:
        hf_atr_main(["build-dataset", "synthcaps", "--help"])
    assert exit_info.value.code == 0
    assert "Generate SynthCaps clips." in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        hf_atr_main(["build-dataset", "synthcaps", "--parquet"])
    assert exit_info.value.code == 2
    assert "hf-atr build-dataset synthcaps: error: give --output-dir and/or --push-to-hub REPO." in (
        capsys.readouterr().err
    )


def _split(rows: int) -> Dataset:
    return Dataset.from_dict({"audio_id": [str(index) for index in range(rows)]})


def test_export_never_writes_an_empty_split(tmp_path, caplog):
    args = argparse.Namespace(output_dir=tmp_path / "out", parquet=False, embed_audio=False, push_to_hub=None)
    with caplog.at_level(logging.WARNING):
        export_dataset_dict(DatasetDict({"train": _split(2), "test": _split(0)}), args)
    assert "Not writing empty split(s) ['test']" in caplog.text
    assert list(load_from_disk(str(Path(args.output_dir)))) == ["train"]
    with pytest.raises(ValueError, match="Every split is empty"):
        export_dataset_dict(DatasetDict({"test": _split(0)}), args)
