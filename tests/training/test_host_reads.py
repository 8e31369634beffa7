"""hf-atr's own code reads nothing back from the device inside a training step (between two logging steps).

Every read of a tensor's values into Python (``bool``, ``item``, ``float``, ``int``, ``__index__``, ``tolist``,
``cpu``, ``nonzero`` and ``torch.nonzero``) makes the host wait for the device. On a CPU there is no device to wait for, so the reads
are counted instead: the methods are wrapped, and a read counts when the code that calls it is hf-atr's (not
torch's, transformers' or the tests'). Reads at logging steps (``AtrTrainer.log``: the objective's terms, the
non-finite check) and in checkpoints are expected; the steps in between must make none, with precomputed or with
device features, except in the objectives that solve optimal transport on the host or search a knowledge base:
their reads are listed below, site by site.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import make_model, make_processor, raw_audio_dataset, tiny_feature_extractor, training_args
from training_setups import objective_setup
from transformers import ClapFeatureExtractor, PeAudioFeatureExtractor, TrainerCallback

import hf_atr
from hf_atr import AtrTrainer
from hf_atr.features.registry import batched_features_for
from hf_atr.features.spectrogram import pad_waveforms
from hf_atr.objectives.registry import build_objective

READ_METHODS = ("__bool__", "item", "__float__", "__int__", "__index__", "tolist", "cpu", "nonzero")
PACKAGE = str(Path(hf_atr.__file__).parent)
LOGGING_STEPS = 2


class HostReads(TrainerCallback):
    """Counts hf-atr's host reads per training step, outside the logging and saving that follow a step."""

    def __init__(self) -> None:
        self.in_step = False
        self.step = 0
        self.reads: Counter[tuple[int, str]] = Counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self.in_step, self.step = True, state.global_step + 1

    def on_step_end(self, args, state, control, **kwargs):
        self.in_step = False

    def record(self, frame) -> None:
        if self.in_step and frame.f_code.co_filename.startswith(PACKAGE):
            where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}"
            self.reads[(self.step, where)] += 1

    def between_logging_steps(self, max_steps: int) -> Counter[str]:
        """Reads in the steps that are not logging steps (nor the first, whose batch starts the DataLoader)."""
        quiet = {step for step in range(2, max_steps + 1) if step % LOGGING_STEPS}
        counts: Counter[str] = Counter()
        for (step, where), count in self.reads.items():
            if step in quiet:
                counts[where] += count
        return counts


@contextlib.contextmanager
def counting(reads: HostReads):
    """Wrap the :data:`READ_METHODS` of ``torch.Tensor`` and the function ``torch.nonzero`` so that each call
    is recorded in ``reads``."""
    targets = [(torch.Tensor, name) for name in READ_METHODS] + [(torch, "nonzero")]
    originals = {(owner, name): getattr(owner, name) for owner, name in targets}

    def wrap(original):
        def counted(*args, **kwargs):
            reads.record(sys._getframe(1))
            return original(*args, **kwargs)

        return counted

    for (owner, name), original in originals.items():
        setattr(owner, name, wrap(original))
    try:
        yield reads
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)


def count_reads(
    tmp_path, name: str = "contrastive", audio_features: str | None = None, max_steps: int = 5
) -> Counter[str]:
    """hf-atr's host reads (``file:line function`` → count) in the non-logging steps of ``max_steps`` steps of
    objective ``name``, with precomputed features, or with ``audio_features="device"`` (clips of 0.6 and 1.4 s, so
    that some are cut to the window)."""
    processor = make_processor()
    if audio_features == "device":
        objective, dataset, collator, callbacks = (
            build_objective({"name": name}),
            raw_audio_dataset([0.6, 1.4] * 8),
            None,
            [],
        )
    else:
        objective, dataset, collator, callbacks = objective_setup(name, processor, num_clips=16)
    reads = HostReads()
    trainer = AtrTrainer(
        model=make_model(processor=processor, objective={"name": name}),
        args=training_args(
            tmp_path,
            max_steps=max_steps,
            logging_steps=LOGGING_STEPS,
            logging_nan_inf_filter=False,
            per_device_train_batch_size=4,
        ),
        train_dataset=dataset,
        processing_class=processor,
        objective=objective,
        data_collator=collator,
        callbacks=[*callbacks, reads],
        audio_features=audio_features,
    )
    with counting(reads):
        trainer.train()
    return reads.between_logging_steps(max_steps)


@pytest.mark.parametrize("name", ["contrastive", "triplet", "sigmoid", "random_language"])
def test_a_step_with_precomputed_features_reads_nothing_back(tmp_path, name):
    assert count_reads(tmp_path, name) == Counter()


def test_a_step_with_device_features_reads_nothing_back(tmp_path):
    """With ``audio_features="device"`` (the tiny AST extractor), the waveform lengths travel on the host
    beside the batch, so the features take their shapes without reading the device."""
    assert count_reads(tmp_path, audio_features="device") == Counter()


SOLVER_LOOPS = {
    "balanced.py _balanced_potentials",
    "balanced.py _balanced_newton",
    "unbalanced.py _unbalanced_potentials",
    "partial.py _partial_potentials",
    "partial.py _solve_bicgstab",
}
"""Functions that iterate an OT solver on the host until it converges: one read per iteration (the error, read with
the spread of the scalings), a few in Newton's and BiCGStab's steps, so their count follows the problem (how many
iterations it takes), not the code."""
SOLVER_LOOP_READS = 300
"""At most this many loop reads in the two counted steps: about twice the most measured (``iot_partial``, 143)."""
OT_READS = {
    "iot": {"utils.py check_cost": 2},
    "iot_partial": {"utils.py check_cost": 2, "partial.py partial_sinkhorn_log_plan": 2},
    "dart": {
        "utils.py check_cost": 4,
        "utils.py marginal": 4,
        "dart.py selected_channels": 2,
    },
    "ask": {
        "utils.py check_cost": 4,
        "knowledge_base.py search": 4,
        "exact_search.py _top_distinct_clips_of_block": 4,
    },
    "kcl": {"atri.py forward": 2},
    "cacl": {"atri.py forward": 2},
}
"""Reads outside the solver loops in the two counted steps (3 and 5), by ``file function``: the solvers' checks of
the cost (finite) and of given marginals (positive), the partial solver's largest mass (the smaller total);
DART's channel choice (whether every channel takes part: the problem's shape); ASK's knowledge-base search (a
top-k over the prototypes, then distinct clips); KCL's and CACL's count of present captions (a batch with none
raises). The table in docs/training-throughput.md reports them per step."""


@pytest.mark.parametrize("name", sorted(OT_READS))
def test_the_reads_of_the_objectives_that_still_read_are_the_known_ones(tmp_path, name):
    """The objectives that read are counted, site by site, so that a new read fails here; the count is zero for
    the others because there is nothing to read, not because reads go unseen."""
    by_site: Counter[str] = Counter()
    for where, count in count_reads(tmp_path, name).items():
        file_line, function = where.split(" ")
        by_site[f"{file_line.split(':')[0]} {function}"] += count
    loops = {site: count for site, count in by_site.items() if site in SOLVER_LOOPS}
    others = {site: count for site, count in by_site.items() if site not in SOLVER_LOOPS}
    assert others == OT_READS[name]
    assert (sum(loops.values()) > 0) == (name not in ("kcl", "cacl")), loops
    assert sum(loops.values()) <= SOLVER_LOOP_READS, loops


class CallReads(HostReads):
    """Counts every read hf-atr's code makes while it is active (no training steps)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_step, self.step = True, 1


@pytest.mark.parametrize(
    ("family", "reads"),
    [("ast", 0), ("whisper", 0), ("pe_audio", 0), ("panns", 1), ("clap_rand_trunc", 1), ("clap_fusion", 1)],
)
def test_featurising_a_batch_reads_only_which_frames_need_float64(family, reads):
    """With lengths on the host (a NumPy array, as the waveform collator sends them), the batched features read
    nothing back, except the decibel families (PANNs, CLAP) below float64, which choose on the device the frames
    deep enough for a float64 FFT and gather them: one read per batch (per chunk of the batch on a CPU)."""
    if family.startswith("clap"):
        extractor = ClapFeatureExtractor(truncation=family.removeprefix("clap_"), max_length_s=1)
    elif family == "pe_audio":
        extractor = PeAudioFeatureExtractor()
    else:
        extractor = tiny_feature_extractor(family)
    features = batched_features_for(extractor)
    rng = np.random.default_rng(0)
    waveforms, lengths = pad_waveforms(
        [0.1 * rng.standard_normal(int(features.sampling_rate * seconds)) for seconds in (0.5, 1.7, 1.2)]
    )
    choices = features.draw_random_choices(lengths, torch.Generator().manual_seed(0))
    with counting(CallReads()) as calls:
        features(waveforms, lengths.numpy(), random_choices=choices)
    assert sum(calls.reads.values()) == reads, calls.reads
