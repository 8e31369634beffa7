"""The one results table (model cards, the demo, multilingual comparisons)."""

from __future__ import annotations

import pytest

from hf_atr.metrics.tables import results_table


def test_several_schemes_side_by_side_like_atri():
    metrics = {
        "t2a_R@1/eng": 0.5,
        "t2a_R@1/fra": 0.25,
        "t2a_R@1": 0.375,
        "a2t_mAP@10": 0.125,
        "gap/fra": 0.1234,
        "gap": 0.1234,
        "MRV": 7.5,
    }
    table = results_table({"kcl": metrics, "cacl": {"MRV": 9.0}}, ["eng", "fra"], decimals=2)
    lines = table.splitlines()
    assert lines[0] == "| scheme | language | t2a_R@1 | a2t_mAP@10 | gap | MRV |"
    assert len(lines) == 2 + 2 * 3
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): line for line in lines[2:]}
    assert "| 50.00 |" in rows[("kcl", "eng")] and "| 25.00 |" in rows[("kcl", "fra")]
    assert "| 0.123 |" in rows[("kcl", "fra")]
    assert rows[("kcl", "avg")].rstrip().endswith("| 7.50 |") and "| 12.50 |" in rows[("kcl", "avg")]
    assert rows[("cacl", "avg")].rstrip().endswith("| 9.00 |") and "—" in rows[("cacl", "eng")]
    with pytest.raises(ValueError, match="at least one scheme"):
        results_table({}, ["eng"])


def test_one_model_one_column_order_and_languages_found_in_the_keys():
    metrics = {"a2t_R@1": 0.5, "t2a_R@5": 0.25, "t2a_R@1/deu": 0.125, "t2a_R@1": 0.2, "MRV": 1.0, "loss": 3.0}
    lines = results_table(metrics).splitlines()
    assert lines[0] == "| language | t2a_R@1 | t2a_R@5 | a2t_R@1 | MRV |"
    assert lines[2:] == ["| deu | 12.5 | — | — | — |", "| avg | 20.0 | 25.0 | 50.0 | 1.00 |"]
    assert results_table({"t2a_R@1": 0.5}).splitlines()[2] == "| all | 50.0 |"
