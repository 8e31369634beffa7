"""``hf-atr train`` end to end: starting points, data, the files it writes, and the README recipe."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from tiny_models import (
    SAMPLING_RATE,
    SOUNDS,
    clip_waveform,
    make_model,
    make_processor,
    save_tiny_clap_checkpoint,
    save_tiny_pe_audio_checkpoint,
    write_sound_folder,
)
from transformers import AutoModel

from hf_atr.cli import main
from hf_atr.commands.common import quiet_datasets_progress_bars
from hf_atr.commands.train.command import run_train_command
from hf_atr.commands.train.fine_tune import objective_config, run_training, starting_point_base_model
from hf_atr.commands.train.model_arguments import ObjectiveArguments, StartingPointArguments
from hf_atr.commands.train.train_arguments import parse_train_arguments
from hf_atr.data.audio import encode_wav
from hf_atr.data.schema import corpus_provenance
from hf_atr.data.shards import write_audio_text_shards
from hf_atr.training.streaming import StreamingPairs
from hf_atr.training.trainer import AtrTrainer

README = Path(__file__).resolve().parents[2] / "README.md"
RECIPE_HEADING = "## Fine-tune on your own folder: `hf-atr train`"
QUICK = [
    "--max_steps",
    "2",
    "--per_device_train_batch_size",
    "8",
    "--learning_rate",
    "1e-3",
    "--report_to",
    "none",
]


def readme_recipe() -> list[list[str]]:
    """The commands of the README's recipe, each as its argument list (``&&`` separates two on one line)."""
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index(RECIPE_HEADING) :], re.DOTALL).group(1)
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        for command in line.split("&&"):
            if command.strip():
                commands.append(shlex.split(command))
    return commands


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in ``tmp_path``, with the features cache there too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    return tmp_path


@pytest.mark.slow
def test_the_readme_recipe_runs_end_to_end(in_tmp, towers, capsys):
    """train -> evaluate -> index/search on a folder of 16 clips, as the README writes the commands."""
    audio_tower, text_tower = towers
    (in_tmp / "audio-tower").symlink_to(audio_tower)
    (in_tmp / "text-tower").symlink_to(text_tower)
    names = write_sound_folder(in_tmp / "my_sounds", clips=16)
    commands = readme_recipe()
    assert [command[:2] for command in commands] == [
        ["hf-atr", "train"], ["hf-atr", "evaluate"], ["hf-atr", "index"], ["hf-atr", "search"],
    ]  # fmt: skip
    outputs = []
    for command in commands:
        assert main(command[1:]) == 0, command
        outputs.append(capsys.readouterr().out)
    model_dir = in_tmp / "my-model" / "model"
    assert {"config.json", "model.safetensors", "README.md"} <= {path.name for path in model_dir.iterdir()}
    trained = json.loads((in_tmp / "my-model" / "metrics.json").read_text())
    evaluated = json.loads((in_tmp / "my-model" / "test-metrics.json").read_text())
    assert trained["protocol"]["clips"] == evaluated["protocol"]["clips"] == 4  # --test_size 0.2 of 16 clips
    assert trained["protocol"]["corpus"]["layout"] == "held out at random from `train` (seed 42)"
    assert (
        evaluated["protocol"]["corpus"] == trained["protocol"]["corpus"]
    )  # the saved split keeps its provenance
    for key, value in trained["metrics"].items():  # the same model on the same clips, map cutoff 10 in both
        if key in evaluated["metrics"]:
            assert evaluated["metrics"][key] == pytest.approx(value, abs=1e-6), key
    assert trained["training"]["train_loss"] > 0 and trained["starting_point"].startswith("audio tower")
    assert "Model, processor and card saved to my-model/model" in outputs[0]
    assert "Indexed 16 audio file(s) from my_sounds into my-index" in outputs[2]
    hits = re.findall(r"^  \d\. (.+?)  [\d.]+-[\d.]+ s  score=", outputs[3], re.MULTILINE)
    assert len(hits) == 5 and set(hits) <= set(names)
    card = (model_dir / "README.md").read_text()
    assert "- held out at random (seed 42) as the test split: 4 of 16 clips; 12 remain here" in card
    assert "- overlap filter (by source_id and content): removed 0 of 12 clips" in card
    assert (
        "- data: Audio folder `test` (held out at random from `train` (seed 42)); 4 clips evaluated" in card
    )
    # The test set is named as what it is, with its size; no licence is claimed; no local path is written.
    assert result_name(model_dir) == "Audio folder: random hold-out of train, seed 42 (4 clips)"
    assert "license" not in card.split("---")[1] and "No licence was set when this card was written" in card
    assert "base_model" not in card.split("---")[1] and "tower" not in card.split("---")[1]
    assert "audio-tower" not in card and "text-tower" not in card and str(in_tmp) not in card
    assert trained["training_audio"] == {
        "clips": 12, "clips_cut_to_window": 0, "window_seconds": pytest.approx(1.015), "kept": "the first 1.01 s of each",
    }  # fmt: skip


@pytest.fixture
def datasets_bars_shown():
    """``datasets``' progress bars on within the test (whatever the session's switch), as they are by default."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    disabled = are_progress_bars_disabled()
    enable_progress_bars()
    yield
    if disabled:
        disable_progress_bars()


def test_a_training_run_shows_one_progress_bar_per_long_stage(in_tmp, towers, capsys, datasets_bars_shown):
    """hf-atr train on a folder: a bar for extracting the training clips' features and one for the training steps;
    none for saving the held-out test split (a fraction of a second), nor for loading or saving the models."""
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "my_sounds", clips=16)
    command = ["train", "--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset",
               "audiofolder", "--data_dir", "my_sounds", "--test_size", "0.2", "--output_dir", "run", *QUICK]  # fmt: skip
    assert main(command) == 0
    assert (in_tmp / "run" / "test_split").is_dir()  # the quick stage ran
    stderr = capsys.readouterr().err
    # tqdm draws a bar at 0 % when it starts: one start per bar, its description before the percentage.
    bars = [name.strip().rstrip(":") for name in re.findall(r"(?:^|[\r\n])([^\r\n%|]*?) +0%\|", stderr)]
    assert bars == ["Extracting audio features of split 'train'", ""], (
        stderr
    )  # "": the Trainer's bar of training steps


@pytest.mark.parametrize("disabled_before", [False, True])
def test_quiet_datasets_progress_bars_restores_the_switch_as_it_was(disabled_before):
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    disabled_in_the_session = are_progress_bars_disabled()
    (disable_progress_bars if disabled_before else enable_progress_bars)()
    try:
        with quiet_datasets_progress_bars():
            assert are_progress_bars_disabled()
        assert are_progress_bars_disabled() == disabled_before
    finally:
        (disable_progress_bars if disabled_in_the_session else enable_progress_bars)()


def result_name(model_dir: Path) -> str:
    """The dataset name of the model-index of the card in ``model_dir``."""
    return ModelCard.load(model_dir / "README.md").data.eval_results[0].dataset_name


@pytest.mark.slow
def test_training_clips_cut_to_the_window_are_counted_for_card_and_metrics(in_tmp, towers):
    """3 of the 6 training clips are longer than the towers' 1.015-s window; a second run reads the count kept
    beside the features cache, a run that streams them from the workers says it does not count them."""
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds" / "train", clips=6)
    write_sound_folder(in_tmp / "sounds" / "test", clips=2, seed=1)
    for index in (0, 2, 4):
        long_clip = np.tile(clip_waveform(index), 2)  # 2 s
        (in_tmp / "sounds" / "train" / f"clip {index}.wav").write_bytes(encode_wav(long_clip, SAMPLING_RATE))
    argv = ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
            "--data_dir", "sounds", "--features_cache_dir", "features", "--license", "cc-by-nc-4.0",
            "--base_model", "team/ast-tower", *QUICK]  # fmt: skip
    for run in ("first", "cached"):
        run_training(parse_train_arguments([*argv, "--output_dir", run]))
        record = json.loads((in_tmp / run / "metrics.json").read_text())["training_audio"]
        assert (record["clips"], record["clips_cut_to_window"]) == (6, 3), run
        card = (in_tmp / run / "model" / "README.md").read_text()
        assert (
            "- long clips: 3 of 6 training clips were longer than the feature extractor's 1.01-s window"
            in card
        )
        assert "license: cc-by-nc-4.0" in card and "base_model:\n- team/ast-tower" in card
    assert len(list((in_tmp / "features").glob("train-*.cuts.json"))) == 1
    run_training(parse_train_arguments([*argv, "--output_dir", "device", "--audio_features", "device"]))
    record = json.loads((in_tmp / "device" / "metrics.json").read_text())["training_audio"]
    assert (record["clips"], record["clips_cut_to_window"]) == (6, None)
    assert record["kept"].startswith("cut to a 1.015-s window at a random offset")
    card = (in_tmp / "device" / "model" / "README.md").read_text()
    assert (
        "- long clips: 6 training clips; those longer than the feature extractor's 1.01-s window were cut"
        in card
    )


def test_a_starting_point_named_by_its_hub_id_is_the_base_model(in_tmp):
    (in_tmp / "runs" / "base").mkdir(parents=True)
    assert starting_point_base_model(StartingPointArguments(clap_model="laion/clap-htsat-unfused")) == [
        "laion/clap-htsat-unfused"
    ]
    assert starting_point_base_model(StartingPointArguments(model_name_or_path="team/atr")) == ["team/atr"]
    assert starting_point_base_model(StartingPointArguments(model_name_or_path="runs/base")) is None  # local
    assert starting_point_base_model(StartingPointArguments(audio_model="a/b", text_model="c/d")) is None


def test_checkpoints_validation_and_a_saved_dataset_dict(in_tmp, towers):
    """--eval_strategy evaluates the validation split during training; checkpoints land in --output_dir."""
    audio_tower, text_tower = towers
    from hf_atr.data.audio_text_folder import load_audio_text_folder

    for split, clips in (("train", 12), ("validation", 4), ("test", 4)):
        write_sound_folder(in_tmp / "corpus" / split, clips=clips, seed=len(split))
    load_audio_text_folder(in_tmp / "corpus").save_to_disk(in_tmp / "saved")
    arguments = parse_train_arguments(
        ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--projection_dim", "8",
         "--dataset", "saved", "--output_dir", "run", "--save_steps", "1", "--eval_strategy", "steps",
         "--eval_steps", "1", "--scoring", "euclidean", *QUICK]
    )  # fmt: skip
    result = run_training(arguments)
    assert sorted(path.name for path in (in_tmp / "run").glob("checkpoint-*")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    history = json.loads((in_tmp / "run" / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    assert sum("eval_t2a_R@1" in entry for entry in history) == 2
    model = AutoModel.from_pretrained(in_tmp / "run" / "model")
    assert model.config.projection_dim == 8 and model.config.scoring == "euclidean"
    assert result.final.protocol["clips"] == 4 and result.test_name == "Audio folder test"


def test_an_exact_copy_of_a_test_clip_is_removed_from_training(in_tmp, towers):
    """The test split comes from another dataset (--test_dataset); a renamed copy of one of its clips among the
    training clips is removed by the overlap filter, and the card says so."""
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds", clips=8)
    write_sound_folder(in_tmp / "other" / "test", clips=4, seed=1)
    (in_tmp / "sounds" / "renamed copy.wav").write_bytes(
        (in_tmp / "other" / "test" / "clip 2.wav").read_bytes()
    )
    with (in_tmp / "sounds" / "metadata.csv").open("a") as handle:
        handle.write("renamed copy.wav,a high beep tone\n")
    result = run_training(
        parse_train_arguments(
            ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
             "--data_dir", "sounds", "--test_dataset", "audiofolder", "--test_data_dir", "other", "--output_dir",
             "run", *QUICK]
        )
    )  # fmt: skip
    assert result.test_name == "Audio folder test" and result.final.protocol["clips"] == 4
    card = (in_tmp / "run" / "model" / "README.md").read_text()
    assert (
        "- overlap filter (by source_id and content): removed 1 of 9 clips (0 by source id, 1 by audio content) "
        "that are clips of Audio folder test (4 reference clips)"
    ) in card
    assert "- source: Audio folder `train` (AudioFolder metadata): 9 clips found" in card


@pytest.mark.slow
def test_continuing_from_an_hf_atr_model_with_new_objective_hyperparameters(in_tmp):
    processor = make_processor()
    make_model(processor=processor, objective={"name": "triplet", "margin": 0.3}).save_pretrained("base")
    processor.save_pretrained("base")
    write_sound_folder(in_tmp / "sounds", clips=12)
    common = ["--model_name_or_path", "base", "--dataset", "audiofolder", "--data_dir", "sounds",
              "--test_size", "4", "--freeze_audio", *QUICK]  # fmt: skip
    run_training(parse_train_arguments([*common, "--output_dir", "a", "--objective_args", '{"margin": 0.5}']))
    continued = AutoModel.from_pretrained("a/model")
    assert continued.config.objective == {"name": "triplet", "margin": 0.5} and continued.config.freeze_audio
    base = AutoModel.from_pretrained("base")
    for name, tensor in base.audio_model.state_dict().items():  # the frozen tower did not move
        torch.testing.assert_close(continued.audio_model.state_dict()[name], tensor)
    assert not torch.equal(continued.text_projection.weight, base.text_projection.weight)
    run_training(parse_train_arguments([*common, "--output_dir", "b", "--objective", "contrastive"]))
    assert AutoModel.from_pretrained("b/model").config.objective == {"name": "contrastive"}


@pytest.mark.slow
def test_resuming_from_a_checkpoint(in_tmp, towers, monkeypatch):
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds", clips=8)
    argv = ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
            "--data_dir", "sounds", "--test_size", "2", "--output_dir", "run", "--save_steps", "1", *QUICK]  # fmt: skip
    run_training(parse_train_arguments(argv))
    steps = []
    training_step = AtrTrainer.training_step
    monkeypatch.setattr(
        AtrTrainer,
        "training_step",
        lambda self, *args, **kwargs: steps.append(1) or training_step(self, *args, **kwargs),
    )
    run_training(
        parse_train_arguments([*argv, "--max_steps", "3", "--resume_from_checkpoint", "run/checkpoint-2"])
    )
    assert len(steps) == 1  # steps 1-2 came from the checkpoint
    assert (
        json.loads((in_tmp / "run" / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
    )


@pytest.mark.slow
def test_default_dataloader_workers_are_recorded_and_resume_exactly(in_tmp, towers, monkeypatch):
    """Unset --dataloader_num_workers: 2 workers on 3 usable cores, in metrics.json and the card; the workers decode
    and randomly crop the raw audio (sent as float32: on the CPU, AtrTrainer has the workers scale 16-bit PCM), and
    a run resumed from a checkpoint ends with the parameters of the uninterrupted run, bit for bit, across an epoch
    boundary."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds", clips=8)
    argv = ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
            "--data_dir", "sounds", "--test_size", "2", "--audio_features", "device", "--save_steps", "2",
            *QUICK, "--max_steps", "4", "--per_device_train_batch_size", "4"]  # fmt: skip
    batch_types = []
    training_step = AtrTrainer.training_step

    def recording_step(self, model, inputs, *args, **kwargs):
        batch_types.append((self.args.dataloader_num_workers, inputs["waveforms"].dtype))
        return training_step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(AtrTrainer, "training_step", recording_step)
    run_training(parse_train_arguments([*argv, "--output_dir", "run"]))
    assert batch_types == [(2, torch.float32)] * 4  # 12 caption pairs, batches of 4: epoch 2 from step 4
    metrics = json.loads((in_tmp / "run" / "metrics.json").read_text())
    assert metrics["data_loading"] == {
        "dataloader_num_workers": 2,
        "chosen_by": "default: min(8, usable cores per process - 1)",
        "usable_cores": 3,
        "processes_on_the_machine": 1,
    }
    assert "- dataloader_num_workers: 2" in (in_tmp / "run" / "model" / "README.md").read_text()
    run_training(
        parse_train_arguments(
            [*argv, "--output_dir", "resumed", "--resume_from_checkpoint", "run/checkpoint-2"]
        )
    )
    assert len(batch_types) == 6
    uninterrupted = load_file(in_tmp / "run" / "checkpoint-4" / "model.safetensors")
    resumed = load_file(in_tmp / "resumed" / "checkpoint-4" / "model.safetensors")
    assert uninterrupted.keys() == resumed.keys()
    for name, expected in uninterrupted.items():
        torch.testing.assert_close(resumed[name], expected, rtol=0, atol=0, msg=name)


def test_the_command_flags_an_incomplete_test_set(monkeypatch, tmp_path, capsys):
    from hf_atr.commands.train import fine_tune
    from hf_atr.training.final_model import FinalModel

    protocol = {"clips": 43, "official_clips": 975, "captions": 215}
    final = FinalModel({"t2a_R@1": 0.5}, protocol, tmp_path / "model", tmp_path / "metrics.json")
    monkeypatch.setattr(
        fine_tune, "run_training", lambda arguments: fine_tune.TrainResult(final, {}, "x", "AudioCaps test")
    )
    assert run_train_command(parse_train_arguments(["--dataset", "audiocaps"])) == 0
    output = capsys.readouterr().out
    assert "test retrieval on AudioCaps test (43 clips, 215 captions" in output
    assert "Incomplete test set: 43 of the 975 clips of the official split." in output


def test_objective_config_merges_or_replaces():
    def arguments(name=None, values=None):
        return ObjectiveArguments(objective=name, objective_args=values)

    saved = {"name": "dart", "uwd_weight": 0.1}
    assert objective_config(arguments(), saved) is None  # keep the starting point's
    assert objective_config(arguments(values={"uwd_reg": 0.05}), saved) == {**saved, "uwd_reg": 0.05}
    assert objective_config(arguments("dart", {"uwd_reg": 0.05}), saved) == {**saved, "uwd_reg": 0.05}
    assert objective_config(arguments("iot", {"reg": 0.1}), saved) == {"name": "iot", "reg": 0.1}
    assert objective_config(arguments(values={"temperature": 0.05}), None) == {
        "name": "contrastive", "temperature": 0.05,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--objective", "contrastiv"], "Unknown objective 'contrastiv'. Registered objectives: ask, cacl, contrastive"),
        (["--objective_args", '{"marg": 1}'], "Objective 'triplet' got unknown hyperparameter(s) ['marg']; it accepts"),
    ],
)  # fmt: skip
def test_a_bad_objective_stops_the_run_before_the_data_is_read(in_tmp, flags, message):
    processor = make_processor()
    make_model(processor=processor, objective={"name": "triplet"}).save_pretrained("base")
    arguments = parse_train_arguments(["--model_name_or_path", "base", "--dataset", "absent-data", *flags])
    with pytest.raises(SystemExit) as exit_info:
        run_train_command(arguments)
    assert message in str(exit_info.value)


def test_starting_from_a_clap_checkpoint(in_tmp):
    save_tiny_clap_checkpoint(in_tmp / "clap")
    write_sound_folder(in_tmp / "sounds", clips=8)
    result = run_training(
        parse_train_arguments(
            ["--clap_model", "clap", "--dataset", "audiofolder", "--data_dir", "sounds", "--test_size", "0.25",
             "--output_dir", "run", "--objective", "iot", *QUICK]
        )
    )  # fmt: skip
    model = AutoModel.from_pretrained(in_tmp / "run" / "model")
    assert model.config.projection == "mlp" and model.config.separate_logit_scales
    assert model.config.objective["name"] == "iot" and result.starting_point == "CLAP checkpoint clap"
    assert "`iot`" in (in_tmp / "run" / "model" / "README.md").read_text()


@pytest.mark.slow
def test_starting_from_a_pe_audio_checkpoint_trains_with_sigmoid_and_reloads(in_tmp):
    save_tiny_pe_audio_checkpoint(in_tmp / "pe", scale=2.5, bias=-1.5)
    write_sound_folder(in_tmp / "sounds", clips=8)
    result = run_training(
        parse_train_arguments(
            ["--pe_audio_model", "pe", "--dataset", "audiofolder", "--data_dir", "sounds", "--test_size", "0.25",
             "--output_dir", "run", *QUICK]
        )
    )  # fmt: skip
    assert result.starting_point == "PE-Audio checkpoint pe"
    assert result.train_metrics["train_loss"] > 0 and np.isfinite(result.train_metrics["train_loss"])
    model = AutoModel.from_pretrained(in_tmp / "run" / "model")
    assert model.config.objective == {"name": "sigmoid"}
    assert (model.config.scoring, model.config.logit_scale_form, model.config.logit_bias) == (
        "dot",
        "raw",
        True,
    )
    # Trained from the checkpoint's scale and bias (not SigLIP's initial 10 and -10), which the steps moved.
    scale, bias = model.scoring_head.logit_scale.item(), model.scoring_head.logit_bias.item()
    assert scale != 2.5 and bias != -1.5 and abs(scale - 2.5) < 0.1 and abs(bias + 1.5) < 0.1
    assert "`sigmoid`" in (in_tmp / "run" / "model" / "README.md").read_text()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "Give one starting point: --model_name_or_path (an hf-atr model), --clap_model (a CLAP checkpoint), "
             "--pe_audio_model (a PE-Audio checkpoint), or --audio_model with --text_model; got none."),
        (["--clap_model", "c", "--pe_audio_model", "p"], "got ['--clap_model', '--pe_audio_model']"),
        (["--clap_model", "c", "--audio_model", "a"], "got ['--clap_model', '--audio_model/--text_model']"),
        (["--audio_model", "a"], "--audio_model and --text_model go together"),
        (["--model_name_or_path", "base", "--projection_dim", "8"], "['projection_dim'] are set by the hf-atr model base"),
    ],
)  # fmt: skip
def test_starting_point_errors(in_tmp, flags, message):
    processor = make_processor()
    make_model(processor=processor).save_pretrained("base")
    processor.save_pretrained("base")
    write_sound_folder(in_tmp / "sounds", clips=4)
    data = ["--dataset", "audiofolder", "--data_dir", "sounds", "--test_size", "1", "--output_dir", "run"]
    with pytest.raises(ValueError) as error:
        run_training(parse_train_arguments([*flags, *data]))
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "The dataset has no split 'test' (its splits: ['train']). Name one with --test_split, hold out training "
             "clips with --test_size (e.g. 0.1), or take the test split of another dataset with --test_dataset."),
        (["--test_size", "1", "--eval_strategy", "steps"], "--eval_strategy evaluates the 'validation' split during "
         "training, which the dataset lacks (its splits: ['train']); name one with --validation_split or pass "
         "--eval_strategy no."),
        (["--test_size", "1", "--languages", "fra"], "The training data has no captions in ['fra']; its languages: "
         "['eng'] (add translations with hf_atr.data.load_translations and save the DatasetDict)."),
        (["--test_split", "train"], "--test_split 'train' is also in --train_splits ['train']."),
        (["--train_splits", "dev"], "--train_splits: the dataset has no split(s) ['dev']; its splits: ['train']."),
        (["--test_size", "1", "--loader_options", '{"folds": [1]}'], "Loader 'audiofolder' takes no option(s) ['folds']; "
         "its options: ['splits', 'missing', 'encoding']."),
        (["--test_size", "1", "--test_dataset", "other"], "'other' is neither a loader (audiocaps, clotho, esc50, "
         "wavcaps, audiofolder) nor a directory saved with save_to_disk."),
    ],
)  # fmt: skip
def test_data_errors_stop_before_any_model_is_built(in_tmp, flags, message, capsys):
    write_sound_folder(in_tmp / "sounds", clips=4)
    arguments = parse_train_arguments(
        ["--model_name_or_path", "absent-model", "--dataset", "audiofolder", "--data_dir", "sounds",
         "--output_dir", "run", *flags]
    )  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:  # the command prefixes the message; no model was loaded
        run_train_command(arguments)
    assert str(exit_info.value) == f"hf-atr train: {message}"


def test_a_bad_relevance_file_stops_the_run_before_training(in_tmp, towers):
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds", clips=6)
    (in_tmp / "judged.csv").write_text("caption,file_name,relevance\nno such caption,nothing.wav,1\n")
    arguments = parse_train_arguments(
        ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
         "--data_dir", "sounds", "--test_size", "2", "--output_dir", "run", "--relevance", "judged.csv", *QUICK]
    )  # fmt: skip
    with pytest.raises(ValueError, match="judged.csv"):
        run_training(arguments)
    assert not (in_tmp / "run").exists()


def count_featurized_clips(monkeypatch) -> list[int]:
    """The number of clips of every ``AtrProcessor._featurize`` call from now on, one entry per call."""
    from hf_atr.processing_atr import AtrProcessor

    extracted = []
    featurize = AtrProcessor._featurize

    def counting(self, audio, *args, **kwargs):
        extracted.append(len(audio))
        return featurize(self, audio, *args, **kwargs)

    monkeypatch.setattr(AtrProcessor, "_featurize", counting)
    return extracted


@pytest.mark.slow
def test_features_are_extracted_once_and_reextracted_when_a_file_changes(in_tmp, towers, monkeypatch):
    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds" / "train", clips=6)
    write_sound_folder(in_tmp / "sounds" / "test", clips=2, seed=1)
    extracted = count_featurized_clips(monkeypatch)
    argv = ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
            "--data_dir", "sounds", "--output_dir", "run", "--features_cache_dir", "features", *QUICK]  # fmt: skip
    run_training(parse_train_arguments(argv))
    # the training split into the cache; the test split read from its audio by the evaluator (its protocol counts
    # the clips cut to the window)
    assert sum(extracted) == 6 + 2 and [path.name[:6] for path in (in_tmp / "features").glob("*.arrow")] == [
        "train-"
    ]
    run_training(parse_train_arguments(argv))
    assert sum(extracted) == 6 + 2 + 2  # the second run read the training split's features
    write_sound_folder(in_tmp / "sounds" / "train", clips=6, seed=7)  # same names, other audio
    run_training(parse_train_arguments(argv))
    assert sum(extracted) == 6 + 2 + 2 + 6 + 2 and len(list((in_tmp / "features").glob("train-*.arrow"))) == 2


def test_a_dataset_saved_with_its_features_is_used_as_it_is(in_tmp, monkeypatch):
    from hf_atr.data.audio_text_folder import load_audio_text_folder
    from hf_atr.processing_atr import AtrProcessor

    processor = make_processor()
    make_model(processor=processor).save_pretrained("base")
    processor.save_pretrained("base")
    for split, clips in (("train", 6), ("test", 2)):
        write_sound_folder(in_tmp / "sounds" / split, clips=clips)
    featurized = processor.extract_audio_features(load_audio_text_folder("sounds"))
    featurized.save_to_disk("features")
    featurized.remove_columns("input_values").save_to_disk("bare")
    monkeypatch.setattr(
        AtrProcessor, "_featurize", lambda *args, **kwargs: pytest.fail("features re-extracted")
    )
    argv = ["--model_name_or_path", "base", "--dataset", "features", "--output_dir", "run", *QUICK]
    result = run_training(parse_train_arguments(argv))
    assert result.final.protocol["clips"] == 2 and result.test_name == "Audio folder test"
    card = (in_tmp / "run" / "model" / "README.md").read_text()
    assert "- overlap filter (by source_id): removed 0 of 6 clips" in card  # no audio: no content hash
    with pytest.raises(
        ValueError, match=r"The test split has neither an 'audio' column nor the features 'input_values'"
    ):
        run_training(parse_train_arguments([*argv[:3], "bare", *argv[4:]]))


def test_push_to_hub_uploads_the_final_model_with_its_card(in_tmp, towers):
    from unittest import mock

    from huggingface_hub import HfApi

    audio_tower, text_tower = towers
    write_sound_folder(in_tmp / "sounds", clips=6)
    uploaded = {}

    def fake_create_commit(self, repo_id, operations, **kwargs):
        uploaded.update(
            {operation.path_in_repo: Path(operation.path_or_fileobj).read_bytes() for operation in operations}
        )

    with (
        mock.patch.object(
            HfApi, "create_repo", return_value=mock.Mock(repo_id="team/my-model")
        ) as create_repo,
        mock.patch.object(HfApi, "create_commit", fake_create_commit),
    ):
        run_training(
            parse_train_arguments(
                ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "audiofolder",
                 "--data_dir", "sounds", "--test_size", "2", "--output_dir", "run", "--push_to_hub",
                 "--hub_model_id", "team/my-model", "--save_steps", "1", "--license", "other", "--license_name",
                 "lab-terms-1.0", "--license_link", "LICENSE", *QUICK]
            )
        )  # fmt: skip
    assert create_repo.call_count == 1  # the final model only, not every checkpoint
    assert {"config.json", "model.safetensors", "README.md"} <= set(uploaded)
    card = uploaded["README.md"].decode()
    assert "Protocol:" in card and "held out at random (seed 42) as the test split: 2 of 6 clips" in card
    assert "license: other\nlicense_name: lab-terms-1.0\nlicense_link: LICENSE" in card
    assert "## Licence\n\n`other`: [lab-terms-1.0](LICENSE)" in card


def test_languages_train_on_translations(in_tmp, towers):
    """--languages eng fra with a saved DatasetDict that carries French translations (kcl batches)."""
    audio_tower, text_tower = towers
    from hf_atr.data.audio_text_folder import load_audio_text_folder

    write_sound_folder(in_tmp / "sounds", clips=8)
    corpus = load_audio_text_folder("sounds")
    french = {captions: [f"{caption} noise" for caption in captions] for captions in SOUNDS.values()}
    corpus = corpus.map(lambda row: {"translations": {"fra": french[tuple(row["captions"])]}})
    corpus.save_to_disk("saved")
    result = run_training(
        parse_train_arguments(
            ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "saved",
             "--test_size", "2", "--output_dir", "run", "--languages", "eng", "fr", "--objective", "kcl", *QUICK]
        )
    )  # fmt: skip
    assert result.final.protocol["languages"] == ["eng", "fra"] and "MRV" in result.final.metrics
    assert corpus_provenance(corpus["train"])["corpus"] == "Audio folder"


def _saved_corpus_with_shards(folder: Path) -> None:
    """A folder corpus saved with train and test splits, and its training clips written as 2 WebDataset shards."""
    from hf_atr.data.audio_text_folder import load_audio_text_folder

    for split, clips in (("train", 8), ("test", 4)):
        write_sound_folder(folder / "corpus" / split, clips=clips, seed=len(split))
    corpus = load_audio_text_folder(folder / "corpus")
    corpus.save_to_disk(folder / "saved")
    write_audio_text_shards(corpus["train"], folder / "shards", num_shards=2)


@pytest.mark.parametrize("streamed", [True, False], ids=["shards", "saved splits"])
def test_training_at_scale_flags_reach_the_trainer(in_tmp, towers, monkeypatch, streamed):
    """--train_shards (streamed), --audio_features device and --embedding_chunk_size: what AtrTrainer trains with."""
    audio_tower, text_tower = towers
    _saved_corpus_with_shards(in_tmp)
    seen = {}
    training_step = AtrTrainer.training_step

    def recording_step(self, model, inputs, *args, **kwargs):
        seen.setdefault("train_dataset", self.train_dataset)
        seen.setdefault("chunk", self.embedding_chunk_size)
        seen.setdefault("batch_keys", set(inputs))
        seen.setdefault("device_features", self.device_features is not None)
        return training_step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(AtrTrainer, "training_step", recording_step)
    data = ["--train_shards", "shards/*.tar", "--no_exclude_test_overlap"] if streamed else []
    result = run_training(
        parse_train_arguments(
            ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "saved",
             "--output_dir", "run", "--audio_features", "device", "--embedding_chunk_size", "3", *data, *QUICK]
        )
    )  # fmt: skip
    assert seen["chunk"] == 3 and seen["device_features"] and "waveforms" in seen["batch_keys"]
    assert isinstance(seen["train_dataset"], StreamingPairs) == streamed
    assert result.final.protocol["clips"] == 4 and result.train_metrics["train_loss"] > 0
    card = (in_tmp / "run" / "model" / "README.md").read_text()
    assert ("shards shards/*.tar" in card) == streamed


def test_bf16_training_featurises_on_the_device_outside_the_forward_s_autocast(in_tmp, towers, monkeypatch):
    """hf-atr train --bf16 --audio_features device (--use_cpu here): the forward runs under accelerate's bfloat16
    autocast, the waveforms are featurised before it, with autocast off, into float32 features, and the run trains."""
    from hf_atr.training import device_inputs as device_inputs_module

    audio_tower, text_tower = towers
    _saved_corpus_with_shards(in_tmp)
    featurised, forwards = [], []
    featurize_waveforms = device_inputs_module.featurize_waveforms

    def recording_featurize(batch, features, **kwargs):
        inputs = featurize_waveforms(batch, features, **kwargs)
        audio = [value for key, value in inputs.items() if key.startswith("input_") and key != "input_ids"]
        featurised.append((torch.is_autocast_enabled("cpu"), [value.dtype for value in audio]))
        return inputs

    monkeypatch.setattr(device_inputs_module, "featurize_waveforms", recording_featurize)
    forward = AtrTrainer.compute_loss

    def recording_compute_loss(self, model, inputs, *args, **kwargs):
        # On a layer inside the forward: accelerate's autocast wraps ``model.forward``, not the model's own hooks.
        hook = model.audio_projection.register_forward_pre_hook(
            lambda *_: forwards.append(torch.is_autocast_enabled("cpu"))
        )
        try:
            return forward(self, model, inputs, *args, **kwargs)
        finally:
            hook.remove()

    monkeypatch.setattr(AtrTrainer, "compute_loss", recording_compute_loss)
    result = run_training(
        parse_train_arguments(
            ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "saved",
             "--output_dir", "run", "--audio_features", "device", "--bf16", "--use_cpu", *QUICK]
        )
    )  # fmt: skip
    assert forwards and all(forwards)  # accelerate autocasts the forward on the CPU under --bf16
    assert featurised and all(
        not autocast and dtypes == [torch.float32] for autocast, dtypes in featurised
    ), featurised
    assert np.isfinite(result.train_metrics["train_loss"]) and result.train_metrics["train_loss"] > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--no_exclude_test_overlap"], "--train_shards streams the training data, which has no length: give "
         "--max_steps."),
        (["--max_steps", "2"], "The overlap filter (--exclude_test_overlap) does not run on streamed shards. Filter "
         "the corpus before writing them"),
        (["--max_steps", "2", "--no_exclude_test_overlap", "--blocklist", "b.json"], "The overlap filter "
         "(--blocklist) does not run on streamed shards."),
        (["--max_steps", "2", "--no_exclude_test_overlap", "--test_size", "2"], "--test_size holds a test split out "
         "of the training clips, which --train_shards streams"),
        (["--max_steps", "2", "--no_exclude_test_overlap", "--objective", "ask"], "Objective 'ask' cannot train from "
         "a stream: it needs the whole training set at hand"),
    ],
)  # fmt: skip
def test_streaming_errors_stop_the_run_before_features_are_extracted(
    in_tmp, towers, monkeypatch, flags, message
):
    audio_tower, text_tower = towers
    _saved_corpus_with_shards(in_tmp)
    monkeypatch.setattr(
        "hf_atr.commands.train.fine_tune.extract_features",
        lambda *args: pytest.fail("features were extracted"),
    )
    arguments = parse_train_arguments(
        ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "saved",
         "--output_dir", "run", "--train_shards", "shards/*.tar", *flags]
    )  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        run_train_command(arguments)
    assert str(exit_info.value).startswith(f"hf-atr train: {message}")


def _lengthen_clips(folder: Path, repeats: int) -> None:
    """Each WAV of ``folder`` played ``repeats`` times in a row (longer than the tiny AST's 1-s window)."""
    import soundfile

    for path in folder.glob("*.wav"):
        waveform, rate = soundfile.read(path, dtype="float32")
        soundfile.write(
            path,
            np.tile(waveform * np.linspace(0.5, 1.0, len(waveform) * repeats)[: len(waveform)], repeats),
            rate,
        )


@pytest.mark.slow
def test_the_test_split_is_evaluated_window_by_window_on_request(in_tmp, towers):
    """--eval_window_pooling embeds long test clips window by window and pools them, as `hf-atr evaluate
    --window-pooling` does on the saved model; without it the clips are cut to the window and counted."""
    from hf_atr.data.audio_text_folder import load_audio_text_folder
    from hf_atr.evaluation.evaluator import RetrievalEvaluator
    from hf_atr.processing_atr import AtrProcessor
    from hf_atr.windowing import Windowing

    audio_tower, text_tower = towers
    for split, clips in (("train", 8), ("test", 4)):
        write_sound_folder(in_tmp / "corpus" / split, clips=clips, seed=len(split))
    _lengthen_clips(in_tmp / "corpus" / "test", repeats=3)
    load_audio_text_folder(in_tmp / "corpus").save_to_disk(in_tmp / "saved")
    start = ["--audio_model", str(audio_tower), "--text_model", str(text_tower), "--dataset", "saved", *QUICK]
    windowed = run_training(
        parse_train_arguments([*start, "--output_dir", "windowed", "--eval_window_pooling", "max",
                               "--eval_hop_seconds", "0.5"])
    ).final  # fmt: skip
    assert windowed.protocol["window_pooling"] == {"pooling": "max", "window_seconds": pytest.approx(1.015),
                                                   "hop_seconds": 0.5}  # fmt: skip
    assert windowed.protocol["clips_cut_to_window"] == 0
    model = AutoModel.from_pretrained(in_tmp / "windowed" / "model")
    reference = RetrievalEvaluator(
        datasets.load_from_disk(str(in_tmp / "saved"))["test"],
        AtrProcessor.from_pretrained(in_tmp / "windowed" / "model"),
        windowing=Windowing(hop_seconds=0.5, pooling="max"),
    )(model)
    assert windowed.metrics == pytest.approx(reference, abs=1e-9)
    cut = run_training(parse_train_arguments([*start, "--output_dir", "cut"])).final
    assert cut.protocol["clips_cut_to_window"] == 4 and cut.protocol["window_pooling"] is None


def test_a_features_cache_of_another_storage_version_is_rebuilt_not_read(in_tmp, monkeypatch):
    """The cache key carries FEATURE_STORAGE_VERSION: a cache written with nested lists (storage version 1) under
    the key it had then is left alone, and the features are extracted again, stored as arrays."""
    from datasets import Array2D, List, Value
    from tiny_models import feature_dataset, raw_audio_dataset, training_args

    from hf_atr.commands.train import feature_cache
    from hf_atr.commands.train.data_arguments import DataArguments

    processor = make_processor()
    clips = raw_audio_dataset([1.0, 1.0, 1.0])
    data = DataArguments(dataset="unused", features_cache_dir=str(in_tmp / "features"))
    training = training_args(in_tmp / "run")
    assert feature_cache.FEATURE_STORAGE_VERSION == 3
    key = feature_cache.feature_cache_key(clips, processor, "transformers")
    monkeypatch.setattr(feature_cache, "FEATURE_STORAGE_VERSION", 1)
    old_key = feature_cache.feature_cache_key(clips, processor, "transformers")
    monkeypatch.undo()
    assert old_key != key and feature_cache.feature_cache_key(clips, processor, "transformers") == key
    (in_tmp / "features").mkdir()
    old_cache = in_tmp / "features" / f"train-{old_key}.arrow"
    stale = feature_dataset(2).map(lambda row: row, cache_file_name=str(old_cache))
    assert stale.features["input_values"] == List(List(Value("float32")))
    extracted = count_featurized_clips(monkeypatch)
    split = feature_cache.extract_features(processor, clips, "train", data, training)
    assert sum(extracted) == 3 and split.features["audio_id"] == ["clip0", "clip1", "clip2"]
    assert split.features.features["input_values"] == Array2D((100, 32), "float32")
    assert (in_tmp / "features" / f"train-{key}.arrow").is_file() and old_cache.is_file()
    again = feature_cache.extract_features(processor, clips, "train", data, training)
    assert sum(extracted) == 3 and again.features.features["input_values"] == Array2D((100, 32), "float32")
