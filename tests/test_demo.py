from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from ranking_margin import clear_ranking
from transformers import AutoModel, AutoProcessor, pipeline

from hf_atr import AtrDualEncoderModel, AtrProcessor
from hf_atr.cli import main
from hf_atr.data.schema import LANGUAGES
from hf_atr.demo import DEMO_THREADS, EXAMPLE_QUERIES, format_results_table, run_demo, tiny_feature_extractor
from hf_atr.metrics.ranks import TIE_RULE
from hf_atr.windowing import extractor_window

README = Path(__file__).resolve().parents[1] / "README.md"
DEMO_SECTION = "## What `make demo` does and prints"
README_R1_TOLERANCE = 2.0
"""Points of English T2A R@1 (10 of the 500 test captions) by which a run may differ from README's figure; README
states it and why (another thread count or CPU instruction set sums in another order)."""


def readme_demo_section() -> str:
    text = README.read_text()
    start = text.index(DEMO_SECTION)
    return text[start : text.index("\n## ", start)]


def readme_english_t2a_r1() -> float:
    """English T2A R@1 of README's demo table."""
    section = readme_demo_section()
    header = next(line for line in section.splitlines() if line.startswith("| language | t2a_R@1 |"))
    assert header.split("|")[2].strip() == "t2a_R@1"
    row = next(line for line in section.splitlines() if line.startswith("| eng |"))
    return float(row.split("|")[2])


def readme_commands_after_the_demo() -> list[list[str]]:
    """The ``hf-atr`` commands of the first bash block after README's demo output, as argument lists."""
    section = readme_demo_section()
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("hf-atr ")]


class _Blocks:
    """What ``SearchPage.launch`` returns, for a page that is checked and not served."""

    def block_thread(self) -> None:
        return None

    def close(self) -> None:
        return None


def run_readme_commands_on(output: Path, monkeypatch, capsys) -> dict[str, str]:
    """Run README's search and serve commands verbatim (the serve command's page is built, queried, not served);
    returns each command's output by sub-command."""
    from hf_atr.app.search_page import SearchPage

    pages = []

    def build_only(self, host, port=None):
        pages.append(self)
        return _Blocks(), f"http://{host}:{port or 7860}/"

    monkeypatch.setattr(SearchPage, "launch", build_only)
    outputs = {}
    commands = readme_commands_after_the_demo()
    assert [command[:2] for command in commands] == [["hf-atr", "search"], ["hf-atr", "serve"]]
    for command in commands:
        assert main(command[1:]) == 0, command
        outputs[command[1]] = capsys.readouterr().out
    page = pages[0]
    status, hits_json, *_ = page.text_search("a loud siren")
    hits = json.loads(hits_json)
    assert status.startswith(f"{page.top_k} files for") and all(Path(hit["path"]).is_file() for hit in hits)
    assert all(Path(hit["path"]).parent == (output / "audio").resolve() for hit in hits)
    return outputs


@pytest.mark.slow
@pytest.mark.numerics  # the order of the saved index's hits
def test_demo_end_to_end_small(tmp_path):
    callers = torch.get_num_threads()
    torch.set_num_threads(callers + 1)
    try:
        result = run_demo(tmp_path, max_steps=6, num_train=24, num_test=12, batch_size=8, show_progress=False)
        assert torch.get_num_threads() == callers + 1  # the caller's thread count is restored
    finally:
        torch.set_num_threads(callers)
    written = json.loads((tmp_path / "metrics.json").read_text())
    metrics, protocol = written["metrics"], written["protocol"]
    assert metrics == pytest.approx(result.metrics)
    assert protocol["tie_rule"] == TIE_RULE and protocol["split"] == "test" and protocol["clips"] == 12
    assert protocol["languages"] == list(LANGUAGES) and protocol["window_pooling"] is None
    # What was evaluated, with what: the generated split whole, at one thread.
    assert protocol["corpus"]["corpus"] == "synthcaps" and protocol["official_clips"] == 12
    assert protocol["compute"] == {
        "torch": torch.__version__, "device": "cpu", "threads": DEMO_THREADS,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }  # fmt: skip
    assert (result.threads, result.cpu_capability) == (DEMO_THREADS, torch.backends.cpu.get_cpu_capability())
    window = extractor_window(tiny_feature_extractor()).seconds  # 2.015 s: 200 frames of 25 ms every 10 ms
    assert written["training_audio"] == {
        "clips": 24, "clips_cut_to_window": 0, "window_seconds": window, "kept": f"the first {window:.2f} s of each",
    }  # fmt: skip
    for key in ("t2a_R@1", "a2t_R@10", "a2t_recall_fraction@5", "t2a_mAP@10", "MRV", "t2a_R@1/jpn"):
        assert key in metrics
    assert result.chance_r1 == pytest.approx(1 / 12)
    assert list(result.searches) == list(EXAMPLE_QUERIES)
    assert all(len(hits) == 3 for hits in result.searches.values())
    assert isinstance(AutoModel.from_pretrained(result.model_dir), AtrDualEncoderModel)
    assert isinstance(AutoProcessor.from_pretrained(result.model_dir), AtrProcessor)
    table = format_results_table(result)
    assert all(f"| {language} |" in table for language in (*LANGUAGES, "avg"))
    assert "Chance level: T2A R@1 = 8.3% (12 test clips)" in table
    card = (result.model_dir / "README.md").read_text()  # what `make model-cards` publishes
    assert "| avg |" in card and "(CLIP). ICML 2021." in card and "- training data: synthcaps" in card
    assert "- ties: ties count against the relevant item" in card and "- queries: 480 captions" in card
    assert "- computed with: torch " in card and f"1 thread, CPU capability {result.cpu_capability}" in card
    assert (
        f"- long clips: none of the 24 training clips was longer than the feature extractor's {window:.2f}-s"
        in card
    )
    assert "| base model | none: both towers start from random initialisation |" in card
    data = ModelCard.load(result.model_dir / "README.md").data
    assert data.license == "apache-2.0" and data.base_model is None
    assert data.eval_results[0].dataset_name == "synthcaps test (12 clips)"
    # The test clips as audio files and their index, which the pipeline loads and the demo's searches came from.
    assert sorted(path.name for path in result.audio_dir.iterdir()) == [
        f"synthcaps_test_{index:06d}.wav" for index in range(12)
    ]
    retrieval = pipeline("audio-text-retrieval", model=str(result.model_dir), index_dir=result.index_dir)
    assert len(retrieval.audio_index) == 12 and len(retrieval.text_index) == 60
    every_clip = retrieval(EXAMPLE_QUERIES[0], top_k=12)
    clear_ranking(
        [hit["score"] for hit in every_clip], k=3
    )  # the top 3 and their order are clear of rounding
    hits = every_clip[:3]
    assert [Path(hit["id"]).stem for hit in hits] == [
        audio_id for audio_id, _, _ in result.searches[EXAMPLE_QUERIES[0]]
    ]
    assert all(Path(hit["path"]).is_file() for hit in hits)


@pytest.mark.slow
@pytest.mark.once  # README quotes the figures of `make demo` at the newest releases, on the CPU's own level
def test_the_demo_gives_readme_figures_and_readme_commands_work_on_its_output(tmp_path, monkeypatch, capsys):
    """The full demo, as `make demo` runs it (default output directory, one thread): its English T2A R@1 is
    README's within README_R1_TOLERANCE, and README's search and serve commands work verbatim on what it wrote."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "outputs" / "demo" / "metrics.json").read_text())
    english_r1 = 100 * written["metrics"]["t2a_R@1/eng"]
    assert abs(english_r1 - readme_english_t2a_r1()) <= README_R1_TOLERANCE, (
        english_r1,
        readme_english_t2a_r1(),
    )
    assert f"| eng | {english_r1:.1f} |" in printed
    capability = written["protocol"]["compute"]["cpu_capability"]
    assert f"(1 torch thread, CPU capability {capability})." in printed
    outputs = run_readme_commands_on(tmp_path / "outputs" / "demo", monkeypatch, capsys)
    hits = re.findall(r"^  \d+\. (synthcaps_test_\d{6}\.wav)  ", outputs["search"], re.MULTILINE)
    assert len(hits) == 5, outputs["search"]
    assert "Search page for outputs/demo/index: http://127.0.0.1:7860/" in outputs["serve"]


def test_readme_states_the_tolerance_and_the_capability_of_its_figures():
    section = readme_demo_section()
    assert f"within {README_R1_TOLERANCE:g} points" in section
    assert re.search(r"CPU capability (AVX2|AVX512|DEFAULT)", section)
    assert readme_english_t2a_r1() == pytest.approx(
        float(
            re.search(
                r"\| eng \| ([\d.]+) \|",
                (README.parent / "model_cards/demo-contrastive/README.md").read_text(),
            ).group(1)
        )
    )  # the published card is the run README quotes
