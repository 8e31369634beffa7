"""The objective's logs: summed on the device per step, averaged over the steps since the last read; with
skip_non_finite a non-finite step adds nothing and is not counted. The objective's state in a checkpoint."""

from __future__ import annotations

import pytest
import torch

from hf_atr.objectives.registry import build_objective
from hf_atr.training.objective_checkpoints import (
    OBJECTIVE_STATE_NAME,
    load_objective_state,
    save_objective_state,
)
from hf_atr.training.objective_logs import ObjectiveLogSums


def test_averages_cover_the_steps_since_the_last_read_and_leave_out_skipped_ones():
    like = torch.zeros(())
    sums = ObjectiveLogSums(skip_non_finite=True)
    sums.add({"nce": 1.0, "reg": torch.tensor(0.5)}, torch.tensor(True), like)
    sums.add({"nce": 100.0, "reg": torch.tensor(float("nan"))}, torch.tensor(False), like)
    sums.add({"nce": 3.0, "reg": torch.tensor(1.5)}, torch.tensor(True), like)
    assert sums.averages("dart") == {"dart/nce": 2.0, "dart/reg": 1.0}
    assert sums.averages("dart") == {}  # a new period
    counted = ObjectiveLogSums(skip_non_finite=False)
    counted.add({"nce": 1.0}, torch.tensor(False), like)
    counted.add({"nce": 2.0}, torch.tensor(True), like)
    assert counted.averages("contrastive") == {"contrastive/nce": 1.5}


def test_a_stateless_objective_writes_nothing_and_a_missing_state_is_refused(tmp_path):
    objective = build_objective({"name": "contrastive"})
    save_objective_state(objective, tmp_path)
    assert not (tmp_path / OBJECTIVE_STATE_NAME).exists()
    load_objective_state(objective, tmp_path, "cpu")  # nothing to restore

    class Stateful(torch.nn.Module):
        name = "stateful"

        def __init__(self):
            super().__init__()
            self.register_buffer("ema", torch.arange(3.0))

    saved = Stateful()
    save_objective_state(saved, tmp_path)
    restored = Stateful()
    restored.ema.zero_()
    load_objective_state(restored, tmp_path, "cpu")
    assert torch.equal(restored.ema, saved.ema)
    with pytest.raises(FileNotFoundError, match="has no objective.safetensors, but objective 'stateful'"):
        load_objective_state(restored, tmp_path / "elsewhere", "cpu")
