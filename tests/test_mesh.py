"""Mesh scale-up (AMD Infinity Fabric: a direct link between every pair of a node's GPUs).

Published figures: AMD ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on AMD
Instinct MI300X" (2025-03-02): 64 GB/s per xGMI link per direction, 45-48 GB/s usable per link
(TransferBench), rccl-tests all_reduce on 8 GPUs 317.96 GB/s busbw at 8 GiB; hisohara/ai-scripts
training/01_rccl-smoketest: rccl-tests all_reduce on 2 nodes x 8 MI300X (8 NICs each) 356.14 GB/s
busbw at 8 GiB. nccl-tests busbw definition: all_reduce algbw x 2(n-1)/n (NVIDIA/nccl-tests
doc/PERFORMANCE.md).
"""

from __future__ import annotations

import pytest

from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.network import collective_time
from simcluster.topology import build_cluster

GiB = 2**30


def mi300x(n: int, **over):
    return build_cluster(load_profile("amd-mi300x", over or None), n)


def busbw_ar(t: float, size: float, n: int) -> float:
    return size / t * 2 * (n - 1) / n / 1e9


def test_mesh_has_a_direct_link_per_pair_and_no_switch():
    c = mi300x(8)
    links = [(u, v) for u, v in c.edges if u.startswith("gpu") and v.startswith("gpu")]
    assert len(links) == 8 * 7  # both directions of the 28 pairs
    assert not any(n.startswith("nvs") for n in c.graph.nodes)
    bw = {c.graph.edges[e]["bandwidth"] for e in links}
    assert bw == {64e9}  # 448 GB/s per GPU over its 7 links
    assert c.path(0, 5) == (c.link("gpu0", "gpu5"),)


def test_eight_gpu_all_reduce_matches_rccl_tests():
    t = collective_time("all_reduce", 8 * GiB, mi300x(8), list(range(8)))
    assert busbw_ar(t, 8 * GiB, 8) == pytest.approx(317.96, rel=0.02)


def test_two_node_all_reduce_matches_rccl_tests():
    # Not in the profile's measured table: an independent check of the multi-node rings.
    t = collective_time("all_reduce", 8 * GiB, mi300x(16), list(range(16)))
    assert busbw_ar(t, 8 * GiB, 16) == pytest.approx(356.14, rel=0.05)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_a_group_gets_the_links_among_its_gpus(k):
    # k GPUs share k - 1 links each: busbw = (k - 1) x one link's usable rate (64 x 0.708).
    one_link = 64 * 0.708
    t = collective_time("all_reduce", 8 * GiB, mi300x(8), list(range(k)))
    busbw = busbw_ar(t, 8 * GiB, k)
    if k < 8:  # the measured 8-GPU table only covers the whole node
        assert busbw == pytest.approx((k - 1) * one_link, rel=0.01)
    assert 45.0 <= busbw / (k - 1) <= 48.0  # TransferBench: 45-48 GB/s per link


def test_point_to_point_uses_one_link():
    c = mi300x(8)
    t = collective_time("send_recv", GiB, c, [0, 3])
    assert GiB / t / 1e9 == pytest.approx(64 * 0.708, rel=0.01)


def test_inter_node_ring_crosses_on_its_own_rail():
    # Exit and entry at the same local GPU: no PXN relay over an xGMI link.
    c = mi300x(16)
    assert c.path(3, 11) == (
        c.link("gpu3", "nic0.3"),
        c.link("nic0.3", "leaf3.0"),
        c.link("leaf3.0", "nic1.3"),
        c.link("nic1.3", "gpu11"),
    )


def test_switch_nodes_are_unchanged():
    # DGX H100 keeps its NVSwitch star: 8-GPU ring busbw = 450 x 0.82 (efficiency.nvlink).
    c = build_cluster(load_profile("dgx-h100"), 8)
    assert any(n.startswith("nvs") for n in c.graph.nodes)
    t = collective_time("all_reduce", 8 * GiB, c, list(range(8)), algo="ring")
    assert busbw_ar(t, 8 * GiB, 8) == pytest.approx(450 * 0.82, rel=0.01)


def test_mesh_spanning_several_nodes_is_an_error():
    with pytest.raises(UserError, match="nvlink_domain"):
        mi300x(16, nvlink_domain=16)


def test_mi300x_peak_is_cus_times_rate_times_clock():
    # AMD ROCm docs (MI300 microarchitecture): 304 CUs x 2048 BF16 FLOP/clock x 2.1 GHz.
    p = load_profile("amd-mi300x")
    assert p.gpu.sm_count * 2048 * 2.1e9 / 1e12 == pytest.approx(
        p.gpu.peak_tflops["bf16"], rel=1e-3
    )
    assert p.gpu.peak_tflops["fp8"] == pytest.approx(2 * p.gpu.peak_tflops["bf16"], rel=1e-3)
    assert p.node.nvlink_GBps == 7 * 64  # seven xGMI links of 64 GB/s per direction


def test_all_to_all_uses_every_link_at_once():
    # ROCm blog (TransferBench all-to-all, 64 MiB per pair): aggregated unidirectional bandwidth
    # per GPU 315-336 GB/s (7 x 45-48 GB/s). Each GPU sends S/8 to each of its 7 peers.
    size = 8 * GiB
    t = collective_time("all_to_all", size, mi300x(8), list(range(8)))
    per_gpu_out = size * 7 / 8 / t / 1e9
    assert 310.0 <= per_gpu_out <= 336.0
