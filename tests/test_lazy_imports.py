"""What importing costs: each check runs in a fresh interpreter and reads ``sys.modules``.

Timings are measured by ``benchmarks/imports.py``; these tests check what gets loaded, which decides them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_models import make_model, make_processor, tiny_panns_config, tiny_panns_feature_extractor

FIXTURE_MODEL = Path(__file__).resolve().parent / "fixtures" / "format_v0" / "model_cosine"


def run_fresh(code: str, lines: int = 1):
    """Run ``code`` in a new interpreter; it prints a JSON value on each of its last ``lines`` lines, returned as
    one value (``lines=1``) or as their list."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    values = [json.loads(line) for line in completed.stdout.strip().splitlines()[-lines:]]
    return values[0] if lines == 1 else values


HEAVY = (
    "torch",
    "transformers",
    "faiss",
    "scipy",
    "matplotlib",
    "gradio",
    "hf_atr.modeling_atr",
    "hf_atr.configuration_atr",
)


@pytest.mark.slow
def test_package_data_loaders_and_cli_help_load_nothing_heavy():
    loaded = run_fresh(
        f"""
        import contextlib, io, json, sys
        heavy = {HEAVY!r}
        import hf_atr
        after_package = [name for name in heavy if name in sys.modules]
        import hf_atr.data
        for name in hf_atr.data.__all__:  # every loader and helper, not only the package
            getattr(hf_atr.data, name)
        after_data = [name for name in heavy if name in sys.modules]
        from hf_atr.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(["--help"])
        after_help = [name for name in heavy if name in sys.modules]
        print(json.dumps({{"package": after_package, "data": after_data, "help": after_help}}))
        """
    )
    assert loaded == {"package": [], "data": [], "help": []}, (
        "hf_atr.data must stay light: import scipy where it is used and log through hf_atr.lazy.get_logger"
    )


@pytest.mark.slow
def test_train_help_builds_its_parser_without_model_code():
    """``hf-atr train --help`` needs transformers' ``TrainingArguments`` (its parser lists every field) but none of
    the model, processor, trainer or evaluator modules, which load once the flags have parsed."""
    loaded = run_fresh(
        """
        import contextlib, io, json, sys
        from hf_atr.cli import main
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            main(["train", "--help"])
        watched = ("hf_atr.modeling_atr", "hf_atr.processing_atr", "hf_atr.training", "hf_atr.evaluation.evaluator",
                   "hf_atr.commands.train.fine_tune", "faiss")
        print(json.dumps({"usage": output.getvalue().startswith("usage: hf-atr train"),
                          "loaded": [name for name in watched if name in sys.modules]}))
        """
    )
    assert loaded == {"usage": True, "loaded": []}


def test_serve_help_imports_neither_gradio_nor_the_model():
    """``hf-atr serve --help`` is argparse alone; gradio, torch and the page load once the command runs."""
    loaded = run_fresh(
        f"""
        import contextlib, io, json, sys
        from hf_atr.cli import main
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            main(["serve", "--help"])
        watched = {HEAVY!r} + ("hf_atr.app.search_page", "hf_atr.app.results")
        print(json.dumps({{"usage": output.getvalue().startswith("usage: hf-atr serve"),
                          "loaded": [name for name in watched if name in sys.modules]}}))
        """
    )
    assert loaded == {"usage": True, "loaded": []}


@pytest.mark.slow
def test_build_dataset_loads_its_builders_only_when_it_runs():
    """``hf-atr --help`` lists ``build-dataset`` without importing datasets; ``hf-atr build-dataset clotho --help``
    imports the builders' table (datasets and the loaders) but no model code."""
    loaded = run_fresh(
        f"""
        import contextlib, io, json, sys
        from hf_atr.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(["--help"])
        after_help = [name for name in ("datasets", "hf_atr.commands.build_dataset.dataset_builders") if name in sys.modules]
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            main(["build-dataset", "clotho", "--help"])
        print(json.dumps({{"help": after_help,
                          "usage": output.getvalue().startswith("usage: hf-atr build-dataset clotho"),
                          "builders": "hf_atr.commands.build_dataset.dataset_builders" in sys.modules,
                          "loaded": [name for name in {HEAVY!r} if name in sys.modules]}}))
        """
    )
    assert loaded == {"help": [], "usage": True, "builders": True, "loaded": []}


REGISTRATION_CHECK = f"""
    model_dir = {str(FIXTURE_MODEL)!r}
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    pipe = pipeline("audio-text-retrieval", model=model_dir)
    from hf_atr.auto_registration import _RegistrationHook
    print(json.dumps([
        type(config).__name__, type(model).__name__, type(processor).__name__, type(pipe).__name__,
        any(isinstance(finder, _RegistrationHook) for finder in sys.meta_path),
    ]))
"""
RESOLVED = ["AtrConfig", "AtrDualEncoderModel", "AtrProcessor", "AudioTextRetrievalPipeline", False]


CARD_CHECK = f"""
    import os, tempfile
    saved = tempfile.mkdtemp()
    AutoModel.from_pretrained({str(FIXTURE_MODEL)!r}).save_pretrained(saved)
    card = open(os.path.join(saved, "README.md")).read()
    metadata, text = card.split("---\\n", 2)[1:]
    print(json.dumps(["- hf-atr" in metadata, "## Usage" in text, "## Licence" in text]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "imports",
    [
        "import hf_atr\nfrom transformers import AutoModel",
        "from transformers import AutoModel\nimport hf_atr",
        "from hf_atr.model_card import write_model_card\nfrom transformers import AutoModel",
        "from hf_atr.modeling_atr import AtrDualEncoderModel as AutoModel",
    ],
    ids=["hf_atr-first", "transformers-first", "card-first", "model-alone"],
)
def test_a_saved_model_writes_its_card_whichever_module_came_first(imports):
    """The model imports no card: the card registers its writer beside the weights (``hf_atr.model_files``) as
    soon as the model is imported (``hf_atr.auto_registration``), so README's promise holds after a bare import
    (``tests/test_layers.py`` checks that the model imports no card)."""
    code = "import json, sys\n" + imports + "\n" + textwrap.dedent(CARD_CHECK)
    assert run_fresh(code) == [True, True, True]


@pytest.fixture(scope="module")
def panns_directories(tmp_path_factory):
    """A PANNs classifier with its feature extractor, and a dual encoder with a PANNs audio tower."""
    from hf_atr.models.panns import PannsForAudioClassification

    root = tmp_path_factory.mktemp("panns")
    PannsForAudioClassification(tiny_panns_config(num_labels=3)).save_pretrained(root / "classifier")
    tiny_panns_feature_extractor().save_pretrained(root / "classifier")
    processor = make_processor("panns")
    make_model("panns", processor=processor).save_pretrained(root / "dual_encoder")
    processor.save_pretrained(root / "dual_encoder")
    return root


PANNS_CHECK = """
    classifier, dual_encoder = {classifier!r}, {dual_encoder!r}
    from transformers import AutoFeatureExtractor, AutoModelForAudioClassification
    model = AutoModel.from_pretrained(dual_encoder)
    print(json.dumps([
        type(AutoConfig.from_pretrained(classifier)).__name__,
        type(AutoModel.from_pretrained(classifier)).__name__,
        type(AutoModelForAudioClassification.from_pretrained(classifier)).__name__,
        type(AutoFeatureExtractor.from_pretrained(classifier)).__name__,
        type(model).__name__,
        type(model.audio_model).__name__,
        type(AutoProcessor.from_pretrained(dual_encoder).feature_extractor).__name__,
    ]))
"""
PANNS_RESOLVED = [
    "PannsConfig",
    "PannsModel",
    "PannsForAudioClassification",
    "PannsFeatureExtractor",
    "AtrDualEncoderModel",
    "PannsModel",
    "PannsFeatureExtractor",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "imports",
    [
        "import hf_atr\nfrom transformers import AutoConfig, AutoModel, AutoProcessor, pipeline",
        "from transformers import AutoConfig, AutoModel, AutoProcessor, pipeline\nimport hf_atr",
        "from transformers import AutoConfig\nimport hf_atr\nfrom transformers import AutoModel, AutoProcessor, pipeline",
    ],
    ids=["hf_atr-first", "transformers-first", "interleaved"],
)
def test_auto_classes_pipeline_and_panns_backbones_resolve_in_either_import_order(imports, panns_directories):
    """The registrations run as the imports happen (the hook watches imports, not loads), so one interpreter per
    import order checks every Auto class: ours and the pipeline, then the PANNs backbones'."""
    panns_check = textwrap.dedent(PANNS_CHECK).format(
        classifier=str(panns_directories / "classifier"), dual_encoder=str(panns_directories / "dual_encoder")
    )
    code = "import json, sys\n" + imports + "\n" + textwrap.dedent(REGISTRATION_CHECK) + panns_check
    resolved = run_fresh(code, lines=2)
    assert resolved == [
        RESOLVED,
        PANNS_RESOLVED,
    ]  # and the hook removed itself once everything was registered


@pytest.mark.slow
def test_checking_an_objective_imports_only_that_objective():
    loaded = run_fresh(
        """
        import json, sys
        from hf_atr.objectives import available_objectives
        names = available_objectives()
        listed_only = sorted(name for name in sys.modules if name.startswith("hf_atr.objectives."))
        from hf_atr import AtrConfig
        AtrConfig(objective={"name": "ask", "num_neighbours": 5})
        # (transformers' docstring machinery loads its AutoModel mapping while building the BERT sub-config,
        # so hf_atr.modeling_atr is registered and loaded here whatever the objective.)
        watched = ("faiss", "hf_atr.knowledge", "hf_atr.encoding", "hf_atr.evaluation.evaluator",
                   "hf_atr.training", "hf_atr.objectives.dart", "hf_atr.objectives.mltm")
        print(json.dumps({"names": names, "listed_only": listed_only,
                          "ask": "hf_atr.objectives.ask" in sys.modules,
                          "heavy": [name for name in watched if name in sys.modules]}))
        """
    )
    assert {"ask", "contrastive", "dart", "iot", "kcl"} <= set(loaded["names"])
    assert loaded["listed_only"] == ["hf_atr.objectives.registry"]
    assert loaded["ask"] and loaded["heavy"] == []


@pytest.mark.slow
def test_the_default_scoring_of_dart_imports_only_dart_and_its_base():
    loaded = run_fresh(
        """
        import json, sys
        from hf_atr import AtrConfig
        scorings = [AtrConfig(objective={"name": "dart", "base": "contrastive"}).scoring]
        after_contrastive_base = sorted(name for name in sys.modules if name.startswith("hf_atr.objectives."))
        scorings.append(AtrConfig(objective={"name": "dart"}).scoring)
        after_iot_base = sorted(name for name in sys.modules if name.startswith("hf_atr.objectives."))
        print(json.dumps({"scorings": scorings, "contrastive_base": after_contrastive_base,
                          "iot_base": after_iot_base, "faiss": "faiss" in sys.modules}))
        """
    )
    assert loaded["scorings"] == ["cosine", "euclidean"]
    shared = ["hf_atr.objectives.batch", "hf_atr.objectives.contrastive", "hf_atr.objectives.dart"]
    assert loaded["contrastive_base"] == [*shared, "hf_atr.objectives.registry"]
    assert loaded["iot_base"] == [*shared, "hf_atr.objectives.mltm", "hf_atr.objectives.registry"]
    assert not loaded["faiss"]


@pytest.mark.slow
def test_model_card_evaluator_and_report_modules_do_not_import_matplotlib():
    loaded = run_fresh(
        """
        import json, sys
        import hf_atr.model_card.card, hf_atr.model_card.figures
        import hf_atr.evaluation.evaluator, hf_atr.evaluation.zero_shot, hf_atr.evaluation.report
        print(json.dumps([name for name in sys.modules if name.split(".")[0] == "matplotlib"]))
        """
    )
    assert loaded == []  # matplotlib is imported inside the drawing functions only
