"""ZB-V in PyTorch's fixed order (torch.distributed.pipelining ``ScheduleZBVZeroBubble``).

References: Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR'24) §6: ZB-V has no bubble when
T_F = T_B = T_W and keeps 1F1B's activation memory (p stage stashes, 2p chunk stashes);
PyTorch's ``_calculate_single_rank_operations`` builds it for max(2p - 1, m) microbatches.
"""

import pytest

from simcluster.schedules.check import (
    bubble_time,
    peak_inflight,
)
from tests.schedule_helpers import run


def test_the_order_pytorch_builds():
    """p = 2, m = 4, traced through PyTorch's phases by hand (stage 0: 3 warm-up forwards of
    chunk 0, then chunk 1's F, B, W twice; stage 1: one chunk-0 forward, a (chunk 1, chunk 0)
    pair, one chunk-1 F, B, W; the cool-down defers stage 1's last W)."""
    ops, _ = run("zbv-fixed", 2, 4)
    assert " ".join(map(str, ops[0])) == (
        "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F3.0 B0.0 W0.0 F2.1 B2.1 W2.1 "
        "B1.0 W1.0 F3.1 B3.1 W3.1 B2.0 W2.0 B3.0 W3.0"
    )
    assert " ".join(map(str, ops[1])) == (
        "F0.0 F0.1 F1.0 F1.1 B0.1 W0.1 F2.0 B0.0 W0.0 F2.1 B1.1 W1.1 F3.0 B1.0 W1.0 "
        "F3.1 B2.1 W2.1 B2.0 B3.1 B3.0 W2.0 W3.1 W3.0"
    )


@pytest.mark.parametrize(("p", "m"), [(2, 3), (2, 4), (4, 7), (4, 8), (4, 13), (8, 16)])
def test_no_bubble_and_1f1b_memory_when_passes_take_alike(p, m):
    ops, tl = run("zbv-fixed", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
    assert bubble_time(tl) == pytest.approx(0.0)
    assert peak_inflight(ops) == [2 * p] * p


def test_fewer_microbatches_than_the_v_needs_leave_a_bubble():
    """Below 2p - 1 microbatches PyTorch drops the ones past m from its 2p - 1 order, so slots
    stay empty, where sail-sg's heuristic (``zbv``) re-plans the order for the m it has."""
    _, fixed = run("zbv-fixed", 4, 5, t_f=1.0, t_b=1.0, t_w=1.0)
    _, planned = run("zbv", 4, 5, t_f=1.0, t_b=1.0, t_w=1.0)
    assert bubble_time(fixed) > bubble_time(planned) > 0.0


def test_torchtitans_name_is_the_fixed_order():
    from simcluster.scenario import load_scenario

    sc = load_scenario("llama3-70b-64xh100", [("parallel.schedule", "ZBVZeroBubble")])
    assert sc.parallel.schedule == "zbv-fixed"
