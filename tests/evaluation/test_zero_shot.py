"""Zero-shot classification: metrics against a brute-force reference, the tie rule, bad labels, the report."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from datasets import DatasetDict, load_from_disk
from esc50_release import ESC50_CATEGORIES, write_esc50_release
from tiny_models import WORD_CLASSES, feature_dataset, make_model, make_processor, raw_audio_dataset

from hf_atr.audio_encoding import encode_audio
from hf_atr.data.audio_arrays import AudioDecodeError
from hf_atr.data.esc50 import load_esc50
from hf_atr.encoding import encode_labels
from hf_atr.evaluation.clip_evaluator import head_similarity
from hf_atr.evaluation.zero_shot import (
    CLASSES_FROM,
    METRIC_NAMES,
    ZeroShotEvaluator,
    ZeroShotPredictions,
    chance_levels,
    minimum_clips,
)
from hf_atr.windowing import Windowing


def labelled_clips(num_clips: int = 16):
    return feature_dataset(num_clips).add_column(
        "label", [WORD_CLASSES[index % len(WORD_CLASSES)] for index in range(num_clips)]
    )


def test_metrics_against_a_brute_force_reference():
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    clips = labelled_clips()
    templates = ["a {} sound", "the {class}"]
    evaluator = ZeroShotEvaluator(clips, processor, templates=templates, split="test")
    predictions = evaluator.predict(model)
    assert (evaluator.name, evaluator.primary_metric, evaluator.greater_is_better) == (
        "zero_shot",
        "accuracy",
        True,
    )
    assert evaluator.primary_metric in predictions.metrics()
    classes = sorted(WORD_CLASSES)
    assert predictions.class_names == classes
    class_embeds = encode_labels(model, processor, classes, templates)
    scores = head_similarity(model)(class_embeds, encode_audio(model, processor, clips)).T.double().numpy()
    np.testing.assert_allclose(predictions.scores.double().numpy(), scores)
    truth = np.array([classes.index(label) for label in clips["label"]])
    rank = (scores >= scores[np.arange(len(truth)), truth][:, None]).sum(axis=1)  # 1-based, ties against
    correct = rank == 1
    per_class = [correct[truth == c].mean() for c in range(len(classes))]
    class_ap = []
    for c in range(len(classes)):  # each class's prompts retrieving its clips: AP@10 over the clips
        order = np.lexsort((truth == c, -scores[:, c]))
        hits = np.cumsum(truth[order] == c)
        relevant = np.flatnonzero(truth[order] == c)
        class_ap.append(sum(hits[p] / (p + 1) for p in relevant if p < 10) / min(10, len(relevant)))
    expected = {
        "accuracy": correct.mean(),
        "balanced_accuracy": np.mean(per_class),
        "mAP@10": np.mean(np.where(rank <= 10, 1 / rank, 0.0)),
        "class_to_audio_mAP@10": np.mean(class_ap),
    }
    assert evaluator(model) == pytest.approx(expected)
    assert list(predictions.metrics()) == list(expected)
    confusion = predictions.confusion_matrix()
    assert confusion.sum() == 16 and np.trace(confusion) == correct.sum()
    np.testing.assert_allclose(predictions.per_class_accuracy(), per_class)
    assert evaluator.protocol["similarity"] == "euclidean" and evaluator.protocol["templates"] == templates
    assert evaluator.protocol["classes"] == 8 and evaluator.protocol["clips"] == 16


def test_a_tie_with_the_true_class_counts_against_it():
    scores = torch.tensor([[1.0, 1.0, 0.0], [0.2, 0.9, 0.9], [0.5, 0.1, 0.0], [0.0, 0.0, 0.0]])
    predictions = ZeroShotPredictions(scores, torch.tensor([0, 2, 0, 1]), ["a", "b", "c"])
    assert predictions.predicted_classes().tolist() == [1, 1, 0, 0]
    assert predictions.metrics()["accuracy"] == 0.25
    np.testing.assert_array_equal(predictions.confusion_matrix(), [[1, 1, 0], [1, 0, 0], [0, 1, 0]])
    np.testing.assert_allclose(predictions.per_class_accuracy(), [0.5, 0.0, 0.0])
    subset = predictions.select([2, 3])
    assert subset.metrics()["accuracy"] == 0.5 and subset.class_names == ["a", "b", "c"]
    assert np.isnan(subset.per_class_accuracy()[2])  # class c has no clip in the subset
    assert subset.metrics()["balanced_accuracy"] == 0.5


def test_given_labels_fix_the_classes_and_their_order():
    processor = make_processor()
    model = make_model(processor=processor)
    labels = [*reversed(WORD_CLASSES), "cat"]  # a class without clips is still a choice
    predictions = ZeroShotEvaluator(labelled_clips(8), processor, labels=labels).predict(model)
    assert predictions.class_names == labels and predictions.scores.shape == (8, 9)
    assert predictions.true_classes.tolist() == [labels.index(label) for label in WORD_CLASSES]


@pytest.mark.parametrize(
    ("make_dataset", "kwargs", "message"),
    [
        (
            lambda: labelled_clips().select([]),
            {"split": "fold1"},
            "Split 'fold1' has no clips: nothing to classify",
        ),
        (lambda: feature_dataset(4), {}, r"The evaluation set has no 'label' column .* Pass label_column="),
        (lambda: labelled_clips(4), {"label_column": "class"}, "no 'class' column"),
        (
            lambda: labelled_clips(4).map(
                lambda row, index: {"label": "" if index == 2 else row["label"]}, with_indices=True
            ),
            {},
            r"1 clip\(s\) have no 'label', e.g. row\(s\) \[2\]",
        ),
        (
            lambda: labelled_clips(4),
            {"labels": ["dog", "siren"]},
            r"2 clip\(s\) have a 'label' that is not among the 2 labels to choose from \(row 2 'beep', row 3 'birds'\)",
        ),
        (lambda: labelled_clips(4), {"labels": ["dog", "dog"]}, r"labels lists \['dog'\] more than once"),
        (lambda: labelled_clips(4), {"labels": []}, "labels must be a non-empty list"),
        (lambda: labelled_clips(4), {"templates": ["no placeholder"]}, "must be a string containing"),
        (
            lambda: labelled_clips(4),
            {"min_clips": -1},
            r"min_clips must be a whole number of clips, 0 or more; got -1",
        ),
        (
            lambda: labelled_clips(4),
            {"min_clips": 2.5},
            r"min_clips must be a whole number of clips, 0 or more; got 2\.5",
        ),
    ],
)
def test_bad_datasets_and_labels_are_refused_with_the_rows(make_dataset, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ZeroShotEvaluator(make_dataset(), make_processor(), **kwargs)


@pytest.mark.slow
def test_report_writes_confusion_matrix_per_class_accuracy_and_page(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    evaluator = ZeroShotEvaluator(labelled_clips(), processor, split="test")
    report = evaluator.report(model, tmp_path)
    assert report.metrics == evaluator(model)
    assert sorted(path.name for path in tmp_path.glob("*.png")) == [
        "confusion_matrix.png",
        "per_class_accuracy.png",
    ]
    page = report.path.read_text()
    assert "Zero-shot classification on split &#x27;test&#x27; (16 clips, 8 classes)" in page
    assert "<tr><td>dog</td><td>2</td>" in page
    subset = evaluator.write_report(evaluator.predict(model).select(range(8)), tmp_path / "half")
    assert "(8 clips, 8 classes)" in subset.path.read_text()


def test_undecodable_clips_are_left_out_and_long_clips_pooled_as_asked():
    processor = make_processor()
    model = make_model(processor=processor)
    clips = raw_audio_dataset([0.5, 1.0, 3.0, 2.2, 1.0], broken={1}, labels=True)
    windowing = Windowing(pooling="max")
    evaluator = ZeroShotEvaluator(clips, processor, labels=WORD_CLASSES, windowing=windowing, split="test")
    predictions = evaluator.predict(model)
    assert predictions.clip_rows.tolist() == [0, 2, 3, 4]
    kept = clips.select([0, 2, 3, 4])
    class_embeds = encode_labels(model, processor, WORD_CLASSES)
    audio = encode_audio(model, processor, kept, windowing=windowing)
    torch.testing.assert_close(predictions.scores, head_similarity(model)(class_embeds, audio).T)
    assert predictions.true_classes.tolist() == [WORD_CLASSES.index(label) for label in kept["label"]]
    assert predictions.select(range(3)).clip_rows.tolist() == [0, 2]  # dataset rows 0-2, row 1 skipped
    protocol = evaluator.protocol
    assert protocol["clips"] == 4 and protocol["clips_cut_to_window"] == 0
    assert protocol["window_pooling"] == {"pooling": "max", "window_seconds": 1.015, "hop_seconds": 0.5075}
    assert protocol["skipped_clips"] == [
        {"audio_id": "clip1", "reason": "the audio is unreadable or corrupt (Format not recognised)."}
    ]
    own = ZeroShotEvaluator(clips.select([0, 2, 3, 4]), processor)
    own(model)
    assert own.protocol["window_pooling"] is None and own.protocol["clips_cut_to_window"] == 2
    with pytest.raises(AudioDecodeError, match="clip1: the audio is unreadable or corrupt"):
        ZeroShotEvaluator(clips, processor, strict=True)(model)
    with pytest.raises(ValueError, match="Split 'test': no clip could be decoded; nothing to classify"):
        ZeroShotEvaluator(clips.select([1]), processor, split="test")(model)


@pytest.fixture(scope="module")
def esc50_folds(tmp_path_factory):
    """ESC-50 as a user may hold it: the release's esc50.csv, audio for 1 clip of fold 3, 11 of fold 2 and 4 of
    fold 4; loaded, saved and reloaded."""
    root = tmp_path_factory.mktemp("esc50")
    write_esc50_release(root / "ESC-50-master", {2: 11, 3: 1, 4: 4})
    load_esc50(root / "ESC-50-master", folds=[2, 3, 4], missing="skip").save_to_disk(str(root / "saved"))
    return load_from_disk(str(root / "saved"))


@pytest.mark.parametrize("classes", [1, 3, 10, 12, 50])
def test_chance_levels_are_the_figures_of_the_true_class_at_every_rank_equally(classes):
    """n clips, the true class of clip r ranked r-th: the metrics of a ranking uniform over the ranks."""
    rank_of_truth = torch.arange(classes)
    scores = -((torch.arange(classes)[None, :] - rank_of_truth[:, None]) % classes).double()  # truth: 0
    predictions = ZeroShotPredictions(
        scores, torch.zeros(classes, dtype=torch.long), [f"c{i}" for i in range(classes)]
    )
    expected = predictions.metrics()
    chance = chance_levels(classes)
    assert list(chance) == ["accuracy", "balanced_accuracy", "mAP@10"]
    assert chance["accuracy"] == pytest.approx(expected["accuracy"])
    assert chance["mAP@10"] == pytest.approx(expected["mAP@10"])
    assert chance["balanced_accuracy"] == chance["accuracy"]
    assert minimum_clips(classes) == classes


def test_a_single_clip_fold_is_scored_against_the_50_classes_and_flagged(esc50_folds, caplog):
    processor = make_processor()
    model = make_model(processor=processor)
    with caplog.at_level(logging.WARNING):
        evaluator = ZeroShotEvaluator(esc50_folds["fold3"], processor, split="fold3")
    assert evaluator.class_names == list(ESC50_CATEGORIES)
    assert "Too few clips to measure 50 classes (fewer than 50): split 'fold3' (1 clips)" in caplog.text
    assert "records no class list" not in caplog.text
    predictions = evaluator.predict(model)
    assert predictions.scores.shape == (1, 50) and predictions.true_classes.tolist() == [0]  # dog
    protocol = evaluator.protocol
    assert protocol["classes"] == 50 and protocol["classes_from"] == CLASSES_FROM["dataset"]
    assert protocol["chance"]["accuracy"] == 0.02 and protocol["min_clips"] == 50
    assert protocol["too_few_clips"] is True
    assert evaluator.split_results(predictions) == {
        "fold3": {"clips": 1, "too_few_clips": True, **predictions.metrics()}
    }
    enough = ZeroShotEvaluator(esc50_folds["fold2"], processor, min_clips=11)
    assert enough.protocol["too_few_clips"] is False and enough.split_rows == {"all": range(11)}


def test_several_folds_are_encoded_once_with_figures_per_fold(esc50_folds):
    processor = make_processor()
    model = make_model(processor=processor)
    evaluator = ZeroShotEvaluator(
        DatasetDict({name: esc50_folds[name] for name in ("fold2", "fold4")}), processor, min_clips=5
    )
    assert evaluator.split == "fold2+fold4" and evaluator.split_rows == {
        "fold2": range(11),
        "fold4": range(11, 15),
    }
    predictions = evaluator.predict(model)
    results = evaluator.split_results(predictions)
    assert list(results) == ["fold2", "fold4", "all"]
    assert [results[name]["clips"] for name in results] == [11, 4, 15]
    assert [results[name]["too_few_clips"] for name in results] == [False, True, False]
    for name in ("fold2", "fold4"):
        alone = ZeroShotEvaluator(esc50_folds[name], processor, split=name)
        alone_predictions = alone.predict(model)
        rows = evaluator.split_rows[name]
        torch.testing.assert_close(predictions.scores[rows.start : rows.stop], alone_predictions.scores)
        assert {key: results[name][key] for key in METRIC_NAMES} == pytest.approx(alone_predictions.metrics())
    assert {key: results["all"][key] for key in METRIC_NAMES} == pytest.approx(predictions.metrics())


def test_a_dataset_without_a_class_list_uses_its_labels_and_says_so(caplog):
    processor = make_processor()
    with caplog.at_level(logging.WARNING):
        evaluator = ZeroShotEvaluator(labelled_clips(16), processor, split="test")
    assert evaluator.class_names == sorted(WORD_CLASSES)
    assert (
        "Split 'test': the dataset records no class list, so its clips are classified among the 8 distinct labels "
        "they carry (chance 12.50 %); pass labels=[...] (`hf-atr evaluate --labels`)" in caplog.text
    )
    assert evaluator.protocol["classes_from"] == CLASSES_FROM["split"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        given = ZeroShotEvaluator(labelled_clips(16), processor, labels=WORD_CLASSES)
    assert given.protocol["classes_from"] == CLASSES_FROM["labels"] and "class list" not in caplog.text


def test_a_split_whose_clips_all_fail_to_decode_has_no_figures():
    processor = make_processor()
    model = make_model(processor=processor)
    clips = raw_audio_dataset([1.0, 1.0, 1.0], broken={1}, labels=True)
    evaluator = ZeroShotEvaluator(
        {"a": clips.select([0, 2]), "b": clips.select([1])}, processor, labels=WORD_CLASSES
    )
    results = evaluator.split_results(evaluator.predict(model))
    assert results["b"] == {"clips": 0, "too_few_clips": True}
    assert results["a"]["clips"] == results["all"]["clips"] == 2


def test_splits_that_cannot_be_evaluated_together_are_refused():
    with pytest.raises(ValueError, match=r"a split named 'all' cannot be evaluated with others"):
        ZeroShotEvaluator({"all": labelled_clips(4), "test": labelled_clips(4)}, make_processor())
    with pytest.raises(ValueError, match="No split to evaluate: the mapping of splits is empty"):
        ZeroShotEvaluator({}, make_processor())
