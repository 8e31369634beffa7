"""A retrieval index on the Hub (hf_atr.pipelines.sharing): pushed with its model (the uploaded files and the index
checks) and fetched again with it, offline."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from unittest import mock

import pytest
from huggingface_hub import HfApi
from tiny_models import make_model, make_processor, random_waveforms
from transformers import pipeline

import hf_atr
from hf_atr import hub
from hf_atr.modeling_atr import AtrDualEncoderModel
from hf_atr.pipelines.index_storage import IndexFormatError
from hf_atr.pipelines.persistence import INDEX_DIRNAME
from hf_atr.pipelines.retrieval_pipeline import AudioTextRetrievalPipeline, register_pipeline
from hf_atr.pipelines.sharing import hub_index_dir, push_pipeline_to_hub, push_to_hub, stage_upload

UPLOADED_FILES = [
    "README.md",
    "config.json",
    "model.safetensors",
    "processor_config.json",
    "retrieval_index/audio_index.json",
    "retrieval_index/audio_index.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]


def model_with_index(tmp_path, seed=0):
    """A tiny model, its processor, and a directory holding an audio index built with it."""
    register_pipeline()
    processor = make_processor()
    model = make_model(processor=processor, seed=seed)
    model_dir = tmp_path / f"model{seed}"
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    pipe = pipeline("audio-text-retrieval", model=str(model_dir))
    pipe.index(random_waveforms(3), show_progress=False)
    index_dir = tmp_path / f"index{seed}"
    pipe.save_index(index_dir)
    return model, processor, index_dir


def test_push_to_hub_uploads_model_processor_index_and_card(tmp_path):
    model, processor, index_dir = model_with_index(tmp_path)

    uploaded: dict[str, bytes] = {}

    def fake_create_commit(self, repo_id, operations, **kwargs):
        assert repo_id == "team/atr-tiny"
        for operation in operations:
            uploaded[operation.path_in_repo] = Path(operation.path_or_fileobj).read_bytes()
        return mock.sentinel.commit_info

    fake_repo = mock.Mock(repo_id="team/atr-tiny")
    with (
        mock.patch.object(HfApi, "create_repo", return_value=fake_repo) as create_repo,
        mock.patch.object(HfApi, "create_commit", fake_create_commit),
    ):
        result = push_to_hub(
            model, "atr-tiny", processor=processor, index_dir=index_dir,
            eval_results={"t2a_R@1": 0.5}, training_data="synthcaps", license="apache-2.0",
        )  # fmt: skip
    assert result is mock.sentinel.commit_info
    assert create_repo.call_args.args == ("atr-tiny",)
    assert sorted(uploaded) == UPLOADED_FILES
    readme = uploaded["README.md"].decode()
    assert readme.startswith("---\n") and "license: apache-2.0" in readme  # as given (none by default)
    assert 'pipeline("audio-text-retrieval", model="team/atr-tiny")' in readme
    assert "| all | 50.0 |" in readme and "- training data: synthcaps" in readme
    assert uploaded["retrieval_index/audio_index.json"] == (index_dir / "audio_index.json").read_bytes()


@pytest.mark.parametrize(
    ("index", "error", "message"),
    [("missing", FileNotFoundError, "No saved retrieval index"), ("stale", IndexFormatError, "fingerprint")],
)
def test_push_to_hub_refuses_a_missing_index_or_one_of_other_weights(tmp_path, index, error, message):
    index_dir = model_with_index(tmp_path, seed=1)[2] if index == "stale" else tmp_path
    with (
        mock.patch.object(HfApi, "create_repo", return_value=mock.Mock(repo_id="team/x")),
        mock.patch.object(HfApi, "create_commit") as create_commit,
        pytest.raises(error, match=message),
    ):
        push_to_hub(make_model(), "team/x", index_dir=index_dir)
    create_commit.assert_not_called()


def test_stage_upload_writes_what_would_be_pushed(tmp_path):
    model, processor, index_dir = model_with_index(tmp_path)
    files = stage_upload(
        model, tmp_path / "staged", repo_id="team/atr", processor=processor, index_dir=index_dir
    )
    assert [path.relative_to(tmp_path / "staged").as_posix() for path in files] == UPLOADED_FILES
    assert 'model="team/atr"' in (tmp_path / "staged" / "README.md").read_text()


def fake_hub(uploaded: dict[str, bytes]):
    """Patches HfApi so that a commit records its files instead of uploading them."""

    def fake_create_commit(self, repo_id, operations, **kwargs):
        for operation in operations:
            uploaded[operation.path_in_repo] = Path(operation.path_or_fileobj).read_bytes()
        return mock.sentinel.commit_info

    return (
        mock.patch.object(HfApi, "create_repo", return_value=mock.Mock(repo_id="team/atr-tiny")),
        mock.patch.object(HfApi, "create_commit", fake_create_commit),
    )


def test_pipeline_pushes_the_index_it_holds_with_its_model(tmp_path):
    model_with_index(tmp_path)  # the model's directory holds no index: the pipeline starts without one
    pipe = pipeline("audio-text-retrieval", model=str(tmp_path / "model0"))
    with pytest.raises(ValueError, match="no index to push"):
        pipe.push_to_hub("atr-tiny")
    pipe.index(random_waveforms(3), show_progress=False)
    uploaded: dict[str, bytes] = {}
    create_repo, create_commit = fake_hub(uploaded)
    with create_repo, create_commit:
        assert pipe.push_to_hub("atr-tiny", training_data="synthcaps") is mock.sentinel.commit_info
    assert sorted(uploaded) == UPLOADED_FILES
    assert "- training data: synthcaps" in uploaded["README.md"].decode()


def test_model_push_to_hub_uploads_model_processor_and_card_only(tmp_path):
    uploaded: dict[str, bytes] = {}
    create_repo, create_commit = fake_hub(uploaded)
    with create_repo, create_commit:
        make_model().push_to_hub("atr-tiny", processor=make_processor())
    assert sorted(uploaded) == [name for name in UPLOADED_FILES if not name.startswith("retrieval_index/")]
    assert 'pipeline("audio-text-retrieval", model="team/atr-tiny")' in uploaded["README.md"].decode()


def test_index_pushed_with_a_hub_model_is_fetched_and_loaded(pipe, tmp_path):
    pipe.index(random_waveforms(3), show_progress=False)
    pipe.save_index(tmp_path / "snapshot" / INDEX_DIRNAME)
    model = pipe.model
    model.name_or_path = "team/atr-tiny"
    with mock.patch(
        "hf_atr.pipelines.sharing.snapshot_download", return_value=str(tmp_path / "snapshot")
    ) as download:
        from_hub = AudioTextRetrievalPipeline(model=model, processor=pipe.processor)
    assert download.call_args.args == ("team/atr-tiny",)
    assert download.call_args.kwargs == {"allow_patterns": [f"{INDEX_DIRNAME}/*"]}
    assert from_hub("a dog barks", top_k=2) == pipe("a dog barks", top_k=2)
    with mock.patch("hf_atr.pipelines.sharing.snapshot_download", side_effect=OSError("offline")):
        assert AudioTextRetrievalPipeline(model=model, processor=pipe.processor).audio_index is None


def test_hub_index_dir_asks_the_hub_only_for_a_hub_model(pipe, model_dir):
    with mock.patch("hf_atr.pipelines.sharing.snapshot_download") as download:
        assert hub_index_dir(pipe.model) is None  # a local directory
        pipe.model.name_or_path = "atr-tiny"  # no owner/name: not a Hub id
        assert hub_index_dir(pipe.model) is None
    download.assert_not_called()
    pipe.model.name_or_path = "team/atr-tiny"
    with mock.patch("hf_atr.pipelines.sharing.snapshot_download", side_effect=ValueError("no such repo")):
        assert hub_index_dir(pipe.model) is None


def test_push_pipeline_to_hub_uploads_the_caption_index_it_holds(pipe):
    with pytest.raises(
        ValueError, match=r"^This pipeline holds no index to push: build one with `pipe\.index"
    ):
        push_pipeline_to_hub(pipe, "atr-tiny")
    pipe.index(["a dog barks", "rain on a roof"], show_progress=False)
    uploaded: dict[str, bytes] = {}
    create_repo, create_commit = fake_hub(uploaded)
    with create_repo, create_commit:
        assert push_pipeline_to_hub(pipe, "atr-tiny") is mock.sentinel.commit_info
    assert [name for name in sorted(uploaded) if name.startswith(INDEX_DIRNAME)] == [
        "retrieval_index/text_index.json",
        "retrieval_index/text_index.safetensors",
    ]
    assert b"rain on a roof" in uploaded["retrieval_index/text_index.json"]


def test_every_push_to_hub_takes_the_options_of_the_one_implementation():
    """hf_atr.hub.push_model_files is the implementation; the four push_to_hub pass HubUpload's options to it by name,
    the sharing terms gathered into one SharingTerms."""
    implementation = inspect.signature(hub.push_model_files).parameters
    options = {name for name, parameter in implementation.items() if parameter.kind is parameter.KEYWORD_ONLY}
    assert set(hub.HubUpload.__annotations__) == options - {"stage_extra", "terms"} | set(
        hub.SHARING_TERM_OPTIONS
    )
    staged = {name for name, parameter in inspect.signature(hub.stage_model_files).parameters.items()
              if parameter.kind is parameter.KEYWORD_ONLY}  # fmt: skip
    assert staged - {"repo_id", "stage_extra", "terms"} <= set(hub.HubUpload.__annotations__)
    for caller in (push_to_hub, push_pipeline_to_hub, AtrDualEncoderModel.push_to_hub,
                   AudioTextRetrievalPipeline.push_to_hub):  # fmt: skip
        upload = [p for p in inspect.signature(caller).parameters.values() if p.kind is p.VAR_KEYWORD]
        assert [parameter.annotation for parameter in upload] == ["Unpack[HubUpload]"], caller


def test_the_model_s_push_to_hub_passes_the_commit_options_on():
    commits = []
    with (
        mock.patch.object(
            HfApi, "create_repo", return_value=mock.Mock(repo_id="team/atr-tiny")
        ) as create_repo,
        mock.patch.object(
            HfApi, "create_commit", lambda self, repo_id, operations, **kwargs: commits.append(kwargs)
        ),
    ):
        make_model().push_to_hub("atr-tiny", commit_message="First upload", private=True, revision="dev",
                                 create_pr=True)  # fmt: skip
    assert create_repo.call_args.kwargs == {"private": True, "exist_ok": True}
    assert commits == [{"commit_message": "First upload", "revision": "dev", "create_pr": True}]


def test_a_processor_given_to_push_is_uploaded_instead_of_the_pipeline_s(pipe, tmp_path):
    pipe.index(["a dog barks", "rain on a roof"], show_progress=False)
    given = make_processor()
    given.feature_extractor.max_length = 77  # another window than the pipeline's processor
    given.save_pretrained(tmp_path / "given")
    pipe.processor.save_pretrained(tmp_path / "own")
    given_config, own_config = (
        (tmp_path / name / "processor_config.json").read_bytes() for name in ("given", "own")
    )
    assert given_config != own_config
    for push in (push_pipeline_to_hub, AudioTextRetrievalPipeline.push_to_hub):
        uploaded: dict[str, bytes] = {}
        create_repo, create_commit = fake_hub(uploaded)
        with create_repo, create_commit:
            assert push(pipe, "atr-tiny", processor=given) is mock.sentinel.commit_info
        assert sorted(uploaded) == sorted(
            [name for name in UPLOADED_FILES if not name.startswith(f"{INDEX_DIRNAME}/audio")]
            + ["retrieval_index/text_index.json", "retrieval_index/text_index.safetensors"]
        )
        assert uploaded["processor_config.json"] == given_config, push
    uploaded = {}
    create_repo, create_commit = fake_hub(uploaded)
    with create_repo, create_commit:
        push_pipeline_to_hub(pipe, "atr-tiny")
    assert uploaded["processor_config.json"] == own_config


def test_the_sharing_terms_travel_as_one_object_to_the_card():
    options = hub.push_options({"license": "other", "license_name": "lab-1.0", "license_link": "LICENSE",
                                "base_model": ["org/tower"], "private": True})  # fmt: skip
    assert options == {
        "private": True,
        "terms": hub.SharingTerms("other", "lab-1.0", "LICENSE", ("org/tower",)),
    }
    assert options["terms"].card_fields() == {
        "license": "other",
        "license_name": "lab-1.0",
        "license_link": "LICENSE",
        "base_model": ["org/tower"],
    }
    assert hub.push_options({}) == {"terms": hub.SharingTerms()}
    with pytest.raises(AttributeError):
        options["terms"].license = "mit"  # frozen


def test_the_sharing_terms_given_to_the_model_s_push_reach_its_card(tmp_path):
    uploaded: dict[str, bytes] = {}
    create_repo, create_commit = fake_hub(uploaded)
    with create_repo, create_commit:
        make_model().push_to_hub("atr-tiny", license="other", license_name="lab-1.0", license_link="LICENSE",
                                 base_model=["org/tower"])  # fmt: skip
    card = uploaded["README.md"].decode()
    assert "license: other\nlicense_name: lab-1.0\nlicense_link: LICENSE" in card
    assert "base_model:\n- org/tower" in card


def test_hf_atr_has_one_module_level_push_to_hub():
    """The model's and the pipeline's methods aside, only hf_atr.pipelines.sharing defines a ``push_to_hub``."""
    package = Path(hub.__file__).parent
    defining = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "push_to_hub"
    ]
    assert defining == ["pipelines/sharing.py"]
    assert hf_atr.push_to_hub is push_to_hub
