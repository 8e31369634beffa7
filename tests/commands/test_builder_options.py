"""hf_atr.commands.build_dataset.builder_options: a builder's options as rows, added to a parser with their groups and exclusions."""

from __future__ import annotations

import argparse

import pytest

from hf_atr.commands.build_dataset import dataset_builders
from hf_atr.commands.build_dataset.builder_options import ENCODING_OPTION, add_options, option


def test_dataset_builders_keeps_the_import_paths_of_the_options():
    assert dataset_builders.option is option and dataset_builders.add_options is add_options
    assert dataset_builders.ENCODING_OPTION is ENCODING_OPTION


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
