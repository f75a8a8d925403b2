"""``simcluster memory --out DIR``: each stage's memory at its peak as stacked bars, a table and
the --json document, written together (``simcluster/output/memory_stages.py``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simcluster.output.memory_stages import LAYERS, TRANSIENTS, draw_memory_stages


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


def test_the_legend_names_each_kind_of_transient_that_sets_a_peak():
    # two stages peak on a bucket copy, one on the loss's logits, one on its stash alone: the
    # legend names the two kinds present and not the absent ones
    frame = pd.DataFrame({
        "stage": [0, 1, 2, 3], "params_bytes": [4e9] * 4, "grads_bytes": [2e9] * 4,
        "optimizer_bytes": [8e9] * 4, "stash_bytes": [0.0, 5e9, 6e9, 7e9],
        "transient_bytes": [3e9, 1e9, 0.0, 2e9], "peak_part": ["bucket_copy", "bucket_copy", "stash", "loss_logits"],
        "other_bytes": [1e9] * 4, "comm_buffers_bytes": [0.0] * 4,
    })  # fmt: skip
    frame["total_bytes"] = frame[[column for column, _, _ in LAYERS]].sum(axis=1)
    fig = draw_memory_stages(frame, 80e9)
    labels = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    transients = [label for label in labels if label.startswith("transient")]
    assert transients == [f"transient: {TRANSIENTS[part][1]}" for part in ("bucket_copy", "loss_logits")]
    # each stage's bars reach its total: the kinds are drawn side by side, never stacked twice
    tops = {}
    for patch in fig.axes[0].patches:
        stage = round(patch.get_x() + patch.get_width() / 2)
        tops[stage] = max(tops.get(stage, 0.0), patch.get_y() + patch.get_height())
    assert [tops[s] for s in range(4)] == pytest.approx(list(frame["total_bytes"] / 2**30))


def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res = cli("memory", "llama3-8b-8xh100", "--out", str(blocker / "sub"))
    assert res.code == 2 and res.err.startswith("error: --out") and res.err.count("\n") == 1
