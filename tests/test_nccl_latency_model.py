"""Collective latencies against NCCL's own cost model (NVIDIA/nccl master, 2026).

Sources: ``src/tuning/cost_model.cc`` (``ncclTunerConstantsDefaults``: baseLatencies Ring
{6.6, 14.0, 8.4}, Tree {6.8, 14.0, 8.4}, NVLS/NVLS_TREE 0; hwLatencies NVLink Ring LL 0.6,
NVLS 25, NVLS_TREE 25; NET Ring LL 2.7, Tree LL 5.0, NVLS_TREE Simple 20.9),
``src/tuning/ring.cc`` (nInterSteps = 2 (nNodes - 1) for all-reduce; with one rank per node
the tree's network latency, NCCL 2.32.3 as NCCL <= 2.2x's ``src/graph/tuning.cc``; intra-node
steps of a multi-node ring floored at the host's network overhead), ``src/tuning/tree.cc`` and ``nvls.cc``
(tree: 2 ((nRanks/nNodes - 1) intraLat + log2i(nNodes) interLat); NVLS: intraLat; NVLS_TREE:
intraLat + 2 log2i(nNodes) interLat, log2i the floor).

On the DGX H100 profile the hardware hops are NCCL's LL reference exactly (NVLink 0.6 us; NIC
2.1 us + one leaf switch 0.6 us = 2.7 us), so each expected number below is NCCL's formula.
"""

from __future__ import annotations

import pytest

from simcluster.hardware import load_profile, profile_from_dict
from simcluster.network import collective_time, describe
from simcluster.network.algorithms import get_algorithm
from simcluster.network.protocols import protocols_for
from simcluster.topology import build_cluster


def h100(n: int):
    """DGX H100 without its measured table (the model alone)."""
    raw = load_profile("dgx-h100").model_dump()
    raw["measured"] = {}
    return build_cluster(profile_from_dict(raw), n)


def _us(x: float) -> float:
    return round(x * 1e6, 6)


def test_nvls_inside_a_node_costs_one_nvls_step_of_25_us():
    c = h100(8)
    assert _us(describe("all_reduce", 8, c, list(range(8)), algo="nvls").latency) == 25.0


def test_nvls_tree_on_two_nodes_is_one_switch_step_and_two_network_steps():
    # NCCL nvls.cc: 0 + 25 + 2 * log2i(2) * 20.9 = 66.8 us (not two switch steps of 25)
    c = h100(16)
    r = describe("all_reduce", 8, c, list(range(16)), algo="nvls_tree")
    assert _us(r.latency) == pytest.approx(66.8)


def test_ring_all_reduce_across_two_nodes_has_two_network_steps():
    # ring.cc: nsteps 2 (16 - 1) = 30, nInterSteps 2 (2 - 1) = 2 (2 nNodes = 4 before)
    c = h100(16)
    plan = get_algorithm("ring").expand("all_reduce", c, list(range(16)))
    assert (plan.intra_steps, plan.inter_steps) == (28, 2)
    # all-gather and reduce-scatter: nRanks - 1 steps, nNodes - 1 of them across nodes
    plan = get_algorithm("ring").expand("all_gather", c, list(range(16)))
    assert (plan.intra_steps, plan.inter_steps) == (14, 1)


def test_a_ring_of_one_rank_per_node_pays_the_trees_network_latency():
    # NVIDIA/nccl 2.32.3 src/tuning/ring.cc (commit 12df1a1): maxLocalRanks == 1 -> interLat =
    # hwLatencies[NET][Tree][proto] ("Preserve the pre-refactor model: with one rank per node,
    # Ring inter-node steps use the exposed Tree NET latency"), as src/graph/tuning.cc of NCCL
    # <= 2.2x did ("With ppn=1 latencies are fully exposed"); Tree LL 5.0 us, not Ring LL 2.7.
    # 2 (4 - 1) network steps:
    c = h100(32)
    one_per_node = [0, 8, 16, 24]
    r = describe("all_reduce", 8, c, one_per_node, algo="ring")
    assert r.proto == "LL"
    assert _us(r.latency) == pytest.approx(6.6 + 6 * 5.0)
    # LL128 pays Tree's 8.5 us a network step (Ring's 4.0 before); Simple 14 us either way
    ll128 = {p.name: p for p in protocols_for("ring", True, "tree")}["LL128"]
    assert _us(ll128.inter_extra_s) == pytest.approx(8.5 - 2.7)
    # broadcast: ring.cc's Reduce/Broadcast branch never reads interLat, so no Tree latency
    # (6.6 base + 3 chain steps across nodes at the ring's 2.7 us LL hop)
    b = describe("broadcast", 8, c, one_per_node, algo="ring")
    assert b.proto == "LL"
    assert _us(b.latency) == pytest.approx(6.6 + 3 * 2.7)
    # two ranks per node: each channel leaves a node from the GPU before the one it enters the
    # next at, so its network hop starts with a PXN relay over NVLink (0.6 us); an intra-node
    # step of a multi-node ring takes at least getNetOverhead, 1 us on the DGX H100's Intel
    # host (ring.cc), above NVLink's 0.6: 6.6 + (14 - 6) x 1.0 + 6 x (0.6 + 2.7)
    two_per_node = [0, 1, 8, 9, 16, 17, 24, 25]
    r2 = describe("all_reduce", 8, c, two_per_node, algo="ring")
    assert _us(r2.latency) == pytest.approx(6.6 + 8 * 1.0 + 6 * (0.6 + 2.7))


@pytest.mark.parametrize("nodes,depth", [(2, 1), (3, 1), (4, 2), (5, 2), (7, 2), (8, 3)])
def test_tree_depth_is_nccls_floor_of_log2(nodes, depth):
    # a heap-shaped binary tree of D nodes is floor(log2 D) deep (NCCL log2i); ceil overcounted
    # every node count that is not a power of two
    c = h100(8 * nodes)
    plan = get_algorithm("tree").expand("all_reduce", c, list(range(8 * nodes)))
    assert plan.inter_steps == 2 * depth
    assert plan.intra_steps == 2 * (8 - 1)


def test_tree_ll128_runs_at_120_of_128_across_nodes_and_7_of_9_inside_one():
    # tree.cc: busBw x (nNodes == 1 ? 7/9 : 120/128) for LL128, after the tree's 0.92
    tree = {p.name: p for p in protocols_for("tree", multi_node=True)}
    one_node = {p.name: p for p in protocols_for("tree")}
    assert tree["LL128"].bw_fraction == pytest.approx(0.92 * 120 / 128)
    assert one_node["LL128"].bw_fraction == pytest.approx(0.92 * 7 / 9)
    assert tree["Simple"].bw_fraction == one_node["Simple"].bw_fraction == pytest.approx(0.92)


def test_the_double_binary_tree_is_nccls():
    # src/graph/trees.cc illustration, 14 ranks: 0-8, 8-{4,12}, 4-{2,6}, 12-{10,13}, 2-{1,3},
    # 6-{5,7}, 10-{9,11}; the second tree mirrors it for even counts, shifts it for odd ones
    from simcluster.network.tree import _dtree_edges

    first = set(_dtree_edges(14, False))
    assert first == {(0, 8), (8, 4), (8, 12), (4, 2), (4, 6), (12, 10), (12, 13), (2, 1),
                     (2, 3), (6, 5), (6, 7), (10, 9), (10, 11)}  # fmt: skip
    assert (13, 5) in set(_dtree_edges(14, True))  # mirror of (0, 8)
    assert set(_dtree_edges(3, False)) == {(0, 2), (2, 1)}
    assert set(_dtree_edges(3, True)) == {(1, 0), (0, 2)}  # shifted by one node


def test_on_four_nodes_a_nic_carries_twice_its_rails_share():
    # NCCL's trees on 4 nodes: node 2 is interior in the first tree (parent 0, children 1, 3)
    # and a leaf of the second, so it sends 2 x S/2 + S/2 + S/2 = 2 S over its node's 8 rails.
    # NIC 400 Gb/s x 0.92 = 46 GB/s: t = 2 S / 8 / 46e9, busbw = 2 (31/32) S / t = 356.5 GB/s,
    # where the switch side (NVLS at 275 GB/s algbw) would allow more
    c = h100(32)
    size = 8 * 2**30
    t = collective_time("all_reduce", size, c, list(range(32)), algo="nvls_tree")
    assert size / t * 2 * 31 / 32 / 1e9 == pytest.approx(2 * 31 / 32 * 4 * 46, rel=0.01)


def test_aws_p5_four_nodes_large_all_reduce_is_nic_bound_as_measured():
    # crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv (hardware/aws-p5.yaml):
    # 4 p5 nodes, 8 GiB, busbw 357.0 GB/s; the model alone (no measured table) within 3%
    raw = load_profile("aws-p5").model_dump()
    raw["measured"] = {}
    c = build_cluster(profile_from_dict(raw), 32)
    size = 8 * 2**30
    t = collective_time("all_reduce", size, c, list(range(32)))
    assert size / t * 2 * 31 / 32 / 1e9 == pytest.approx(357.0, rel=0.03)
