"""`run`'s line on a GPU's published-run record (simcluster/accuracy_table.py).

The figures themselves are checked against a fresh run of the quick set by the full ratchet
test (tests/test_validate.py::test_ratchet_all_quick_cases)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from simcluster.accuracy_table import accuracy_line, load_table
from simcluster.hardware import load_profile

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("write_accuracy_table", ROOT / "tools" / "write_accuracy_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_table_covers_the_gpus_with_cases():
    by_gpu = load_table()["by_gpu"]
    for profile in ("dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72"):
        assert load_profile(profile).gpu.name in by_gpu, profile
    assert sum(row["n"] for row in by_gpu.values()) == int(load_table()["cases"].split("(")[1].split()[0])


def test_a_gpu_with_cases_gets_its_record_and_one_without_says_so():
    h100 = load_profile("dgx-h100").gpu.name
    row = load_table()["by_gpu"][h100]
    line = accuracy_line(h100)
    assert f"{row['n']} published runs" in line and f"MAPE {row['mape_pct']:.1f}%" in line
    assert ("faster" if row["speed_bias_pct"] >= 0 else "slower") in line
    assert "no accuracy record" in accuracy_line(load_profile("hgx-h800").gpu.name)


def test_the_tool_keeps_the_per_gpu_rows_of_a_validate_document(tmp_path):
    doc = {
        "summary": {"n": 3, "failed": 0},
        "gpus": {"G": {"n": 3, "mape_pct": 4.04, "median_ape_pct": 3.96, "max_ape_pct": 9.0,
                       "speed_bias_pct": -1.26, "failed": 0}},
        "gpu_precisions": {
            "G": {"bf16": {"n": 2, "mape_pct": 2.0, "median_ape_pct": 2.0, "max_ape_pct": 3.0,
                           "speed_bias_pct": 1.04, "failed": 0},
                  "nvfp4": {"n": 1, "mape_pct": 8.11, "median_ape_pct": 8.11, "max_ape_pct": 8.11,
                            "speed_bias_pct": -8.11, "failed": 0}},
            "H": {"bf16": {"n": 1, "mape_pct": 1.0, "median_ape_pct": 1.0, "max_ape_pct": 1.0,
                           "speed_bias_pct": 1.0, "failed": 0}},
        },
    }  # fmt: skip
    table = _tool().table_from(doc)
    assert table["by_gpu"] == {
        "G": {"n": 3, "mape_pct": 4.0, "median_ape_pct": 4.0, "max_ape_pct": 9.0, "speed_bias_pct": -1.3}
    }
    # a GPU whose runs are all in one precision needs no second row
    assert set(table["by_gpu_precision"]) == {"G"} and table["by_gpu_precision"]["G"]["nvfp4"]["mape_pct"] == 8.1
    assert "3 cases, 0 failed" in table["cases"]
    json.dumps(table)  # written as JSON


@pytest.mark.parametrize(
    ("hardware", "words"),
    [("dgx-h100", "published runs"), ("amd-mi300x", "published runs"), ("hgx-h800", "no accuracy record")],
)
def test_run_prints_the_record_of_its_gpu(cli, hardware, words):
    res = cli("run", "llama3-8b-8xh100", "--set", f"cluster.hardware={hardware}")
    assert res.code == 0, res.err
    # a narrow console wraps and indents the line: compare with all whitespace runs made one space
    assert words in " ".join(res.out.split())


def test_a_precision_with_its_own_record_is_named(monkeypatch):
    table = {
        "by_gpu": {"G": {"n": 3, "mape_pct": 4.0, "median_ape_pct": 4.0, "speed_bias_pct": 2.0}},
        "by_gpu_precision": {"G": {"fp8": {"n": 2, "mape_pct": 1.0, "median_ape_pct": 1.0, "speed_bias_pct": -1.0},
                                   "nvfp4": {"n": 1, "mape_pct": 30.0, "median_ape_pct": 30.0,
                                             "speed_bias_pct": 30.0}}},
    }  # fmt: skip
    monkeypatch.setattr("simcluster.accuracy_table.load_table", lambda: table)
    assert accuracy_line("G", "nvfp4").endswith("; in nvfp4, 1: MAPE 30.0%, 30.0% faster (simcluster validate)")
    assert "; none in bf16" in accuracy_line("G", "bf16")
    assert "; in" not in accuracy_line("G")
