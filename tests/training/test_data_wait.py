"""The data-wait measure: its arithmetic on an injected clock, and AtrTrainer's log and warning."""

from __future__ import annotations

import logging

import pytest
from tiny_models import feature_dataset, make_model, make_processor, training_args

from hf_atr import AtrTrainer
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.data_wait import DATA_WAIT_PATIENCE, DataWaitMeter

WARNING_START = "training steps each spent more than 20% of their time waiting for their batch"


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _step(meter: DataWaitMeter, clock: FakeClock, wait: float, compute: float) -> float | None:
    with meter.waiting():
        clock.advance(wait)
    clock.advance(compute)
    return meter.step_ended()


def test_the_share_is_the_wait_over_the_step_time_since_the_last_log():
    clock = FakeClock()
    meter = DataWaitMeter(clock, threshold=0.2, patience=3)
    assert meter.step_ended() is None and meter.pop_share() is None  # no step started yet
    assert _step(meter, clock, wait=1.0, compute=3.0) == 0.25
    clock.advance(100.0)  # logging, evaluation, checkpoints: between steps, not counted
    with meter.waiting():  # gradient accumulation: several waits in one step
        clock.advance(0.5)
    clock.advance(1.0)
    with meter.waiting():
        clock.advance(0.5)
    assert meter.step_ended() == pytest.approx(0.5)
    assert meter.pop_share() == pytest.approx((1.0 + 1.0) / (4.0 + 2.0))
    assert meter.pop_share() is None
    assert meter.consecutive_waiting_steps == 2 and not meter.sustained
    assert _step(meter, clock, wait=0.3, compute=0.7) == pytest.approx(0.3)
    assert meter.sustained
    assert _step(meter, clock, wait=0.1, compute=0.9) == pytest.approx(0.1)  # one short wait starts again
    assert meter.consecutive_waiting_steps == 0 and not meter.sustained
    meter.reset()
    assert meter.pop_share() is None and meter.last_share is None


def test_bad_meter_settings_are_named():
    with pytest.raises(
        ValueError, match=r"threshold must lie in \(0, 1\) and patience be >= 1, got 1.5 and 3"
    ):
        DataWaitMeter(threshold=1.5, patience=3)
    with pytest.raises(ValueError, match="got 0.2 and 0"):
        DataWaitMeter(patience=0)


class ClockedCollator(AtrDataCollator):
    """The library's collator, taking ``seconds`` of the test's clock per batch."""

    def __init__(self, processor, clock: FakeClock, seconds: float) -> None:
        super().__init__(processor)
        self.clock, self.seconds = clock, seconds

    def __call__(self, rows):
        self.clock.advance(self.seconds)
        return super().__call__(rows)


def _train(tmp_path, collator_seconds: float, step_seconds: float, caplog):
    """Train 8 steps of 2 items in the main process (0 workers), the collator and the step taking the given clock
    time. (accelerate's loader collates one batch ahead: the first step of an epoch waits for two batches, the
    last for none.)"""
    clock = FakeClock()
    processor = make_processor()
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=8, logging_steps=4, per_device_train_batch_size=2),
        train_dataset=feature_dataset(8),
        data_collator=ClockedCollator(processor, clock, collator_seconds),
        processing_class=processor,
    )
    trainer.data_wait.clock = clock
    training_step = trainer.training_step

    def clocked_step(*args, **kwargs):
        clock.advance(step_seconds)
        return training_step(*args, **kwargs)

    trainer.training_step = clocked_step
    with caplog.at_level(logging.WARNING):
        trainer.train()
    shares = [entry["data_wait"] for entry in trainer.state.log_history if "loss" in entry]
    warnings = [record.getMessage() for record in caplog.records if WARNING_START in record.getMessage()]
    return shares, warnings


@pytest.mark.slow
def test_a_slow_collator_is_logged_and_warned_about_once_and_a_fast_one_is_not(tmp_path, caplog):
    shares, warnings = _train(tmp_path / "slow", collator_seconds=1.0, step_seconds=0.1, caplog=caplog)
    assert len(shares) == 2 and all(share > 0.8 for share in shares)
    assert warnings == [
        f"The last {DATA_WAIT_PATIENCE} {WARNING_START} (91% in the last one): the batches are collated in the "
        "training process itself (0 workers), and the model waits for them. Raise --dataloader_num_workers "
        "(TrainingArguments.dataloader_num_workers) if cores are free (docs/training-throughput.md). The share is "
        "logged as 'data_wait'. Logged once."
    ]
    caplog.clear()
    shares, warnings = _train(tmp_path / "fast", collator_seconds=0.01, step_seconds=1.0, caplog=caplog)
    assert len(shares) == 2 and all(share < 0.05 for share in shares)
    assert warnings == []
