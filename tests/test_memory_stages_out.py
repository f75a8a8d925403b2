"""``simcluster memory --out DIR``: each stage's memory at its peak as stacked bars, a table and
the --json document, written together (``simcluster/output/memory_stages.py``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simcluster.output.memory_stages import LAYERS


def test_the_bars_stack_to_each_stages_total_and_the_files_match_the_json(cli, tmp_path):
    out = tmp_path / "mem"
    res = cli("memory", "bloom-176b-384xa100", "--out", str(out))
    assert res.code == 0, res.err
    assert sorted(p.name for p in out.iterdir()) == ["memory_stages.csv", "memory_stages.json", "memory_stages.png"]
    assert "wrote " in res.out and "memory_stages.png" in res.out
    frame = pd.read_csv(out / "memory_stages.csv")
    assert list(frame["stage"]) == list(range(12))  # BLOOM's pp 12
    # what the bars stack is the table's total, stage by stage (the CSV keeps 9 digits)
    stacked = sum(frame[column] for column, _, _ in LAYERS)
    assert stacked.to_numpy() == pytest.approx(frame["total_bytes"].to_numpy(), rel=1e-8)
    doc = json.loads((out / "memory_stages.json").read_text())
    assert doc == json.loads(cli("memory", "bloom-176b-384xa100", "--json").out)
    # stage 0 peaks on the BF16_Optimizer's bf16 cast of its fp32 gradients after the last
    # backward, 2 B a parameter, with nothing stashed (DeepSpeed engine.py allreduce_bucket)
    first = frame.iloc[0]
    assert first["peak_part"] == "bucket_copy" and first["stash_bytes"] == 0.0
    assert first["transient_bytes"] == pytest.approx(2.0 * doc["per_stage"][0]["params_per_gpu"], rel=1e-8)


def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res = cli("memory", "llama3-8b-8xh100", "--out", str(blocker / "sub"))
    assert res.code == 2 and res.err.startswith("error: --out") and res.err.count("\n") == 1
