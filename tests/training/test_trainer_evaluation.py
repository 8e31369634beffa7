"""AtrTrainer with evaluators: any evaluator (a moment evaluator during moment training, with eval_strategy="steps"),
or several with unambiguous metric names; the best model chosen by the evaluator's primary metric."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import TrainingArguments

from hf_atr.data.moments import load_moments
from hf_atr.evaluation.moment_evaluator import MomentEvaluator
from hf_atr.objectives.registry import build_objective
from hf_atr.training import AtrTrainer, objective_training_setup
from hf_atr.training.moment_crops import MOMENTS_VIEW
from hf_atr.training.trainer_evaluation import (
    choose_best_model_metric,
    evaluate_all,
    evaluator_list,
    evaluator_names,
    metric_key,
)
from tests.moment_fixtures import write_moment_set
from tests.tiny_models import make_model, make_processor, training_args


class Scripted:
    """An evaluator of its own: returns the next of ``values`` as ``score`` at each call."""

    def __init__(self, values, *, name="scripted", greater_is_better=True):
        self.values = list(values)
        self.name = name
        self.primary_metric = "score"
        self.greater_is_better = greater_is_better
        self.protocol = {"task": "scripted"}

    def __call__(self, model):
        return {"score": self.values.pop(0), "not_a_number": float("nan"), "label": "text"}


@pytest.mark.slow
def test_moment_training_evaluates_at_steps_and_keeps_the_best_model_by_its_primary_metric(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    train = load_moments(write_moment_set(tmp_path / "train", recordings=2))
    test = load_moments(write_moment_set(tmp_path / "test", recordings=2, split="test", seed=1))
    objective = build_objective({"name": "contrastive"})
    setup = objective_training_setup(objective, train, processor, view=MOMENTS_VIEW)
    evaluator = MomentEvaluator(test, processor, hop_seconds=0.5)
    args = training_args(
        tmp_path / "run",
        max_steps=4,
        per_device_train_batch_size=4,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        load_best_model_at_end=True,
    )
    assert args.metric_for_best_model == "loss"  # what TrainingArguments sets; no evaluation loss is computed
    trainer = AtrTrainer(
        model=model,
        args=args,
        train_dataset=setup.train_dataset,
        data_collator=setup.data_collator,
        processing_class=processor,
        objective=objective,
        evaluator=evaluator,
    )
    assert (trainer.args.metric_for_best_model, trainer.args.greater_is_better) == ("mAP", True)
    assert list(trainer.eval_dataset) == ["moments"] and trainer.eval_dataset["moments"] is test
    trainer.train()
    evaluations = [entry for entry in trainer.state.log_history if "eval_mAP" in entry]
    assert [entry["step"] for entry in evaluations] == [1, 2, 3, 4]
    assert all(set(entry) >= {"eval_R1@0.5", "eval_mAP@0.75"} for entry in evaluations)
    scores = [entry["eval_mAP"] for entry in evaluations]
    best = int(np.argmax(scores))  # the first of the highest: a later tie is no improvement
    assert trainer.state.best_metric == scores[best]
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{evaluations[best]['step']}")


def test_several_evaluators_report_under_their_names_and_the_first_one_chooses_the_best_model(tmp_path):
    evaluators = [Scripted([0.5], name="moments"), Scripted([0.1]), Scripted([0.2])]
    names = evaluator_names(evaluators)
    assert names == ["moments", "scripted_1", "scripted_2"]
    metrics, protocol = evaluate_all(evaluators, names, model=None, prefix="eval")
    assert metrics == {"eval_moments_score": 0.5, "eval_scripted_1_score": 0.1, "eval_scripted_2_score": 0.2}
    assert protocol is None  # several protocols: the metric names say which evaluator
    single = Scripted([0.3])
    assert evaluate_all([single], evaluator_names([single]), None, "test") == (
        {"test_score": 0.3},
        {"task": "scripted"},
    )
    args = TrainingArguments(
        str(tmp_path), load_best_model_at_end=True, eval_strategy="steps", save_strategy="steps"
    )
    choose_best_model_metric(args, [Scripted([], name="loss_like", greater_is_better=False)], [None])
    assert (args.metric_for_best_model, args.greater_is_better) == ("score", False)
    args = TrainingArguments(
        str(tmp_path), load_best_model_at_end=True, eval_strategy="steps", save_strategy="steps"
    )
    choose_best_model_metric(args, evaluators, names)
    assert (args.metric_for_best_model, args.greater_is_better) == ("moments_score", True)
    chosen = TrainingArguments(
        str(tmp_path), load_best_model_at_end=True, eval_strategy="steps", save_strategy="steps",
        metric_for_best_model="scripted_2_score",
    )  # fmt: skip
    choose_best_model_metric(chosen, evaluators, names)
    assert chosen.metric_for_best_model == "scripted_2_score"
    default = TrainingArguments(
        str(tmp_path), load_best_model_at_end=True, eval_strategy="steps", save_strategy="steps"
    )
    choose_best_model_metric(default, [], [])
    assert (default.metric_for_best_model, default.greater_is_better) == ("t2a_mAP@10", True)
    assert metric_key(None, "mAP", None) == "mAP"


def test_evaluator_list_takes_one_evaluator_a_list_or_none_and_refuses_the_rest(tmp_path):
    one = Scripted([])
    assert (
        evaluator_list(None) == []
        and evaluator_list(one) == [one]
        and evaluator_list((one, one)) == [one, one]
    )
    with pytest.raises(TypeError, match="evaluates nothing"):
        evaluator_list([])
    with pytest.raises(TypeError, match="got a str"):
        evaluator_list("retrieval")
    processor = make_processor()
    with pytest.raises(ValueError, match="Pass evaluator=... or eval_dataset=..., not both"):
        AtrTrainer(
            model=make_model(processor=processor),
            args=training_args(tmp_path),
            processing_class=processor,
            evaluator=one,
            eval_dataset=[1],
        )
