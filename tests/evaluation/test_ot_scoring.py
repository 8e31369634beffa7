"""OT scoring of an evaluation: the entropic plan over all captions and clips, and one batch's plan for the report."""

from __future__ import annotations

import numpy as np
import ot
import pytest
from ot_problems import pot_log_plan
from tiny_models import make_model, make_processor
from tiny_models import translated_feature_dataset as _clips

from hf_atr.audio_encoding import encode_audio
from hf_atr.encoding import caption_table, encode_text
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.evaluation.ot_scoring import batch_transport, ot_plan_scores


def test_ot_plan_scores_are_the_log_of_pots_plan_per_language():
    processor = make_processor()
    model = make_model(processor=processor, scoring="euclidean")
    clips = _clips()
    table = caption_table(clips, ["eng", "fra"])
    audio = encode_audio(model, processor, clips)
    text = encode_text(model, processor, table.captions)
    scores = ot_plan_scores(model, text, audio, table.languages, reg=0.05)
    english = [index for index, language in enumerate(table.languages) if language == "eng"]
    cost = model.scoring_head.distance(text[english], audio).detach().double().numpy()
    plan = ot.sinkhorn(
        np.full(len(english), 1 / len(english)),
        np.full(6, 1 / 6),
        cost,
        0.05,
        method="sinkhorn_log",
        stopThr=1e-9,
        numItermax=100000,
    )
    np.testing.assert_allclose(np.exp(scores[english].double().numpy()), plan, rtol=1e-3, atol=1e-7)


def test_batch_transport_is_the_objectives_plan_on_the_batch_cost():
    processor = make_processor()
    model = make_model(processor=processor, objective={"name": "iot", "reg": 0.1}, scoring="euclidean")
    clips = _clips()
    audio = encode_audio(model, processor, clips)
    transport = batch_transport(model, processor, clips, audio, size=4)
    text = encode_text(model, processor, [captions[0] for captions in clips["captions"][:4]])
    cost = model.scoring_head.distance(text, audio[:4]).double().numpy()
    np.testing.assert_allclose(transport.plan, np.exp(pot_log_plan(cost, 0.1)), atol=1e-6)
    np.testing.assert_allclose(transport.scores, -cost, atol=1e-5)
    assert transport.score_label == "− Euclidean distance"
    # DART draws the plan of its instance-level IOT base; the evaluator's OT-plan scoring its own ε.
    dart = make_model(processor=processor, objective={"name": "dart"}, scoring="euclidean")
    assert (
        "the plan of `dart`'s instance-level base `iot`, reg = 0.03"
        in batch_transport(dart, processor, clips, encode_audio(dart, processor, clips), size=4).method
    )
    by_plan = batch_transport(model, processor, clips, audio, size=4, ot_reg=0.5)
    np.testing.assert_allclose(by_plan.plan, np.exp(pot_log_plan(cost, 0.5)), atol=1e-6)
    assert "ε = 0.5" in by_plan.method


@pytest.mark.slow
def test_no_transport_plan_for_objectives_without_one_or_not_installed(tmp_path):
    processor = make_processor()
    clips = _clips()
    contrastive = make_model(processor=processor)
    assert batch_transport(contrastive, processor, clips, encode_audio(contrastive, processor, clips)) is None
    contrastive.config.objective = {"name": "not_installed_plugin"}
    assert batch_transport(contrastive, processor, clips, encode_audio(contrastive, processor, clips)) is None
    report = RetrievalEvaluator(clips, processor).report(contrastive, tmp_path)
    assert not (tmp_path / "transport_plan.png").exists() and report.path.is_file()
