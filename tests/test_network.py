"""Network physics: nccl-tests agreement, max-min sharing, NIC limits, symmetry, calibration."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.network import Network, collective_time, describe
from simcluster.network.flows import Flow, max_min_rates
from simcluster.topology import build_cluster

GiB, MiB = 2**30, 2**20

# NVIDIA/dgxc-benchmarking nccl/README.md sample: DGX H100, 8 GPUs, all_reduce (bytes, busbw GB/s);
# transcribed in shared/validation/published.yaml (nccl_tests_reference_outputs).
DGX_H100_AR = [(2**30, 466.33), (2**31, 473.37), (2**32, 477.24), (2**33, 480.16), (2**34, 479.9)]


def h100(n: int, **over):
    """The DGX H100 network model alone (the profile's measured table left out)."""
    from simcluster.hardware import profile_from_dict

    raw = load_profile("dgx-h100", over or None).model_dump()
    raw["measured"] = {}
    return build_cluster(profile_from_dict(raw), n)


def busbw_ar(t: float, size: float, n: int) -> float:
    return size / t * 2 * (n - 1) / n / 1e9


def simulate(cluster, calls, symmetric=True):
    """Start calls [(kind, args)] together; return each call's finish time."""
    env = simpy.Environment()
    net = Network(env, cluster, symmetric=symmetric)
    ends: list[float] = [0.0] * len(calls)

    def watch(i, ev):
        yield ev
        ends[i] = env.now

    for i, (kind, args) in enumerate(calls):
        env.process(watch(i, getattr(net, kind)(*args)))
    env.run()
    return ends


@pytest.mark.parametrize("size,published", DGX_H100_AR)
def test_dgx_h100_allreduce_matches_nccl_tests(size, published):
    t = collective_time("all_reduce", size, h100(8), list(range(8)))
    assert busbw_ar(t, size, 8) == pytest.approx(published, rel=0.10)


# the same sample's mid sizes, which the model alone reaches too early (32 MiB: ~405 GB/s)
DGX_H100_AR_MID = [(2**25, 294.69), (2**26, 361.67), (2**27, 400.53), (2**28, 422.25), (2**29, 436.79)]


@pytest.mark.parametrize("size,published", DGX_H100_AR_MID)
def test_shipped_dgx_h100_carries_the_samples_mid_size_losses(size, published):
    """The shipped profile holds the sample as its single-node table (measured.collectives), so an
    8-GPU all-reduce is the measurement itself and a 4-GPU TP group gets the same ratio."""
    shipped = build_cluster(load_profile("dgx-h100"), 8)
    t = collective_time("all_reduce", size, shipped, list(range(8)))
    assert busbw_ar(t, size, 8) == pytest.approx(published, rel=1e-6)
    model = collective_time("all_reduce", size, h100(8), list(range(8)))
    ratio = t / model
    assert ratio > 1.0  # the model alone is faster than NCCL at these sizes
    four = collective_time("all_gather", size, shipped, [0, 1, 2, 3])
    assert four == pytest.approx(ratio * collective_time("all_gather", size, h100(8), [0, 1, 2, 3]), rel=1e-9)


def test_small_messages_latency_dominated():
    # Same sample: 8 B in 13.67 us, 1 MiB in 27.37 us.
    c = h100(8)
    assert collective_time("all_reduce", 8, c, list(range(8))) * 1e6 == pytest.approx(
        13.67, rel=0.15
    )
    assert collective_time("all_reduce", MiB, c, list(range(8))) * 1e6 == pytest.approx(
        27.37, rel=0.10
    )


def test_plain_ring_is_about_370():
    # nccl-tests issue 212 (maintainer): ~370 GB/s busbw with NCCL_ALGO=RING on 8x H100.
    t = collective_time("all_reduce", 8 * GiB, h100(8), list(range(8)), algo="ring")
    assert busbw_ar(t, 8 * GiB, 8) == pytest.approx(370, rel=0.05)
    assert describe("all_reduce", 8 * GiB, h100(8), list(range(8))).algo == "nvls"


def test_max_min_textbook_example():
    # Bertsekas & Gallager sec 6.5.2 style: link0 cap 1, link1 cap 2; f0 on 0, f1 on 0+1, f2 on 1.
    flows = [Flow((0,), (1.0,), 1), Flow((0, 1), (1.0, 1.0), 1), Flow((1,), (1.0,), 1)]
    max_min_rates(flows, [1.0, 2.0])
    assert [f.rate for f in flows] == pytest.approx([0.5, 0.5, 1.5])


def test_progressive_filling_on_arrays_gives_the_dictionaries_rates():
    """Collectives of thousands of links reshare on arrays (flows._fill_arrays): the same
    max-min rates as the per-link dictionaries, on random flows (seeded) and on the textbook
    example with each link repeated 300 times (above flows._ARRAY_ENTRIES)."""
    import random

    from simcluster.network import flows as fl

    rng = random.Random(7)
    for _ in range(20):
        capacity = [rng.uniform(1.0, 100.0) for _ in range(400)]
        made = [
            (tuple(rng.sample(range(400), rng.randint(1, 300))), rng.choice((1.0, 2.0, 3.0)))
            for _ in range(rng.randint(2, 12))
        ]
        a = [Flow(links, (c,) * len(links), 1) for links, c in made]
        b = [Flow(links, (c,) * len(links), 1) for links, c in made]
        fl._fill_arrays(a, np.asarray(capacity))
        residual, load, users = fl._link_usage(b, capacity)
        fl._fill({id(f): f for f in b}, residual, load, users, capacity)
        assert [f.rate for f in a] == pytest.approx([f.rate for f in b], rel=1e-12)
    wide = [Flow(tuple(range(0, 300)), (1.0,) * 300, 1), Flow(tuple(range(600)), (1.0,) * 600, 1),
            Flow(tuple(range(300, 600)), (1.0,) * 300, 1)]  # fmt: skip
    max_min_rates(wide, [1.0] * 300 + [2.0] * 300)
    assert [f.rate for f in wide] == pytest.approx([0.5, 0.5, 1.5])


def test_a_lone_flow_gets_its_bottleneck_rate_as_progressive_filling_gives_it():
    """One flow alone: its rate is min over its links of capacity / copies (the first filling
    step), bit for bit what the general algorithm computes with a second flow elsewhere."""
    capacity = [50.0, 450.0, 25.0, 900.0]
    alone = Flow((0, 1, 3), (2.0, 3.0, 1.5), 1)
    max_min_rates([alone], capacity)
    assert alone.rate == min(50.0 / 2.0, 450.0 / 3.0, 900.0 / 1.5) == 25.0
    twin, elsewhere = Flow((0, 1, 3), (2.0, 3.0, 1.5), 1), Flow((2,), (1.0,), 1)
    max_min_rates([twin, elsewhere], capacity)  # two components: the general path
    assert twin.rate == alone.rate and elsewhere.rate == 25.0


def test_groups_passed_as_one_cached_tuple_are_checked_once_and_still_checked():
    """The engine passes a stage's groups as one cached tuple, remembered by identity: the
    second call with the same object is a lookup; a bad tuple is still refused."""
    from simcluster.network.planner import check_groups

    c = h100(16)
    groups = ((0, 1, 2, 3), (4, 5, 6, 7))
    key = check_groups(c, groups)
    assert key == groups and check_groups(c, groups) is key
    assert check_groups(c, [list(g) for g in groups]) == key  # lists: checked by value
    with pytest.raises(UserError, match="equal sizes"):
        check_groups(c, ((0, 1), (2, 3, 4)))
    with pytest.raises(UserError, match="outside the cluster"):
        check_groups(c, ((0, 99),))


def test_two_transfers_on_one_nic_take_twice_as_long():
    c = h100(16)
    (alone,) = simulate(c, [("send", (0, 8, GiB))])
    both = simulate(c, [("send", (0, 8, GiB)), ("send", (0, 8, GiB))])
    lat = collective_time("send_recv", 1, c, [0, 8])
    assert (both[0] - lat) == pytest.approx(2 * (alone - lat), rel=0.01)
    # Different rails do not interfere.
    other = simulate(c, [("send", (0, 8, GiB)), ("send", (1, 9, GiB))])
    assert other[0] == pytest.approx(alone, rel=1e-6)


def test_rates_recomputed_when_a_flow_ends():
    c = h100(16)
    lat = collective_time("send_recv", 1, c, [0, 8])
    (alone,) = simulate(c, [("send", (0, 8, GiB))])
    unit = alone - lat
    small, big = simulate(c, [("send", (0, 8, GiB)), ("send", (0, 8, 2 * GiB))])
    assert small - lat == pytest.approx(2 * unit, rel=0.01)
    assert big - lat == pytest.approx(3 * unit, rel=0.01)


def test_multinode_ring_is_nic_limited():
    # 8 NICs x 400 Gb/s x 0.92 = 368 GB/s per node; ring busbw equals the node's NIC bandwidth.
    for gbps in (400, 200):
        c = h100(16, nic_gbps=gbps)
        t = collective_time("all_reduce", 4 * GiB, c, list(range(16)), algo="ring")
        assert busbw_ar(t, 4 * GiB, 16) == pytest.approx(8 * gbps / 8 * 0.92, rel=0.03)
    c = h100(16)
    ring = collective_time("all_reduce", 4 * GiB, c, list(range(16)), algo="ring")
    hier = collective_time("all_reduce", 4 * GiB, c, list(range(16)), algo="hierarchical")
    assert hier < ring * 0.95


def test_a_ring_across_unequal_nvlink_domains_uses_a_channel_per_rail():
    """NCCL builds the same number of channels whatever the share of the group in each NVLink
    domain; each crosses between domains on its own GPU's NIC. A DP group of two GPUs per GB200
    tray over 32 trays spans two NVL72 racks unequally (18 trays + 14): its all-gather must not
    fall to one NIC's 50 GB/s, and is within a few percent of the equal split over 36 trays."""
    cluster = build_cluster(load_profile("gb200-nvl72"), 144)
    tray = load_profile("gb200-nvl72").node.gpus_per_node

    def busbw(trays: int) -> float:
        group = [t * tray + k for t in range(trays) for k in range(2)]
        n = len(group)
        return 4 * GiB * (n - 1) / n / collective_time("all_gather", 4 * GiB, cluster, group, algo="ring") / 1e9

    unequal, equal = busbw(32), busbw(36)
    nic = load_profile("gb200-nvl72").node.nic_gbps / 8
    assert unequal > 8 * nic
    assert unequal == pytest.approx(equal, rel=0.05)


def test_oversubscription_divides_cross_leaf_bandwidth():
    pairs = [(g, g + 16) for g in range(16)]  # nodes 0,1 (leaf 0) -> nodes 2,3 (leaf 1)
    times = []
    for k in (1.0, 2.0, 4.0):
        c = h100(32, nodes_per_leaf=2, oversubscription=k)
        times.append(simulate(c, [("send", (0, 16, GiB, pairs))])[0])
    lat = collective_time("send_recv", 1, h100(32, nodes_per_leaf=2), [0, 16])
    assert (times[1] - lat) / (times[0] - lat) == pytest.approx(2.0, rel=0.01)
    assert (times[2] - lat) / (times[0] - lat) == pytest.approx(4.0, rel=0.01)


def test_symmetric_shortcut_agrees_with_explicit():
    # 2 NICs per node: four DP groups share each NIC, so the peers really contend.
    c = h100(32, nics_per_node=2)
    groups = [[k, k + 8, k + 16, k + 24] for k in range(8)]
    calls = [("collective", ("all_reduce", groups, 256 * MiB, "ring")), ("send", (0, 8, 64 * MiB))]
    sym = simulate(c, calls)
    exp = simulate(c, calls, symmetric=False)
    assert sym == pytest.approx(exp, rel=1e-6)
    alone = collective_time("all_reduce", 256 * MiB, c, groups[0], algo="ring")
    assert sym[0] > 2 * alone


def test_symmetric_call_cost_does_not_grow_with_groups():
    from simcluster.network.planner import make_recipe

    c = h100(64)
    few = make_recipe(c, "all_reduce", [[k, k + 8] for k in range(8)], GiB, "ring")
    many = make_recipe(
        c,
        "all_reduce",
        [[k + 16 * j, k + 16 * j + 8] for j in range(4) for k in range(8)],
        GiB,
        "ring",
    )
    assert len(many.specs) == 1 and len(many.specs[0]) == len(few.specs[0])


def test_calibrated_table_is_reproduced():
    rows = [
        {"op": "all_reduce", "scope": "intra", "gpus": 8, "gpus_per_node": 8, "nodes": 1,
         "bytes": b, "time_s": b / (bw / 1.75 * 1e9), "algbw_GBps": bw / 1.75, "busbw_GBps": bw}
        for b, bw in [(MiB, 40.0), (64 * MiB, 300.0), (GiB, 400.0)]
    ]  # fmt: skip
    raw = load_profile("dgx-h100").model_dump()
    raw["measured"] = {"collectives": rows}
    from simcluster.hardware import profile_from_dict

    c = build_cluster(profile_from_dict(raw), 8)
    group = list(range(8))
    for size, expect in [(MiB, 40.0), (8 * MiB, 40 + 260 * 0.5), (GiB, 400.0), (4 * GiB, 400.0)]:
        t = simulate(c, [("collective", ("all_reduce", [group], size))])[0]
        assert busbw_ar(t, size, 8) == pytest.approx(expect, rel=0.05)


def _calibrated(rows: list[dict], gpus: int):
    from simcluster.hardware import profile_from_dict

    raw = load_profile("dgx-h100").model_dump()
    raw["measured"] = {"collectives": rows}
    return build_cluster(profile_from_dict(raw), gpus)


def _slowed_rows(op: str, nodes: int, factor: float, sizes=(64 * MiB, GiB)) -> list[dict]:
    """nccl-tests-style rows on ``nodes`` whole DGX H100 nodes, ``factor`` x the model's time."""
    ref = h100(8 * nodes)
    group = list(range(8 * nodes))
    return [
        {"op": op, "scope": "world", "gpus": 8 * nodes, "gpus_per_node": 8, "nodes": nodes,
         "bytes": b, "time_s": factor * collective_time(op, b, ref, group)}
        for b in sizes
    ]  # fmt: skip


def test_a_table_carries_its_ratio_to_another_geometry():
    # Measured on 2 whole nodes at twice the modelled time; a DP group of a TP-8 layout (one GPU
    # per node, one NIC) is 2x its own modelled time, not the 16-rank table's time.
    c = _calibrated(_slowed_rows("all_reduce", 2, 2.0), 16)
    for group in ([0, 8], list(range(16)), [0, 1, 8, 9]):
        model = collective_time("all_reduce", GiB, h100(16), group)
        assert collective_time("all_reduce", GiB, c, group) == pytest.approx(2 * model, rel=1e-9)
    # single-node groups have no intra rows: the model alone
    model = collective_time("all_reduce", GiB, h100(16), list(range(8)))
    assert collective_time("all_reduce", GiB, c, list(range(8))) == pytest.approx(model, rel=1e-12)


def test_a_measured_speedup_stays_at_its_own_geometry():
    # nccl-tests on two whole p5/DGX nodes beat the ring model (NVLS-tree busbw above the NIC
    # rate, NVIDIA/nccl-tests#22); a one-GPU-per-node group cannot use that algorithm.
    c = _calibrated(_slowed_rows("all_reduce", 2, 0.5), 16)
    whole = collective_time("all_reduce", GiB, h100(16), list(range(16)))
    assert collective_time("all_reduce", GiB, c, list(range(16))) == pytest.approx(0.5 * whole)
    single = collective_time("all_reduce", GiB, h100(16), [0, 8])
    assert collective_time("all_reduce", GiB, c, [0, 8]) == pytest.approx(single, rel=1e-12)


def test_ratio_is_interpolated_in_log_node_count_and_held_beyond():
    rows = _slowed_rows("all_reduce", 2, 2.0) + _slowed_rows("all_reduce", 8, 1.0)
    c = _calibrated(rows, 128)
    for nodes, ratio in [(2, 2.0), (4, 1.5), (8, 1.0), (16, 1.0)]:
        group = list(range(0, 8 * nodes, 8))  # one GPU per node
        model = collective_time("all_reduce", 64 * MiB, h100(128), group)
        calibrated = collective_time("all_reduce", 64 * MiB, c, group)
        assert calibrated == pytest.approx(ratio * model, rel=1e-9), nodes


def test_reduce_scatter_borrows_the_all_reduce_ratio():
    # A ring all-reduce is a reduce-scatter then an all-gather of the same chunks.
    c = _calibrated(_slowed_rows("all_reduce", 2, 1.5), 16)
    for op in ("reduce_scatter", "all_gather"):
        model = collective_time(op, GiB, h100(16), list(range(16)))
        assert collective_time(op, GiB, c, list(range(16))) == pytest.approx(1.5 * model, rel=1e-9)
    # all_to_all is not a half of an all-reduce: no borrowed ratio
    model = collective_time("all_to_all", GiB, h100(16), list(range(16)))
    assert collective_time("all_to_all", GiB, c, list(range(16))) == pytest.approx(model, rel=1e-12)


def test_ideal_network_takes_no_time():
    env = simpy.Environment()
    net = Network(env, h100(16), ideal=True)
    ev = net.collective("all_reduce", [list(range(16))], GiB)
    env.run()
    assert ev.triggered and env.now == 0


def test_bad_inputs():
    c = h100(16)
    with pytest.raises(UserError, match="did you mean 'ring'"):
        collective_time("all_reduce", GiB, c, list(range(16)), algo="rign")
    with pytest.raises(UserError, match="one NVLink domain"):
        collective_time("all_reduce", GiB, c, list(range(16)), algo="nvls")
    with pytest.raises(UserError, match="did you mean 'all_gather'"):
        collective_time("all_gathr", GiB, c, list(range(16)))
    with pytest.raises(UserError, match="outside the cluster"):
        collective_time("all_reduce", GiB, c, [0, 99])


def test_nvls_tree_on_two_nodes_is_bound_by_the_switch():
    # NCCL's NVLS_TREE: in-switch reduction at NVLS's algbw (450 x 0.611 = 275 GB/s, from
    # nccl-tests issue 212) while each NIC carries only the S/8 shard each way (400 Gb/s x 0.92
    # = 46 GB/s -> 368 GB/s of S): busbw = 275 x 2(n-1)/n on 16 GPUs, above the ring's NIC bound.
    c = h100(16)
    t = collective_time("all_reduce", 8 * GiB, c, list(range(16)), algo="nvls_tree")
    assert busbw_ar(t, 8 * GiB, 16) == pytest.approx(450 * 0.611 * 2 * 15 / 16, rel=0.01)
    ring = collective_time("all_reduce", 8 * GiB, c, list(range(16)), algo="ring")
    assert describe("all_reduce", 8 * GiB, c, list(range(16))).algo == "nvls_tree"
    assert t < ring


def test_nvls_tree_needs_several_gpus_in_several_domains():
    c = h100(16)
    with pytest.raises(UserError, match="nvls_tree"):
        collective_time("all_reduce", GiB, c, list(range(8)), algo="nvls_tree")  # one node
    with pytest.raises(UserError, match="nvls_tree"):
        collective_time("all_reduce", GiB, c, [0, 8], algo="nvls_tree")  # one GPU per node
    no_nvls = h100(16, nvls=False)
    with pytest.raises(UserError, match="NVLS"):
        collective_time("all_reduce", GiB, no_nvls, list(range(16)), algo="nvls_tree")


def test_nccl_runs_no_nvls_with_two_or_fewer_gpus_of_the_group_per_domain():
    """NVIDIA/nccl src/transport/nvls.cc ``ncclNvlsInit`` (NCCL 2.18, the release PyTorch 2.1
    ships, through current ones): ``if (!ncclParamNvlsEnable() || gpuCount <= 2) return
    ncclSuccess;`` before NVLS is enabled, ``gpuCount`` being the communicator's GPUs in the
    node's topology. So a TP-2 pair, or the DP group of a TP-4 layout on 8-GPU nodes (two of
    its GPUs per node), runs neither NVLS nor NVLS_TREE; three or more per node may."""
    c = h100(16)
    pair = [0, 1]
    with pytest.raises(UserError, match="gpuCount <= 2"):
        collective_time("all_reduce", GiB, c, pair, algo="nvls")
    assert describe("all_reduce", GiB, c, pair).algo not in ("nvls", "nvls_tree")
    assert collective_time("all_reduce", GiB, c, pair) == collective_time("all_reduce", GiB, c, pair, algo="ring")
    collective_time("all_reduce", GiB, c, [0, 1, 2], algo="nvls")  # three: NVLS allowed
    two_per_node = [0, 4, 8, 12]  # the DP group of tp 4 on two 8-GPU nodes
    with pytest.raises(UserError, match="gpuCount <= 2"):
        collective_time("all_reduce", GiB, c, two_per_node, algo="nvls_tree")
    assert describe("all_reduce", GiB, c, two_per_node).algo not in ("nvls", "nvls_tree")
    four_per_node = [0, 2, 4, 6, 8, 10, 12, 14]  # tp 2: four per node
    collective_time("all_reduce", GiB, c, four_per_node, algo="nvls_tree")  # allowed


def test_between_two_rows_the_time_is_affine_in_size():
    # a latency row and a bandwidth row: alpha + beta * size through both (the alpha-beta cost of
    # a collective), so 16 B costs the 8 B row's time and half-way in bytes half-way in time
    rows = [
        {"op": "all_reduce", "scope": "intra", "gpus": 8, "gpus_per_node": 8, "nodes": 1, "bytes": b, "time_s": t}
        for b, t in [(8, 10e-6), (MiB, 30e-6)]
    ]  # fmt: skip
    from simcluster.network.calibrated import table_time

    assert table_time(rows, "all_reduce", 16, 8) == pytest.approx(10e-6, rel=1e-4)
    assert table_time(rows, "all_reduce", (8 + MiB) / 2, 8) == pytest.approx(20e-6, rel=1e-9)
    assert table_time(rows, "all_reduce", MiB, 8) == pytest.approx(30e-6, rel=1e-12)


def test_a_sliver_of_a_flow_below_the_clocks_resolution_still_finishes():
    """Two hundred thousand simulated seconds in (a step of a huge model on a few slow GPUs),
    a double resolves about 2.9e-11 s: a flow whose last bytes take less than half of that gets a
    timeout that fires at the same ``now``; it must end there, not wake the solver for ever."""
    from simcluster.network.flows import FlowSolver

    solver, now = FlowSolver([1e11]), 2e5
    solver.advance(now)
    flow = Flow((0,), (1.0,), 1.0)  # 1 B at 100 GB/s: 1e-11 s
    solver.add(flow)
    dt = solver.reshare()
    assert dt == pytest.approx(1e-11) and now + dt == now
    assert solver.advance(now + dt) == [flow]
    # a picosecond's work still ends a flow early in a step, as before
    solver, flow = FlowSolver([1e9]), Flow((0,), (1.0,), 1e-3)
    solver.add(flow)
    solver.reshare()
    assert solver.advance(0.0) == [flow]


def test_a_finished_flow_reshares_every_flow_it_reaches_through_shared_links():
    """Max-min fairness by hand (Bertsekas & Gallager, Data Networks, sec. 6.5.2). Link 0
    (2 B/s) carries F and Y, link 1 (4 B/s) carries Y and X: Y gets 1 on link 0, X the 3 left
    on link 1. When F ends, Y can rise to 2 on link 0, and then X, which shares nothing with
    F and was added before Y, must drop to the fair 2 on link 1 (staying at 3 would load link 1
    with 5 B/s)."""
    from simcluster.network.flows import FlowSolver

    solver = FlowSolver([2.0, 4.0])
    x, f, y = Flow((1,), (1.0,), 100.0), Flow((0,), (1.0,), 1.0), Flow((0, 1), (1.0, 1.0), 100.0)
    for flow in (x, f, y):
        solver.add(flow)
    assert solver.reshare() == pytest.approx(1.0)  # F's 1 B at 1 B/s
    assert (x.rate, f.rate, y.rate) == pytest.approx((3.0, 1.0, 1.0))
    assert solver.advance(1.0) == [f]
    solver.reshare()
    assert (x.rate, y.rate) == pytest.approx((2.0, 2.0))
    # a flow on links nobody else uses keeps its rate through others' reshares
    z = Flow((2,), (1.0,), 1.0)
    solver = FlowSolver([2.0, 4.0, 8.0])
    for flow in (z, x, y):
        solver.add(flow)
    solver.reshare()
    z.rate = -1.0  # a marker: a reshare of Z would overwrite it
    solver.add(Flow((1,), (1.0,), 1.0))
    solver.reshare()
    assert z.rate == -1.0
