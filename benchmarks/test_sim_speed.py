"""Simulation cost benchmarks (run by hand: python -m pytest -m benchmark benchmarks -s).

Ratios measured in one run (the machines are noisy): wall time should scale with
pp x microbatches x layers, and barely with the number of GPUs (symmetry shortcut).
"""

import time

import pytest

from simcluster.engine import simulate
from simcluster.scenario import load_scenario

pytestmark = pytest.mark.benchmark


def _wall(name, *overrides):
    sc = load_scenario(name, list(overrides))
    start = time.perf_counter()
    res = simulate(sc)
    return time.perf_counter() - start, res.summary["events"]


def test_gpu_count_barely_matters():
    small, ev_small = _wall("llama3-70b-64xh100", ("training.global_batch", 32))
    big, ev_big = _wall("llama3-70b-64xh100", ("cluster.gpus", 1024), ("training.global_batch", 512))
    print(f"64 GPUs: {small:.2f}s ({ev_small} events); 1024 GPUs: {big:.2f}s ({ev_big} events); ratio {big / small:.2f}")
    assert ev_big == ev_small
    # 3.0 before the planner remembered a stage's groups by identity (2026-11-26: 0.75 measured)
    assert big / small < 1.5


def test_microbatches_scale_linearly():
    one, _ = _wall("llama3-70b-64xh100", ("training.global_batch", 32))
    four, _ = _wall("llama3-70b-64xh100", ("training.global_batch", 128))
    print(f"m=16: {one:.2f}s, m=64: {four:.2f}s, ratio {four / one:.2f} (ideal 4)")
    assert four / one < 6.0


def _build(name, p, m, repeats=3):
    """Best of ``repeats`` builds: a fraction-of-a-second timing on a shared 2-core machine is
    noisy, and the least disturbed run is the one that measures the builder."""
    from simcluster.schedules import OpCosts, ScheduleSpec, get_schedule

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        get_schedule(name).build(ScheduleSpec(p, m, 1, OpCosts(1.0, 1.2, 0.8, 0.05)))
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("name", ["zb-2p", "zbv"])
def test_cost_aware_schedule_builders_scale_linearly_in_microbatches(name):
    """The heuristics place each op once per variant: doubling m should about double the time
    (each bubble decision reads a running maximum, not every stage)."""
    # 512 and 2048: long enough that a disturbance is a small share (2026-11-27, zb-2p best of
    # three: 0.27 s and 1.27 s, ratio 4.7)
    small, big = _build(name, 16, 512), _build(name, 16, 2048)
    print(f"{name}: m=512 {small:.2f}s, m=2048 {big:.2f}s, ratio {big / small:.2f} (ideal 4)")
    assert big / small < 6.0


@pytest.mark.parametrize("name", ["v-half", "v-min"])
def test_v_block_schedules_scale_linearly_in_stages(name):
    """The building-block squeeze checks a move's memory between its two slots only, so the
    planner's cost is about p x m: four times the stages at fixed m should take about four
    times as long. Before (each check walked the whole stage, p^2 x m), best of three on a
    loaded 2-core machine, 2026-11-30: v-half 0.61 s at p=8, m=256 and 6.99 s at p=32 (ratio
    11.5), v-min 9.4; after, 0.30 s and 1.55 s (5.1), v-min 5.2."""
    small, big = _build(name, 8, 256), _build(name, 32, 256)
    print(f"{name}: p=8 {small:.2f}s, p=32 {big:.2f}s, ratio {big / small:.2f} (ideal 4)")
    assert big / small < 8.0
