"""Moment training: crops inside the moments paired with their queries, crops outside them as
unpaired in-recording negatives, through the moments training view and the trainer."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import soundfile
import torch

from hf_atr.data.moments import is_moment_dataset, load_moments
from hf_atr.objectives.batch import AUDIO_IDS, NEGATIVE_AUDIO
from hf_atr.objectives.registry import build_objective
from hf_atr.training import AtrTrainer, WaveformCollator, objective_training_setup
from hf_atr.training.collator import AtrDataCollator
from hf_atr.training.moment_crops import (
    MOMENTS_VIEW,
    MomentCropCollator,
    MomentCropDataset,
    crop_id,
    crop_inside,
    crop_outside,
    default_crop_seconds,
    free_intervals,
)
from tests.moment_fixtures import with_release_patterns, write_moment_set
from tests.tiny_models import SAMPLING_RATE, make_model, make_processor, training_args


@pytest.fixture(scope="module")
def moments(tmp_path_factory):
    folder = tmp_path_factory.mktemp("moments")
    return load_moments(write_moment_set(folder, recordings=4))


def _overlaps(span, window):
    return span[0] < window[1] and window[0] < span[1]


def test_free_intervals_are_the_complement_of_the_windows():
    windows = [[5.0, 7.0], [1.0, 2.0], [6.5, 8.0], [9.0, 10.0]]
    assert free_intervals(windows, 10.0) == [(0.0, 1.0), (2.0, 5.0), (8.0, 9.0)]
    assert free_intervals([[0.0, 10.0]], 10.0) == []


def test_inside_crops_lie_in_the_window_and_cover_it_uniformly():
    rng = np.random.default_rng(0)
    spans = np.array([crop_inside([2.0, 6.0], 1.0, rng) for _ in range(4000)])
    assert np.all(spans[:, 0] >= 2.0) and np.all(spans[:, 1] <= 6.0)
    np.testing.assert_allclose(spans[:, 1] - spans[:, 0], 1.0)
    # Starts uniform on [2, 5]: each third of the range holds a third of them.
    counts = np.histogram(spans[:, 0], bins=3, range=(2.0, 5.0))[0] / len(spans)
    np.testing.assert_allclose(counts, 1 / 3, atol=0.03)
    # A moment shorter than the crop is the crop.
    assert crop_inside([3.0, 3.5], 1.0, rng) == (3.0, 3.5)


def test_outside_crops_overlap_no_window_and_their_starts_are_uniform_over_the_admissible_ones():
    windows = [[1.0, 2.0], [5.0, 7.0]]
    rng = np.random.default_rng(0)
    spans = [crop_outside(windows, 10.0, 1.0, rng) for _ in range(6000)]
    assert all(not _overlaps(span, window) for span in spans for window in windows)
    assert all(start >= 0.0 and end <= 10.0 and end - start == pytest.approx(1.0) for start, end in spans)
    # Admissible starts: [0, 0] ∪ [2, 4] ∪ [7, 9], a measure of 4; [2, 4] holds half.
    starts = np.array([start for start, _ in spans])
    assert np.mean((starts >= 2.0) & (starts <= 4.0)) == pytest.approx(0.5, abs=0.03)
    assert np.mean(starts >= 7.0) == pytest.approx(0.5, abs=0.03)
    assert crop_outside([[0.0, 9.5]], 10.0, 1.0, rng) is None
    assert crop_outside([[0.0, 9.0]], 10.0, 1.0, rng) == (9.0, 10.0)


def test_a_dataset_without_moment_columns_or_a_bad_crop_length_is_refused(moments):
    with pytest.raises(ValueError, match=r"Moment training needs the columns \['audio', 'recording_id'"):
        MomentCropDataset(moments.remove_columns("windows"), 1.0)
    with pytest.raises(ValueError, match="crop_seconds must be positive, got 0"):
        MomentCropDataset(moments, 0)
    assert is_moment_dataset(moments) and not is_moment_dataset(moments.remove_columns("query"))


def test_items_hold_a_crop_inside_their_moment_and_one_outside_every_moment_of_the_recording(moments):
    crops = MomentCropDataset(moments, 1.0, seed=3)
    by_recording = {}
    for recording, windows in zip(moments["recording_id"], moments["windows"]):
        by_recording.setdefault(recording, []).extend(windows)
    ids = []
    for epoch in range(3):
        crops.set_epoch(epoch)
        for index in range(len(crops)):
            item = crops[index]
            row = moments[index]
            start, end = item["span"]
            assert any(w[0] <= start and end <= w[1] for w in row["windows"])
            assert item["captions"] == [row["query"]] and item["audio_id"] == crop_id(
                row["recording_id"], start, end
            )
            negative = item["negative_crop"]
            assert negative is not None
            assert not any(
                _overlaps(negative["span"], window) for window in by_recording[row["recording_id"]]
            )
            assert negative["span"][1] - negative["span"][0] == pytest.approx(end - start)
            # The crop's samples are the recording's at the span.
            recording, rate = soundfile.read(row["audio"]["path"], dtype="float32")
            first = round(start * rate)
            np.testing.assert_array_equal(
                item["audio"]["array"][:, 0], recording[first : first + len(item["audio"]["array"])]
            )
            assert item["audio"]["sampling_rate"] == SAMPLING_RATE
            ids += [item["audio_id"], negative["audio_id"]]
    assert len(ids) == len(set(ids))  # one id per crop: every span drawn here is a different clip


def test_crops_are_a_function_of_seed_epoch_and_query(moments):
    first, second = MomentCropDataset(moments, 1.0, seed=1), MomentCropDataset(moments, 1.0, seed=1)
    assert [first.spans(i) for i in range(len(first))] == [second.spans(i) for i in range(len(second))]
    second.set_epoch(1)
    assert [first.spans(i) for i in range(len(first))] != [second.spans(i) for i in range(len(second))]
    assert MomentCropDataset(moments, 1.0, negatives=False)[0]["negative_crop"] is None


def test_the_collator_puts_negatives_after_the_pairs_and_flags_them(moments):
    processor = make_processor()
    crops = MomentCropDataset(moments, default_crop_seconds(processor))
    items = [crops[index] for index in range(4)]
    batch = MomentCropCollator(AtrDataCollator(processor))(items)
    assert batch["input_values"].shape[0] == 8 and batch["input_ids"].shape[0] == 4
    assert batch[AUDIO_IDS] == [item["audio_id"] for item in items] + [
        item["negative_crop"]["audio_id"] for item in items
    ]
    assert batch[NEGATIVE_AUDIO].tolist() == [False] * 4 + [True] * 4
    # Without negatives the batch is a plain pair batch.
    plain = MomentCropCollator(AtrDataCollator(processor))(
        [{**item, "negative_crop": None} for item in items]
    )
    assert NEGATIVE_AUDIO not in plain and plain["input_values"].shape[0] == 4
    with pytest.raises(ValueError, match="MomentCropCollator got an empty batch"):
        MomentCropCollator(AtrDataCollator(processor))([])


def test_the_default_crop_is_the_extractor_window():
    assert default_crop_seconds(make_processor()) == pytest.approx(1.015)


def test_the_moments_view_draws_negatives_for_objectives_that_score_them(moments, caplog):
    processor = make_processor()
    setup = objective_training_setup(
        build_objective({"name": "contrastive"}), moments, processor, view=MOMENTS_VIEW
    )
    assert isinstance(setup.train_dataset, MomentCropDataset) and setup.train_dataset.negatives
    assert isinstance(setup.data_collator, MomentCropCollator)
    with caplog.at_level(logging.WARNING):
        triplet = objective_training_setup(
            build_objective({"name": "triplet"}), moments, processor, view=MOMENTS_VIEW
        )
    assert not triplet.train_dataset.negatives
    assert (
        "Objective 'triplet' does not score unpaired audio: moment training draws no crops outside"
        in caplog.text
    )
    waveforms = WaveformCollator(processor)
    on_device = objective_training_setup(
        build_objective({"name": "contrastive"}), moments, processor, view=MOMENTS_VIEW, waveforms=waveforms
    )
    assert (
        on_device.data_collator.clips is waveforms and on_device.data_collator.features is waveforms.features
    )


def test_the_moments_view_refuses_other_views_and_languages(moments):
    processor = make_processor()
    with pytest.raises(ValueError, match="objective 'kcl' trains on 'all_languages'. Use a pair objective"):
        objective_training_setup(build_objective({"name": "kcl"}), moments, processor, view=MOMENTS_VIEW)
    with pytest.raises(ValueError, match=r"reads the English queries only; got languages \['eng', 'fra'\]"):
        objective_training_setup(
            build_objective({"name": "contrastive"}),
            moments,
            processor,
            view=MOMENTS_VIEW,
            languages=["eng", "fra"],
        )
    with pytest.raises(ValueError, match="view='nope', which is not a registered training view"):
        objective_training_setup(build_objective({"name": "contrastive"}), moments, processor, view="nope")


@pytest.mark.parametrize("device_features", [False, True])
def test_the_trainer_trains_on_moment_crops(tmp_path, moments, device_features):
    processor = make_processor()
    model = make_model(processor=processor)
    objective = build_objective({"name": "contrastive"})
    waveforms = WaveformCollator(processor) if device_features else None
    setup = objective_training_setup(objective, moments, processor, view=MOMENTS_VIEW, waveforms=waveforms)
    seen = []

    def record(model, inputs, *args, **kwargs):
        seen.append(int(inputs[NEGATIVE_AUDIO].sum()))
        return AtrTrainer.compute_loss(trainer, model, inputs, *args, **kwargs)

    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=3, per_device_train_batch_size=4),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        processing_class=processor,
        objective=objective,
        audio_features="device" if device_features else None,
    )
    trainer.compute_loss = record
    output = trainer.train()
    assert np.isfinite(output.training_loss) and seen == [4, 4, 4]


def test_gradient_caching_refuses_negative_audio_rows(tmp_path, moments):
    processor = make_processor()
    objective = build_objective({"name": "contrastive"})
    setup = objective_training_setup(objective, moments, processor, view=MOMENTS_VIEW)
    trainer = AtrTrainer(
        model=make_model(processor=processor),
        args=training_args(tmp_path, max_steps=1, per_device_train_batch_size=4),
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        processing_class=processor,
        objective=objective,
        embedding_chunk_size=2,
    )
    with pytest.raises(
        ValueError, match="chunks a batch by its caption rows, and this batch has unpaired audio rows"
    ):
        trainer.train()


def test_persistent_workers_are_refused_for_moment_crops(tmp_path, moments):
    processor = make_processor()
    setup = objective_training_setup(
        build_objective({"name": "contrastive"}), moments, processor, view=MOMENTS_VIEW
    )
    args = training_args(tmp_path, dataloader_num_workers=1, dataloader_persistent_workers=True)
    with pytest.raises(ValueError, match="MomentCropDataset.set_epoch sets"):
        AtrTrainer(
            model=make_model(processor=processor),
            args=args,
            train_dataset=setup.train_dataset,
            data_collator=setup.data_collator,
            processing_class=processor,
        )
    assert torch.is_tensor(setup.data_collator([setup.train_dataset[0]])[NEGATIVE_AUDIO])


def test_crops_lie_inside_the_recording_when_windows_run_past_it(tmp_path, caplog):
    path = with_release_patterns(write_moment_set(tmp_path, recordings=2, seconds=8.0))
    released = load_moments(path)
    with caplog.at_level(logging.WARNING):
        crops = MomentCropDataset(released, 1.0, seed=0)
    assert (
        "Moment training: 3 window(s) run outside their recording [0, duration]: 1 clipped to it, 2 skipped (no "
        "length inside); 1 query(ies) with no window left are left out: ['train_000_2']." in caplog.text
    )
    # The query whose only window lies past the end is left out; the others keep their windows inside [0, 8].
    assert crops.rows == [0, 2, 3] and len(crops) == 3
    assert crops.windows[0] == released[0]["windows"][:1]
    assert crops.windows[1] == [released[2]["windows"][0], [7.0, 8.0]]
    for epoch in range(20):
        crops.set_epoch(epoch)
        for index in range(len(crops)):
            item = crops[index]
            (start, end), negative = item["span"], item["negative_crop"]["span"]
            assert any(w[0] <= start and end <= w[1] for w in crops.windows[index])
            assert negative[0] >= 0.0 and negative[1] <= 8.0
            assert len(item["audio"]["array"]) == round((end - start) * SAMPLING_RATE)
    # The model reads the query stripped; the dataset keeps it as released.
    assert released[0]["query"].startswith(" ") and crops[0]["captions"] == [released[0]["query"].strip()]
    assert crops[2]["captions"] == [released[3]["query"].strip()] and crops[2]["qid"] == released[3]["qid"]


def test_no_window_inside_any_recording_is_refused(tmp_path):
    path = with_release_patterns(write_moment_set(tmp_path, recordings=2, seconds=8.0))
    past = load_moments(path).select([1])
    with pytest.raises(ValueError, match=r"None of the 1 moment queries has a window inside its recording"):
        MomentCropDataset(past, 1.0)
