"""The evaluation report page: every figure embedded, the metrics tables, the protocol, nothing fetched online."""

from __future__ import annotations

import base64
import html
import re

import numpy as np
import pytest

from hf_atr.evaluation.report import (
    FIGURE_FILES,
    REPORT_FILE,
    BatchTransport,
    write_retrieval_report,
    write_zero_shot_report,
)
from hf_atr.metrics.retrieval import retrieval_ranks
from hf_atr.metrics.tables import format_metric, results_table_rows

PROTOCOL = {"tie_rule": "ties count against the relevant item", "split": "test", "clips": 8, "ks": [1, 5, 10]}


def embedded_images(page: str) -> list[bytes]:
    return [
        base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    ]


def assert_offline(page: str) -> None:
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)


def multilingual_ranks():
    rng = np.random.default_rng(0)
    text_to_audio = np.tile(np.repeat(np.arange(8), 2), 2)
    languages = ["eng"] * 16 + ["fra"] * 16
    groups = list(range(16)) * 2
    scores = rng.random((32, 8)) + 0.5 * (np.arange(8)[None, :] == text_to_audio[:, None])
    return retrieval_ranks(scores, text_to_audio, languages=languages, caption_groups=groups)


@pytest.mark.slow
def test_retrieval_report_embeds_every_figure_with_the_metrics_and_protocol(tmp_path):
    ranks = multilingual_ranks()
    metrics = ranks.metrics()
    transport = BatchTransport(
        scores=np.eye(4), plan=np.eye(4) / 4, score_label="cosine similarity", method="the objective `iot`"
    )
    path = write_retrieval_report(
        tmp_path, ranks, metrics, PROTOCOL, title="Retrieval on test", transport=transport
    )
    assert path == tmp_path / REPORT_FILE
    page = path.read_text(encoding="utf-8")
    figures = [FIGURE_FILES[name] for name in ("recall", "ranks", "transport")]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(figures)
    assert embedded_images(page) == [(tmp_path / name).read_bytes() for name in figures]
    for name in figures:
        assert f"({name})" in page
    headers, rows = results_table_rows(metrics)
    assert "<tr>" + "".join(f"<th>{html.escape(cell)}</th>" for cell in headers) + "</tr>" in page
    for row in rows:
        assert "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" in page
    assert [row[0] for row in rows] == ["eng", "fra", "avg"]
    # Every metric in one row: the mean over languages, then each language.
    for name in {key.split("/", 1)[0] for key in metrics} - {"MRV"}:
        cells = [format_metric(name, metrics[key]) for key in (name, f"{name}/eng", f"{name}/fra")]
        assert (
            f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
            in page
        )
    assert f"<tr><td>MRV</td><td>{format_metric('MRV', metrics['MRV'])}</td><td>—</td><td>—</td></tr>" in page
    assert "<tr><th>metric</th><th>avg</th><th>eng</th><th>fra</th></tr>" in page
    # The headline table, then the figures, then the full listing and the protocol.
    assert (
        page.index("Headline metrics")
        < page.index("<img")
        < page.index("All metrics")
        < page.index("Protocol")
    )
    assert "<tr><td>tie_rule</td><td>&quot;ties count against the relevant item&quot;</td></tr>" in page
    assert "<h1>Retrieval on test</h1>" in page
    assert_offline(page)


def test_retrieval_report_without_transport_plan(tmp_path):
    ranks = retrieval_ranks(np.random.default_rng(1).random((10, 5)), np.arange(10) % 5)
    page = write_retrieval_report(tmp_path, ranks, ranks.metrics(), PROTOCOL, title="t").read_text()
    assert len(embedded_images(page)) == 2 and not (tmp_path / FIGURE_FILES["transport"]).exists()
    assert "<td>all</td>" in page  # one row without languages
    assert "<tr><th>metric</th><th>all</th></tr>" in page


def test_zero_shot_report_embeds_confusion_matrix_and_per_class_accuracy(tmp_path):
    confusion = np.array([[3, 1], [0, 0]])
    metrics = {"accuracy": 0.75, "balanced_accuracy": 0.75, "mAP@10": 0.875}
    protocol = {**PROTOCOL, "clips": 4, "chance": {"accuracy": 0.5, "mAP@10": 0.75}, "min_clips": 2}
    path = write_zero_shot_report(tmp_path, confusion, ["dog", "rain"], metrics, protocol, title="Zero-shot")
    page = path.read_text(encoding="utf-8")
    figures = [FIGURE_FILES["confusion"], FIGURE_FILES["per_class"]]
    assert embedded_images(page) == [(tmp_path / name).read_bytes() for name in figures]
    assert "<tr><th>metric</th><th>value</th><th>chance</th></tr>" in page
    assert "<tr><td>accuracy</td><td>75.00</td><td>50.00</td></tr>" in page
    assert "<tr><td>balanced_accuracy</td><td>75.00</td><td>—</td></tr>" in page  # no chance given for it
    assert "<tr><td>mAP@10</td><td>87.50</td><td>75.00</td></tr>" in page
    assert "Too few clips" not in page
    assert "<tr><td>dog</td><td>4</td><td>75.0</td></tr>" in page
    assert "<tr><td>rain</td><td>0</td><td>—</td></tr>" in page
    assert_offline(page)
    flagged = {**protocol, "clips": 1, "too_few_clips": True}
    one_clip = write_zero_shot_report(
        tmp_path / "one", [[1, 0], [0, 0]], ["dog", "rain"], metrics, flagged, title="One clip"
    ).read_text(encoding="utf-8")
    assert "Too few clips to measure: 1 clips for 2 classes, fewer than 2." in one_clip
