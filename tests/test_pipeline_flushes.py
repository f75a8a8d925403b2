"""Gradient accumulation over whole pipeline schedules (``training.pipeline_flushes``), as
torchtitan and NeMo AutoModel run it: the bubble recurs once per flush.

Analytic reference (1F1B on balanced stages, free p2p; Narayanan et al. 2021): one flush of m
microbatches idles (p-1)/(m+p-1) of its span; n flushes of m/n each idle n(p-1)/(m+n(p-1)).
"""

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict
from tests.engine_helpers import merge_sections, pipeline_scenario, run

P, M = 4, 16


@pytest.mark.parametrize("flushes", [1, 2, 4])
def test_each_flush_fills_and_drains_the_pipeline(flushes):
    sc = pipeline_scenario(P, M, "1f1b")
    sc["training"]["fused_cross_entropy"] = True
    merge_sections(sc, training={"pipeline_flushes": flushes})
    res = run(sc)
    bubble = flushes * (P - 1) / (M + flushes * (P - 1))
    assert res.summary["bubble_fraction"] == pytest.approx(bubble, rel=0.01)
    assert res.summary["microbatches"] == M


def test_flushes_keep_one_flushes_activations_and_reduce_once():
    one = run(merge_sections(pipeline_scenario(P, M, "interleaved", 2), training={"pipeline_flushes": 1}))
    two = run(merge_sections(pipeline_scenario(P, M, "interleaved", 2), training={"pipeline_flushes": 2}))
    # 8 microbatches per flush still fill interleaved 1F1B's warm-up (p * v in flight at most)
    assert two.summary["peak_memory_bytes"]["max"] == pytest.approx(one.summary["peak_memory_bytes"]["max"], rel=0.02)
    assert two.summary["step_time_s"] > one.summary["step_time_s"]


def test_flushes_must_divide_the_microbatches_and_need_a_pipeline():
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(merge_sections(pipeline_scenario(P, M, "1f1b"), training={"pipeline_flushes": 3})))
    assert err.value.field == "training.pipeline_flushes" and "divide" in str(err.value)
    flat = merge_sections(pipeline_scenario(1, M, "1f1b"), training={"pipeline_flushes": 2})
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(flat))
    assert "pipeline" in str(err.value)


def test_gpipe_flushes_trade_activation_memory_for_bubble():
    # all-forward-all-backward keeps every microbatch of a flush in flight (Huang et al. 2019):
    # two flushes of m/2 hold half the stash, at the price of a second fill and drain
    one = run(pipeline_scenario(P, M, "afab"))
    two = run(merge_sections(pipeline_scenario(P, M, "afab"), training={"pipeline_flushes": 2}))
    assert two.summary["peak_memory_bytes"]["max"] < one.summary["peak_memory_bytes"]["max"]
    assert two.summary["bubble_fraction"] > one.summary["bubble_fraction"]


@pytest.mark.parametrize("schedule", ["1f1b", "afab"])
@pytest.mark.parametrize("flushes", [1, 2, 4])
def test_serial_p2p_engines_finish_each_flush_with_its_last_send(schedule, flushes):
    """DeepSpeed's and nanotron's engines (one blocking send or receive at a time) end each
    pipeline step with its last send done. Carried into the next flush, the last stage's
    gradient waited for the next forward's receive, which waited for that gradient: the
    simulation deadlocked. With free transfers each flush idles as its schedule does:
    1F1B n(p-1)/(m+n(p-1)); GPipe the same share of its span."""
    sc = merge_sections(
        pipeline_scenario(P, M, schedule),
        training={"pipeline_flushes": flushes, "fused_cross_entropy": True},
        overlap={"pp_p2p": "serial", "pp_comm": False},
    )
    res = run(sc)
    bubble = flushes * (P - 1) / (M + flushes * (P - 1))
    assert res.summary["bubble_fraction"] == pytest.approx(bubble, rel=0.02)


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev"])
def test_bidirectional_schedules_send_each_flushs_halves_both_ways(schedule):
    """DualPipe feeds the first half of a flush's microbatches in at stage 0 and the second half
    at stage p-1 (Liu et al., DeepSeek-V3 report, Fig. 5); numbered on across flushes, every
    microbatch of the second flush had counted as a second half and the run deadlocked. Two
    flushes of m/2 refill the pipeline once more than one flush of m, and take no longer than
    two separate steps of m/2."""
    one = run(pipeline_scenario(P, M, schedule))
    two = run(merge_sections(pipeline_scenario(P, M, schedule), training={"pipeline_flushes": 2}))
    half = run(pipeline_scenario(P, M // 2, schedule))
    assert one.summary["step_time_s"] < two.summary["step_time_s"] <= 2 * half.summary["step_time_s"] * (1 + 1e-9)
