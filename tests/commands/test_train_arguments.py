"""``hf-atr train``'s arguments: flags, YAML/JSON config files, and the messages bad ones get."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from hf_atr.cli import main
from hf_atr.commands.train.train_arguments import parse_train_arguments
from hf_atr.commands.train.training_arguments import resolve_torch_compile
from hf_atr.training.dataloader_workers import DEFAULT_WORKERS_RULE


def parse_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse_train_arguments(argv)
    assert exit_info.value.code == 2
    return " ".join(capsys.readouterr().err.split())


def test_flags_fill_the_dataclasses_and_training_arguments(tmp_path):
    arguments = parse_train_arguments(
        ["--audio_model", "a", "--text-model", "t", "--freeze_text", "--dataset", "clotho", "--data_dir", "d",
         "--languages", "en", "ja", "fra", "--objective", "triplet", "--objective_args", '{"margin": 0.3}',
         "--loader_options", '{"splits": ["train", "test"]}', "--map_cutoffs", "10", "16",
         "--output_dir", str(tmp_path), "--max_steps", "7", "--learning_rate", "1e-4", "--no_exclude_test_overlap"]
    )  # fmt: skip
    start, data, objective, evaluation, scale, training, card = arguments
    assert (start.audio_model, start.text_model, start.freeze_text, start.freeze_audio) == (
        "a",
        "t",
        True,
        False,
    )
    assert data.languages == ["eng", "jpn", "fra"]  # ISO 639-1 codes are accepted and stored as ISO 639-3
    assert data.loader_options == {"splits": ["train", "test"]} and data.exclude_test_overlap is False
    assert (data.train_splits, data.test_split, data.missing) == (["train"], "test", "error")
    assert objective.objective == "triplet" and objective.objective_args == {"margin": 0.3}
    assert evaluation.map_cutoffs == [10, 16] and evaluation.eval_scoring == "head"
    assert training.output_dir == str(tmp_path) and training.max_steps == 7 and training.learning_rate == 1e-4
    assert (scale.train_shards, scale.audio_features, scale.embedding_chunk_size) == ([], "collator", None)
    assert (scale.stream_captions, scale.shuffle_buffer_size) == ("random", 1000)
    assert (card.license, card.license_name, card.license_link, card.base_model) == (None, None, None, [])


def test_card_flags_set_the_licence_and_the_base_models():
    card = parse_train_arguments(
        [
            "--dataset",
            "esc50",
            "--license",
            "CC-BY-NC-4.0",
            "--base_model",
            "MIT/ast-base",
            "google-bert/bert-base",
        ]
    ).card
    assert (card.license, card.base_model) == ("cc-by-nc-4.0", ["MIT/ast-base", "google-bert/bert-base"])
    other = parse_train_arguments(
        ["--dataset", "x", "--license", "other", "--license_name", "lab-1.0", "--license_link", "LICENSE"]
    ).card
    assert (other.license, other.license_name, other.license_link) == ("other", "lab-1.0", "LICENSE")


def test_training_at_scale_flags():
    *_, scale, training, _ = parse_train_arguments(
        ["--dataset", "clotho", "--train_shards", "a/*.tar", "b/*.tar", "--stream_captions", "all",
         "--shuffle_buffer_size", "0", "--audio_features", "device", "--embedding_chunk_size", "64",
         "--max_steps", "100"]
    )  # fmt: skip
    assert scale.train_shards == ["a/*.tar", "b/*.tar"] and scale.stream_captions == "all"
    assert (scale.shuffle_buffer_size, scale.audio_features, scale.embedding_chunk_size) == (0, "device", 64)


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_a_config_file_with_flags_overriding_it(tmp_path, suffix):
    values = {
        "dataset": "audiofolder",
        "data_dir": "~/sounds",
        "model_name_or_path": "runs/base",
        "objective_args": {"temperature": 0.05},  # a mapping, not a JSON string
        "languages": "fr",  # a scalar for a list
        "learning_rate": "1e-4",  # how YAML reads 1e-4
        "max_steps": 5,
        "output_dir": str(tmp_path / "from-file"),
        "freeze_audio": True,
    }
    config = tmp_path / f"run.{suffix}"
    config.write_text(json.dumps(values))  # JSON is YAML too
    start, data, objective, _, _, training, _ = parse_train_arguments([str(config), "--max_steps", "9"])
    assert training.max_steps == 9 and training.learning_rate == 1e-4  # the flag wins over the file
    assert training.output_dir == str(tmp_path / "from-file") and start.freeze_audio is True
    assert (data.dataset, data.data_dir, data.languages) == ("audiofolder", "~/sounds", ["fra"])
    assert start.model_name_or_path == "runs/base" and objective.objective_args == {"temperature": 0.05}


def test_config_file_errors(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("dataset: clotho\nlearning_rat: 0.1\nmax_step: 3\n")
    assert "run.yaml: unknown option(s) ['learning_rat', 'max_step']; keys are the flags without dashes." in (
        parse_error([str(config)], capsys)
    )
    config.write_text("- dataset\n- clotho\n")
    with pytest.raises(SystemExit, match="run.yaml must hold a mapping of option names to values"):
        parse_train_arguments([str(config)])
    config.write_text("dataset: [clotho\n")
    with pytest.raises(SystemExit, match="run.yaml is not valid YAML"):
        parse_train_arguments([str(config)])
    with pytest.raises(SystemExit, match="config file .*absent.yaml not found"):
        parse_train_arguments([str(tmp_path / "absent.yaml")])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "the following arguments are required: --dataset"),
        (
            ["--dataset", "x", "--objective_args", "{margin: 1}"],
            "--objective_args must be a JSON object, e.g.",
        ),
        (["--dataset", "x", "--objective_args", "[1]"], "--objective_args must be a JSON object (a mapping"),
        (["--dataset", "x", "--loader_options", "3"], "--loader_options must be a JSON object (a mapping"),
        (
            ["--dataset", "x", "--missing", "ignore"],
            "--missing must be one of ['error', 'skip'], got 'ignore'.",
        ),
        (
            ["--dataset", "x", "--overlap_by", "name"],
            "--overlap_by ['name']: choose from ['source_id', 'content'].",
        ),
        (
            ["--dataset", "x", "--feature_backend", "numpy"],
            "--feature_backend must be one of ['transformers', 'torch']",
        ),
        (
            ["--dataset", "x", "--eval_scoring", "plan"],
            "--eval_scoring must be one of ['head', 'ot_plan'], got 'plan'.",
        ),
        (["--dataset", "x", "--languages", "jp"], "Language code 'jp' is not an ISO 639-1 ('ja')"),
        (
            ["--dataset", "x", "--max_steps", "many"],
            "argument --max_steps/--max-steps: invalid int value: 'many'",
        ),
        (
            ["--dataset", "x", "--audio_features", "gpu"],
            "--audio_features must be one of ['device', 'collator'], got 'gpu'.",
        ),
        (
            ["--dataset", "x", "--stream_captions", "first"],
            "--stream_captions must be one of ['random', 'all'], got 'first'.",
        ),
        (
            ["--dataset", "x", "--shuffle_buffer_size", "-1"],
            "--shuffle_buffer_size must be 0 or more, got -1.",
        ),
        (
            ["--dataset", "x", "--embedding_chunk_size", "0"],
            "embedding_chunk_size must be a positive int, got 0.",
        ),
        (
            ["--dataset", "x", "--eval_window_seconds", "2"],
            "--eval_window_seconds set(s) the windows of --eval_window_pooling; give it too.",
        ),
        (
            ["--dataset", "x", "--eval_window_pooling", "mean", "--eval_hop_seconds", "-1"],
            "--eval_hop_seconds must be a positive number of seconds, got -1.0.",
        ),
        (
            ["--dataset", "x", "--license", "Apache License 2.0"],
            "--license 'Apache License 2.0' is not a licence id: give the Hub's id of the licence (an SPDX id such "
            "as apache-2.0, mit or cc-by-nc-4.0), or other with --license_name and --license_link.",
        ),
        (
            ["--dataset", "x", "--license", "other", "--license_link", "LICENSE"],
            "--license other needs --license_name: a short id of the licence (e.g. my-license-1.0)",
        ),
        (
            ["--dataset", "x", "--license_name", "mine"],
            "--license_name and --license_link name a licence the Hub does not list: give --license other with them.",
        ),
        (
            ["--dataset", "x", "--base_model", "/home/me/towers/ast"],
            "--base_model /home/me/towers/ast: not a Hub repository id (owner/name), or a local path",
        ),
        (
            ["--dataset", "x", "--eval_window_pooling", "median"],
            "argument --eval_window_pooling/--eval-window-pooling: invalid choice: 'median' (choose from 'mean', 'max')",
        ),
    ],
)
def test_bad_arguments_are_named(flags, message, capsys):
    assert message in parse_error(flags, capsys)


def test_train_help_through_the_command_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: hf-atr train")
    for expected in (
        "starting point (one of --model_name_or_path, --clap_model, --pe_audio_model, --audio_model + --text_model):",
        "--dataset DATASET",
        "--test_size TEST_SIZE",
        "--objective_args OBJECTIVE_ARGS",
        "--relevance RELEVANCE",
        "training at scale:",
        "--train_shards",
        "--embedding_chunk_size EMBEDDING_CHUNK_SIZE",
        "model card:",
        "--license LICENSE",
        "--base_model BASE_MODEL [BASE_MODEL ...]",
        "--per_device_train_batch_size",  # TrainingArguments
        "--gradient_accumulation_steps",
        "flags override the file",
    ):
        assert expected in text, expected


@pytest.mark.parametrize(
    ("cores", "local_processes", "expected"),
    [(1, None, 0), (2, None, 1), (16, None, 8), (64, None, 8), (16, "4", 3)],
)
def test_unset_dataloader_workers_come_from_the_usable_cores(monkeypatch, cores, local_processes, expected):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    if local_processes is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_processes)
    arguments = parse_train_arguments(["--dataset", "x"])
    assert arguments.training.dataloader_num_workers == expected
    assert arguments.scale.data_loading == {
        "dataloader_num_workers": expected,
        "chosen_by": "default: min(8, usable cores per process - 1)",
        "usable_cores": cores,
        "processes_on_the_machine": int(local_processes or 1),
    }


def test_given_dataloader_workers_are_kept_from_flags_and_config_files(monkeypatch, tmp_path):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    for argv in (["--dataloader_num_workers", "0"], ["--dataloader-num-workers", "3"]):
        arguments = parse_train_arguments(["--dataset", "x", *argv])
        assert arguments.training.dataloader_num_workers == int(argv[1])
        assert arguments.scale.data_loading == {
            "dataloader_num_workers": int(argv[1]),
            "chosen_by": "--dataloader_num_workers",
        }
    config = tmp_path / "run.yaml"
    config.write_text("dataset: x\ndataloader_num_workers: 2\n")
    assert parse_train_arguments([str(config)]).training.dataloader_num_workers == 2
    assert (
        parse_train_arguments(["--dataset", "x", "--dataloader_num_workers", "-1"])
        .scale.data_loading["chosen_by"]
        .startswith("default")
    )


def test_bad_dataloader_worker_settings_are_named(monkeypatch, capsys):
    assert "--dataloader_num_workers must be 0 or more (or -1 for the default), got -2." in parse_error(
        ["--dataset", "x", "--dataloader_num_workers", "-2"], capsys
    )
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert (
        "--dataloader_prefetch_factor needs DataLoader workers, and the default on this machine is 0 (1 usable "
        "core(s) for 1 process(es)): give --dataloader_num_workers too."
        in parse_error(["--dataset", "x", "--dataloader_prefetch_factor", "2"], capsys)
    )


def test_the_default_worker_count_is_documented_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"Unset (or -1): {DEFAULT_WORKERS_RULE}" in text and "(os.sched_getaffinity)" in text


def test_torch_compile_is_auto_by_default_and_compiles_on_cuda_only(tmp_path):
    base = ["--dataset", "synthcaps", "--output_dir", str(tmp_path)]
    training = parse_train_arguments(base).training
    assert training.torch_compile is False and training.torch_compile_backend is None  # auto, on this CPU
    assert training.logging_nan_inf_filter is False  # the trainer's own non-finite check covers it
    for flags, expected in ((["--torch_compile", "true"], True), (["--torch_compile", "FALSE"], False),
                            (["--torch_compile"], True), (["--torch_compile", "auto"], False)):  # fmt: skip
        assert parse_train_arguments([*base, *flags]).training.torch_compile is expected, flags
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset: synthcaps\noutput_dir: {tmp_path}\ntorch_compile: true\n")
    assert parse_train_arguments([str(config)]).training.torch_compile is True
    on_cuda = SimpleNamespace(torch_compile=None, torch_compile_backend=None, device=torch.device("cuda"))
    resolve_torch_compile(on_cuda)
    assert (on_cuda.torch_compile, on_cuda.torch_compile_backend) == (True, "inductor")


def test_a_bad_torch_compile_value_is_named(tmp_path, capsys):
    message = parse_error(
        ["--dataset", "synthcaps", "--output_dir", str(tmp_path), "--torch_compile", "maybe"], capsys
    )
    assert "--torch_compile" in message and "'maybe'" in message
