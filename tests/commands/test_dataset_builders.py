"""The table of ``hf-atr build-dataset``: options as rows, each loader's options reaching it by keyword, a builder
that loads no corpus added as one more row, and the output options."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import DatasetDict, load_from_disk

from hf_atr.cli import main as hf_atr_main
from hf_atr.commands.build_dataset import dataset_builders
from hf_atr.commands.build_dataset.builder_options import OUTPUT_OPTIONS, OVERLAP_OPTIONS, option
from hf_atr.commands.build_dataset.builder_rows import dataset_builder
from hf_atr.commands.build_dataset.dataset_builders import BUILDERS, single_builder_parser
from hf_atr.data.corpora import CORPUS_LOADERS, loader_options
from hf_atr.data.synthcaps import load_synthcaps


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


def test_the_table_takes_its_row_kinds_and_two_rows_from_the_modules_beside_it():
    """The row kinds (builder_rows), ``shards`` and ``moments`` live in modules of their own; their import paths stay."""
    from hf_atr.commands.build_dataset import builder_rows, moments_builder, shards_builder

    assert dataset_builders.Builder is builder_rows.Builder
    assert dataset_builders.dataset_builder is builder_rows.dataset_builder
    assert (
        BUILDERS["shards"] is shards_builder.SHARDS_BUILDER
        and BUILDERS["shards"].run is shards_builder.write_shards
    )
    assert BUILDERS["moments"] is moments_builder.MOMENTS_BUILDER
    assert BUILDERS["moments"].run is moments_builder.build_moments
    assert list(BUILDERS)[-2:] == ["shards", "moments"]  # --help lists them last, as before
