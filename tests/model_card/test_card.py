"""Model cards (content, metadata, the protocol behind the figures), written by save_pretrained, offline."""

from __future__ import annotations

import re

import pytest
from datasets import Dataset
from huggingface_hub import ModelCard
from tiny_models import feature_dataset, make_model, make_processor, save_towers, training_args

from hf_atr import AtrDualEncoderModel, AtrTrainer
from hf_atr.data.corpora import hold_out_test_split
from hf_atr.data.overlap import remove_overlap
from hf_atr.data.schema import corpus_provenance, describe_dataset, set_corpus_provenance
from hf_atr.evaluation.evaluator import RetrievalEvaluator
from hf_atr.metrics.ranks import TIE_RULE
from hf_atr.model_card import (
    build_model_card,
    evaluation_table,
    normalize_metric_names,
    record_evaluation,
    write_model_card,
)
from hf_atr.objectives.registry import BUILTIN_OBJECTIVES, available_objectives, get_objective_class

MULTILINGUAL_METRICS = {
    "eval_t2a_R@1": 0.25, "eval_t2a_R@1/eng": 0.3, "eval_t2a_R@1/fra": 0.2,
    "eval_a2t_R@1": 0.4, "eval_a2t_R@1/eng": 0.5, "eval_a2t_R@1/fra": 0.3,
    "eval_t2a_mAP@10": 0.35, "eval_MRV": 1.5, "eval_loss": 2.0, "epoch": 3.0,
}  # fmt: skip


def test_card_describes_model_objective_training_and_evaluation(tmp_path):
    model = make_model(objective={"name": "triplet", "margin": 0.3}, scoring="euclidean")
    path = write_model_card(
        model,
        tmp_path,
        model_id="team/atr-tiny",
        eval_results=MULTILINGUAL_METRICS,
        training_data="synthcaps",
        license="Apache-2.0",
    )
    assert path == tmp_path / "README.md"
    text = path.read_text()
    for expected in (
        "# team/atr-tiny",
        "| audio backbone | `audio-spectrogram-transformer` (1 layers, hidden size 32) |",
        "| text backbone | `bert` (1 layers, hidden size 32) |",
        "| base model | not recorded: no tower was loaded by a Hub id",
        "linear, 32 → 16 (audio) and 32 → 16 (text)",
        "`euclidean`: negative Euclidean distance",
        "`triplet` — hinge triplet loss",
        "- `margin`: `0.3`",
        "VSE++: Improving Visual-Semantic Embeddings with Hard Negatives. BMVC 2018.",
        "- training data: synthcaps",
        "| language | t2a_R@1 | t2a_mAP@10 | a2t_R@1 |",
        "| eng | 30.0 | — | 50.0 |",
        "| fra | 20.0 | — | 30.0 |",
        "| avg | 25.0 | 35.0 | 40.0 |",
        "MRV (mean rank variance across languages, ATRI Eq. 16; lower is more consistent): 1.50",
        'pipeline("audio-text-retrieval", model="team/atr-tiny")',
        "## Licence\n\n`apache-2.0`",
    ):
        assert expected in text, expected
    card = ModelCard.load(path)
    assert card.data.license == "apache-2.0" and card.data.base_model is None
    assert card.data.datasets == ["synthcaps"]
    assert card.data.language == ["eng", "fra"]
    assert {result.metric_type: result.metric_value for result in card.data.eval_results} == {
        "t2a_R@1": 25.0, "t2a_mAP@10": 35.0, "a2t_R@1": 40.0, "MRV": 1.5,
    }  # fmt: skip


PAPER_IDENTIFIER = re.compile(r"arXiv:\d{4}\.\d{4,5}\b|https://openreview\.net/forum\?id=\w+")
VENUE = re.compile(r"\b(ICML|ICASSP|BMVC|ICLR|ICCV|ACL) (19|20)\d\d\b|\bACL submission\b")
BUILT_IN_PAPERS = {
    "contrastive": ("arXiv:2103.00020", "arXiv:2206.04769"),  # CLIP, CLAP
    "triplet": ("arXiv:1707.05612",),  # VSE++
    "iot": ("arXiv:2405.10084",),  # m-LTM
    "iot_partial": ("arXiv:2405.10084",),
    "dart": ("openreview.net/forum?id=cFhcd4WGjO",),
    "kcl": ("arXiv:2502.14627",),  # ATRI
    "cacl": ("arXiv:2502.14627",),
    "random_language": ("arXiv:2502.14627",),
    "ask": ("Adaptive Self-improving Knowledge Framework",),  # anonymous submission, no identifier yet
    "sigmoid": ("arXiv:2303.15343",),  # SigLIP
}


@pytest.mark.parametrize("name", sorted(BUILT_IN_PAPERS))
def test_built_in_objectives_describe_themselves_and_cite_their_own_paper_with_venue_and_identifier(name):
    objective_class = get_objective_class(name)
    own = vars(objective_class)
    assert "citation" in own, f"{name} inherits its citation from another objective's paper"
    assert "description" in own and objective_class.description, f"{name} has no description of its own"
    assert isinstance(objective_class.citation, tuple) and objective_class.citation
    for reference in objective_class.citation:
        assert VENUE.search(reference), reference
        assert PAPER_IDENTIFIER.search(reference) or "no public identifier" in reference, reference
    for paper in BUILT_IN_PAPERS[name]:
        assert any(paper in reference for reference in objective_class.citation), paper


def test_every_objective_shipped_with_the_package_is_a_built_in_with_a_paper():
    assert set(BUILTIN_OBJECTIVES) == set(BUILT_IN_PAPERS)
    shipped = {
        name for name in available_objectives() if get_objective_class(name).__module__.startswith("hf_atr.")
    }
    assert shipped == set(BUILT_IN_PAPERS)


def test_card_lists_default_hyperparameters_and_citation_of_the_objective():
    card = build_model_card(make_model(objective={"name": "dart"}))
    assert "- `uwd_reg`: `0.03` (default)" in card.text
    assert "(DART). ICLR 2026." in card.text
    assert "No evaluation results were recorded." in card.text
    assert card.data.eval_results is None


def test_metric_names_and_single_language_table():
    assert normalize_metric_names({"eval_t2a_R@1": 0.5, "test_MRV": 2, "eval_runtime_note": "x"}) == {
        "t2a_R@1": 0.5, "MRV": 2.0,
    }  # fmt: skip
    table = evaluation_table({"t2a_R@1": 0.125, "a2t_R@10": 1.0})
    assert "| all | 12.5 | 100.0 |" in table
    assert "MRV" not in table


def test_save_pretrained_writes_the_card(tmp_path):
    make_model(objective={"name": "iot"}).save_pretrained(tmp_path)
    assert "(m-LTM). ICLR 2024." in (tmp_path / "README.md").read_text()


AUDIOCAPS_TEST = {
    "corpus": "AudioCaps", "layout": "official CSV", "split": "test", "corpus_split": "test",
    "metadata": ["test.csv"], "official_release": "AudioCaps v1", "official_clips": 975, "skipped": 969,
    "clips_found": 6, "filters": [],
}  # fmt: skip


@pytest.mark.parametrize("official_clips", [975, 6])
def test_card_shows_the_protocol_and_flags_an_incomplete_test_set(tmp_path, official_clips):
    processor = make_processor()
    model = make_model(processor=processor)
    clips = set_corpus_provenance(feature_dataset(6), {**AUDIOCAPS_TEST, "official_clips": official_clips})
    evaluator = RetrievalEvaluator(clips, processor, split="test", map_cutoffs=(10, 16))
    record_evaluation(model, evaluator(model), evaluator.protocol, eval_dataset="AudioCaps test")
    model.save_pretrained(tmp_path)  # every card written from now on carries the evaluation
    text = (tmp_path / "README.md").read_text()
    warning = (
        "> **Incomplete test set**: 6 of the 975 clips of the test split of AudioCaps v1 were evaluated (969 "
        "missing, skipped or filtered out); these figures are not comparable with results on the full split."
    )
    assert (warning in text) == (official_clips == 975)
    assert text.index("On AudioCaps test (6 clips):") < text.index("| all |") < text.index("Protocol:")
    for line in (
        f"- data: AudioCaps `test` (AudioCaps v1, official CSV); 6 clips evaluated of {official_clips:,} in the "
        "official split (969 clips or rows skipped when loading)",
        "- queries: 12 captions; languages: eng",
        "- relevance: each caption's own clip is its only relevant clip",
        f"- ties: {TIE_RULE}",
        "- scores: the model's scoring head (cosine); R@k at k = 1, 5, 10, mAP at 10, 16",
        "- long clips: each clip encoded in one forward pass of the inputs its processor prepares (the model's "
        "own protocol)",
    ):
        assert line in text, line


def test_card_names_relevance_judgements_and_window_pooling():
    protocol = {
        "tie_rule": TIE_RULE, "split": "evaluation", "clips": 10, "official_clips": None, "corpus": None,
        "captions": 4, "languages": ["eng", "fra"], "relevance": "judgements", "relevance_file": "/data/judged.csv",
        "relevance_threshold": 2.0, "captions_without_judgement": 6, "relevant_clips_per_caption": 1.75,
        "ks": [1], "map_cutoffs": [16], "scoring": "ot_plan", "ot_reg": 0.05, "similarity": "euclidean",
        "window_pooling": {"pooling": "mean", "window_seconds": 10.0, "hop_seconds": 5.0},
        "clips_cut_to_window": 0,
        "skipped_clips": [{"audio_id": f"bad{i}", "reason": "the audio file is empty (0 bytes)."} for i in range(7)],
    }  # fmt: skip
    text = build_model_card(make_model(), eval_results={"t2a_R@1": 0.5}, eval_protocol=protocol).text
    for line in (
        "- data: split `evaluation`; 10 clips evaluated",
        "- queries: 4 captions; languages: eng, fra",
        "- relevance: relevance judgements `/data/judged.csv` (relevant when >= 2.0), 1.75 relevant clips per "
        "caption; 6 captions without judgement left out",
        "- scores: entropic OT plan (m-LTM Eq. 5, reg 0.05); R@k at k = 1, mAP at 16",
        "- long clips: mean of the normalised embeddings of 10-s windows every 5 s "
        '(`{"pooling": "mean", "window_seconds": 10.0, "hop_seconds": 5.0}`)',
        "- skipped: 7 clips could not be decoded and were left out with their captions: `bad0` (the audio file "
        "is empty (0 bytes).); `bad1` (the audio file is empty (0 bytes).); `bad2` (the audio file is empty (0 "
        "bytes).); `bad3` (the audio file is empty (0 bytes).); `bad4` (the audio file is empty (0 bytes).) and 2 "
        "more",
    ):
        assert line in text, line
    assert "Incomplete test set" not in text  # no official size known


def test_card_counts_the_clips_its_model_cut_to_the_extractor_window():
    protocol = {"tie_rule": TIE_RULE, "clips": 3, "captions": 3, "ks": [1], "map_cutoffs": [10],
                "window_pooling": None, "clips_cut_to_window": 2, "skipped_clips": []}  # fmt: skip
    text = build_model_card(make_model(), eval_results={"t2a_R@1": 0.5}, eval_protocol=protocol).text
    assert (
        "- long clips: each clip encoded in one forward pass of the inputs its processor prepares (the model's "
        "own protocol; 2 clips longer than the extractor's window were cut to it)"
    ) in text
    assert "- skipped:" not in text


def test_card_reports_the_training_data_provenance_and_the_overlap_filter():
    def clips(count, first, **provenance):
        dataset = Dataset.from_dict({
            "audio_id": [f"c{first + i}" for i in range(count)], "captions": [["x"]] * count,
            "source_id": [f"freesound:{first + i}" for i in range(count)],
        })  # fmt: skip
        return set_corpus_provenance(dataset, provenance)

    train = clips(5, 0, corpus="WavCaps", layout="WavCaps JSON", split="train", official_release="WavCaps",
                  official_clips=262300, clips_found=5, skipped=0, filters=[])  # fmt: skip
    test = clips(3, 3, corpus="Clotho", split="test", official_clips=1045, filters=[])
    filtered, _ = remove_overlap(train, [test], by=["source_id"])
    text = build_model_card(make_model(), training_data="wavcaps",
                            training_info={"training_provenance": corpus_provenance(filtered)}).text  # fmt: skip
    assert (
        "- source: WavCaps `train` (WavCaps, WavCaps JSON): 5 clips found of 262,300 in the official split"
        in text
    )
    assert (
        "- overlap filter (by source_id): removed 2 of 5 clips (2 by source id, 0 by audio content) that are clips "
        "of Clotho test (3 reference clips)"
    ) in text
    assert "overlap filter: not applied" not in text
    unfiltered = build_model_card(
        make_model(), training_info={"training_provenance": corpus_provenance(train)}
    )
    assert (
        "- overlap filter: not applied (the training clips were not checked against evaluation clips)"
        in unfiltered.text
    )
    assert "- source:" not in build_model_card(make_model()).text  # no provenance recorded, nothing claimed


def test_trainer_records_the_provenance_of_its_training_clips(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    provenance = {"corpus": "Clotho", "split": "train", "clips_found": 16, "filters": [{"name": "overlap"}]}
    trainer = AtrTrainer(
        model=model,
        args=training_args(tmp_path, max_steps=1),
        train_dataset=set_corpus_provenance(feature_dataset(16), provenance),
        processing_class=processor,
    )
    trainer.train()
    assert model.model_card_data["training_provenance"] == provenance


def test_base_model_names_hub_ids_and_never_a_local_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    audio_dir, _ = save_towers(tmp_path / "towers")  # an absolute path, and a relative one (owner/name-like)
    model = AtrDualEncoderModel.from_audio_text_pretrained(str(audio_dir), "towers/text-tower")
    text = write_model_card(model, tmp_path / "local").read_text()
    assert str(tmp_path) not in text and "audio-tower" not in text and "text-tower" not in text
    assert "base_model" not in text.split("---")[1]
    assert (
        "| audio backbone | `audio-spectrogram-transformer` (1 layers, hidden size 32; loaded from a local "
        in text
    )
    assert "| base model | not recorded: no tower was loaded by a Hub id" in text
    # Towers named by Hub ids are listed, both; ids given for local copies replace them.
    model.audio_model.config._name_or_path = "team/ast-tower"
    model.text_model.config._name_or_path = "team/bert-tower"
    card = ModelCard.load(write_model_card(model, tmp_path / "hub"))
    assert card.data.base_model == ["team/ast-tower", "team/bert-tower"]
    assert "([`team/ast-tower`](https://huggingface.co/team/ast-tower), 1 layers" in card.content
    given = ModelCard.load(write_model_card(model, tmp_path / "given", base_model=["MIT/ast-base"]))
    assert given.data.base_model == ["MIT/ast-base"]
    assert "| base model | [`MIT/ast-base`](https://huggingface.co/MIT/ast-base) |" in given.content
    scratch = write_model_card(model, tmp_path / "scratch", base_model=[]).read_text()
    assert "| base model | none: both towers start from random initialisation |" in scratch
    with pytest.raises(
        ValueError, match=re.escape(f"base_model {str(audio_dir)!r} is not a Hub repository id")
    ):
        write_model_card(model, tmp_path / "bad", base_model=[str(audio_dir)])


def test_the_model_index_names_the_test_set_as_what_it_is_with_its_size(tmp_path):
    processor = make_processor()
    model = make_model(processor=processor)
    source = set_corpus_provenance(feature_dataset(12), {**AUDIOCAPS_TEST, "split": "validation"})
    _, held_out = hold_out_test_split(source, 4, seed=3)
    name = describe_dataset(held_out, "audiocaps")
    assert name == "AudioCaps: random hold-out of validation, seed 3"
    evaluator = RetrievalEvaluator(held_out, processor, split="test")
    record_evaluation(model, evaluator(model), evaluator.protocol, eval_dataset=name)
    card = ModelCard.load(write_model_card(model, tmp_path))
    result = card.data.eval_results[0]
    assert result.dataset_name == "AudioCaps: random hold-out of validation, seed 3 (4 clips)"
    assert result.dataset_type == "AudioCaps" and result.dataset_split is None
    assert "On AudioCaps: random hold-out of validation, seed 3 (4 clips):" in card.content
    assert "AudioCaps test" not in card.content
    # A split of the corpus itself keeps its name and split.
    test = set_corpus_provenance(feature_dataset(6), AUDIOCAPS_TEST)
    evaluator = RetrievalEvaluator(test, processor, split="test")
    record_evaluation(model, evaluator(model), evaluator.protocol, eval_dataset=describe_dataset(test, "x"))
    result = ModelCard.load(write_model_card(model, tmp_path / "official")).data.eval_results[0]
    assert (result.dataset_name, result.dataset_type, result.dataset_split) == (
        "AudioCaps test (6 clips)",
        "AudioCaps",
        "test",
    )


def test_card_records_the_training_clips_cut_to_the_window_and_what_computed_the_figures():
    compute = {"torch": "2.13.0+cpu", "device": "cpu", "threads": 1, "cpu_capability": "AVX2"}
    protocol = {"tie_rule": TIE_RULE, "clips": 3, "captions": 3, "ks": [1], "map_cutoffs": [10],
                "window_pooling": None, "clips_cut_to_window": 3, "skipped_clips": [], "compute": compute}  # fmt: skip
    cut = {"clips": 33, "clips_cut_to_window": 33, "window_seconds": 2.0, "kept": "the first 2.00 s of each"}
    text = build_model_card(
        make_model(),
        eval_results={"t2a_R@1": 0.5},
        eval_protocol=protocol,
        training_info={"training_audio": cut},
    ).text
    assert (
        "- long clips: 33 of 33 training clips were longer than the feature extractor's 2.00-s window and were cut "
        "to it (the first 2.00 s of each)"
    ) in text
    assert (
        "own protocol; 3 clips longer than the extractor's window were cut to it)" in text
    )  # the test clips
    assert (
        "- computed with: torch 2.13.0+cpu on cpu, 1 thread, CPU capability AVX2 (another thread count"
        in text
    )
    for record, line in (
        (
            {**cut, "clips_cut_to_window": 0},
            "none of the 33 training clips was longer than the feature extractor's",
        ),
        (
            {**cut, "clips_cut_to_window": None, "clips": None},
            "streamed training clips; those longer than the",
        ),
    ):
        assert line in build_model_card(make_model(), training_info={"training_audio": record}).text
