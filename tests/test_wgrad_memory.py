"""What a split backward keeps from B to W, with and without full recomputation.

Zero Bubble (Qi et al. 2024, Sec. 2 and Table 1) splits the backward into B (input gradients)
and W (weight gradients): W reads each linear layer's input, so those stay from B until W while
the rest of F's stash is freed at B. Under full recomputation F keeps only each layer's input
and B reruns the forward, so the linear inputs W needs are the ones B recomputed: as many bytes
as selective recomputation keeps after B, more than F's stash. Found by tools/metamorphic.py
(seed 914, draw 23: gpt-oss-20b on ZB-H1, selective -> full raised the last stage's peak by 7%,
because the whole stash, the LM head's included, was held until W).
"""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.memory import chunk_activation_bytes, wgrad_retained_bytes
from simcluster.memory_report import activation_walk, memory_summary
from simcluster.scenario import load_scenario
from simcluster.schedules.base import PipeOp


def test_b_can_grow_the_stash_when_w_keeps_more_than_f_stashed():
    ops = [PipeOp("F", 0, 0), PipeOp("B", 0, 0), PipeOp("W", 0, 0)]
    assert activation_walk(ops, [1.0], [3.0]) == 3.0
    assert activation_walk(ops, [1.0], [0.4]) == 1.0  # less than F stashed: F's peak


def _scenario(recompute: str, schedule: str = "zb-h1"):
    return load_scenario(
        "llama3-70b-64xh100",
        [("training.global_batch", 32), ("parallel.schedule", schedule), ("training.recompute", recompute)],
    )


def test_full_recomputation_keeps_what_selective_keeps_after_b():
    full, selective = build_context(_scenario("full")), build_context(_scenario("selective"))
    for stage in range(full.layout.pp):
        chunk = full.chunks[stage][0]
        rows = full.scenario.moe.padded_rows
        kept_full = wgrad_retained_bytes(full.model, full.layout, full.scenario.training, chunk, rows)
        kept_sel = wgrad_retained_bytes(selective.model, selective.layout, selective.scenario.training, chunk, rows)
        assert kept_full == pytest.approx(kept_sel, rel=1e-12)
        # and more than full recomputation's own F stash (each layer's input)
        assert kept_full > chunk_activation_bytes(full.model, full.layout, full.scenario.training, chunk, rows)


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "1f1b"])
def test_more_recomputation_never_raises_a_stage_peak(schedule):
    def peaks(recompute):
        return [s["total_bytes"] for s in memory_summary(build_context(_scenario(recompute, schedule)))["per_stage"]]

    none, selective, full = peaks("none"), peaks("selective"), peaks("full")
    for a, b, c in zip(none, selective, full, strict=True):
        assert a >= b >= c


def test_the_engine_tracks_the_same_peak_under_full_recomputation():
    sc = _scenario("full")
    static = [s["total_bytes"] for s in memory_summary(build_context(sc))["per_stage"]]
    assert simulate(sc).summary["peak_memory_bytes"]["per_stage"] == pytest.approx(static, rel=1e-9)
