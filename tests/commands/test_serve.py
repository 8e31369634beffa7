"""``hf-atr serve``: what it checks before serving, each failure a message naming what is wrong, and the page it
serves until stopped."""

from __future__ import annotations

import importlib.util
import json
import queue
import socket
import threading
import urllib.request

import pytest
from sound_library import make_sound_library
from tiny_models import make_model, make_processor

from hf_atr.cli import main

pytestmark = pytest.mark.numerics
"""Orders or equalities of computed floats: CI runs this module at a third vector level too (make test-avx2)."""

pytest.importorskip("gradio")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return make_sound_library(tmp_path_factory.mktemp("library"))


def serve(library, *options: str, model=None, index=None) -> list[str]:
    return [
        "serve",
        "--model",
        str(model or library.model_dir),
        "--index",
        str(index or library.index_dir),
        *options,
    ]


def test_without_gradio_it_says_how_to_install_it(library, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "gradio" else find_spec(name, *rest)
    )
    with pytest.raises(SystemExit, match=r"^hf-atr serve: The search page needs gradio, which is not installed: "
                                         r"pip install 'hf-atr\[app\]'$"):  # fmt: skip
        main(serve(library))


def test_a_missing_index_or_model_fails_before_serving(library, tmp_path):
    with pytest.raises(SystemExit, match=f"^--index {tmp_path / 'nothing'}: no such directory.$"):
        main(serve(library, index=tmp_path / "nothing"))
    with pytest.raises(SystemExit, match=f"^--model {tmp_path / 'nothing'}: no such directory.$"):
        main(serve(library, model=tmp_path / "nothing"))
    with pytest.raises(SystemExit) as refused:
        main(serve(library, index=tmp_path))  # a directory, but no index in it
    assert str(refused.value) == (
        f"--index {tmp_path} holds no index: build one of your audio files with "
        f"`hf-atr index --model {library.model_dir} --audio-dir DIR --out {tmp_path}`."
    )


def test_an_index_of_no_audio_file_is_refused_with_the_command_that_fills_it(library, tmp_path, monkeypatch):
    from hf_atr.app.search_page import SearchPage

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.wav").write_bytes(b"not audio")
    index = tmp_path / "index"
    index_command = [
        "index",
        "--model",
        str(library.model_dir),
        "--audio-dir",
        str(broken),
        "--out",
        str(index),
    ]
    assert main(index_command) == 0  # the one file is skipped: an index of 0 files
    with pytest.raises(SystemExit) as refused:
        main(serve(library, index=index))
    assert str(refused.value) == (
        f"--index {index} holds no audio files (1 file(s) could not be decoded: see {index / 'skipped.tsv'}), so "
        f"the search page would find nothing: add some with `hf-atr index --model {library.model_dir} "
        f"--audio-dir DIR --out {index} --append`."
    )
    (index / "skipped.tsv").unlink()
    with pytest.raises(SystemExit, match=r"^--index .* holds no audio files, so the search page would find"):
        main(serve(library, index=index))
    # The command it names fills the index, and the page is served.
    assert main([*index_command[:4], str(library.audio_dir), "--out", str(index), "--append"]) == 0
    served = []

    def build_only(page, host, port=None):
        served.append(page)
        raise OSError("not served from a test")

    monkeypatch.setattr(SearchPage, "launch", build_only)
    with pytest.raises(SystemExit, match="not served from a test"):
        main(serve(library, index=index))
    assert served[0].heading.startswith(f"Index `{index}`: 3 file(s)")


def test_an_index_of_another_model_or_of_captions_only_is_refused(library, tmp_path):
    other, processor = tmp_path / "other model", make_processor()
    make_model(processor=processor, seed=1).save_pretrained(other)  # other weights, the same processor
    processor.save_pretrained(other)
    with pytest.raises(
        SystemExit, match=r"^hf-atr: Index .* was built with a model of fingerprint .* \(other"
    ):
        main(serve(library, model=other))
    captions = tmp_path / "captions.txt"
    captions.write_text("a dog barks\na siren wails\n")
    index = tmp_path / "caption index"
    assert (
        main(["index", "--model", str(library.model_dir), "--captions", str(captions), "--out", str(index)])
        == 0
    )
    with pytest.raises(
        SystemExit, match=f"^--index {index} holds captions only; the search page searches audio"
    ):
        main(serve(library, index=index))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--top-k", "0"], "--top-k must be at least 1, got 0."),
        (["--port", "70000"], "--port must be between"),
    ],
)
def test_bad_numbers_are_named(library, option, message):
    with pytest.raises(SystemExit, match=f"^{message}"):
        main(serve(library, *option))


def test_a_taken_port_or_an_address_of_another_machine_fails_before_the_model_loads(library, monkeypatch):
    monkeypatch.setattr("hf_atr.commands.serve.load_retrieval_pipeline", pytest.fail)  # never reached
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            SystemExit,
            match=rf"^hf-atr serve: cannot serve on 127.0.0.1:{port}: .*Address already in use \(choose another --port\)\.$",
        ):
            main(serve(library, "--port", str(port)))
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: binding it fails, nothing is sent.
    with pytest.raises(
        SystemExit,
        match=r"^hf-atr serve: cannot serve on 192.0.2.1:any port: .*\(give an address of this machine with --host\)\.$",
    ):
        main(serve(library, "--host", "192.0.2.1"))


def test_serving_beyond_this_machine_is_announced(library, capsys, monkeypatch):
    from hf_atr.app.search_page import SearchPage

    monkeypatch.setattr("hf_atr.commands.serve._check_address", lambda host, port: None)

    def refuse(self, host, port):  # nothing is served on every interface from a test
        raise OSError("stop here")

    monkeypatch.setattr(SearchPage, "launch", refuse)
    with pytest.raises(SystemExit, match=r"^hf-atr serve: cannot serve on 0.0.0.0:any port: stop here"):
        main(serve(library, "--host", "0.0.0.0"))
    assert "serving on 0.0.0.0: anyone who can reach this machine can use the page" in capsys.readouterr().out


def test_it_serves_the_page_until_stopped(library, capsys, monkeypatch):
    from hf_atr.app.search_page import SearchPage

    launched: queue.Queue = queue.Queue()
    launch = SearchPage.launch

    def launch_and_tell(self, host, port=None):
        blocks, url = launch(self, host, port)
        launched.put((self, blocks, url))
        return blocks, url

    monkeypatch.setattr(SearchPage, "launch", launch_and_tell)
    exit_status = []
    command = threading.Thread(target=lambda: exit_status.append(main(serve(library, "--top-k", "3"))))
    command.start()
    page, blocks, url = launched.get(timeout=120)
    try:
        assert url.startswith("http://127.0.0.1:") and page.top_k == 3
        assert page.heading.startswith(f"Index `{library.index_dir}`: 3 file(s) in ")
        with urllib.request.urlopen(f"{url}config", timeout=30) as response:
            assert json.loads(response.read())["title"] == "hf-atr search"
    finally:
        blocks.close()
        command.join(timeout=60)
    assert exit_status == [0]
    assert f"Search page for {library.index_dir}: {url} (Ctrl-C to stop)" in capsys.readouterr().out
