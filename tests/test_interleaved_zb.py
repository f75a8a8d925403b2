"""Interleaved zero bubble (torch.distributed.pipelining ``ScheduleInterleavedZeroBubble``).

References: PyTorch builds it in ``_get_1f1b_rank_ops(..., enable_zero_bubble=True)`` with
``_get_warmup_ops(..., multiply_factor=1)``; with one chunk per stage it is Qi et al.'s ZB-H1
(ICLR'24 §2.1), whose bubble is (p-1)(T_F + T_B - T_W), against 1F1B's (p-1)(T_F + T_B + T_W).
"""

import pytest

from simcluster.errors import UserError
from simcluster.schedules import ScheduleSpec, get_schedule
from simcluster.schedules.check import (
    bubble_time,
    peak_inflight,
)
from tests.schedule_helpers import run


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 12), (8, 24)])
def test_one_chunk_is_zb_h1(p, m):
    izb, _ = run("interleaved-zb", p, m, 1)
    h1, _ = run("zb-h1", p, m, 1)
    assert izb == h1


def test_the_order_pytorch_builds():
    """p = 2, m = 4, v = 2: two rounds of g = 2 microbatches; stage 0 warms up with
    (v - 1) g + (p - 1) = 3 forwards, stage 1 with 2; W lags B by the stage index."""
    ops, _ = run("interleaved-zb", 2, 4, 2)
    assert " ".join(map(str, ops[0])) == (
        "F0.0 F1.0 F0.1 F1.1 B0.1 W0.1 F2.0 B1.1 W1.1 F3.0 B0.0 W0.0 F2.1 B1.0 W1.0 "
        "F3.1 B2.1 W2.1 B3.1 W3.1 B2.0 W2.0 B3.0 W3.0"
    )
    assert " ".join(map(str, ops[1])) == (
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 W0.1 F2.0 B0.0 W1.1 F3.0 B1.0 W0.0 F2.1 B2.1 W1.0 "
        "F3.1 B3.1 W2.1 B2.0 W3.1 B3.0 W2.0 W3.0"
    )


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 4), (8, 16, 2), (4, 12, 3)])
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8)])
def test_bubble_is_zb_h1s_per_chunk(p, m, v, f, b, w):
    """Per chunk op (each a 1/v share of a stage), the bubble is ZB-H1's (p-1)(F+B-W), where
    interleaved 1F1B's fused backward leaves (p-1)(F+B+W): W fills 2(p-1)W of the drain."""
    _, zb = run("interleaved-zb", p, m, v, t_f=f, t_b=b, t_w=w)
    _, base = run("interleaved", p, m, v, t_f=f, t_b=b, t_w=w)
    assert bubble_time(zb) == pytest.approx((p - 1) * (f + b - w))
    assert bubble_time(base) == pytest.approx((p - 1) * (f + b + w))


@pytest.mark.parametrize(("p", "m", "v", "g"), [(4, 8, 2, 4), (4, 16, 4, 4), (4, 6, 2, 6), (4, 10, 2, 5)])
def test_every_stage_holds_one_round_more_than_1f1b(p, m, v, g):
    """W deferred by the stage index keeps (v-1)g + p chunk stashes on every stage (ZB-H1's
    p at v = 1), the first stage's interleaved-1F1B warm-up minus the p - 1 it saves."""
    ops, _ = run("interleaved-zb", p, m, v)
    assert peak_inflight(ops) == [(v - 1) * g + p] * p


def test_microbatches_must_fill_pytorchs_rounds():
    # p = 4, m = 9: max(1, 9 // 4) = 2 rounds, and 9 does not split into two
    with pytest.raises(UserError) as err:
        get_schedule("interleaved-zb").build(ScheduleSpec(4, 9, 2))
    assert err.value.field == "training.global_batch" and "use 8 or 10" in str(err.value)


def test_torchtitans_name_runs_it_on_the_engine():
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    sc = load_scenario(
        "llama3-70b-64xh100",
        [("parallel.schedule", "InterleavedZeroBubble"), ("parallel.vpp", 2), ("training.global_batch", 32)],
    )
    assert sc.parallel.schedule == "interleaved-zb"
    doc = simulate(sc).summary
    fused = simulate(load_scenario("llama3-70b-64xh100", [("parallel.schedule", "interleaved"),
                                                           ("parallel.vpp", 2), ("training.global_batch", 32)]))  # fmt: skip
    # W fills the drain: a smaller bubble than interleaved 1F1B at the same v
    assert doc["bubble_fraction"] < 0.75 * fused.summary["bubble_fraction"]
