"""Topology builders, routes, oversubscription and rank placement."""

from __future__ import annotations

import pytest

from simcluster.errors import UserError
from simcluster.hardware import load_profile
from simcluster.topology import TOPOLOGIES, build_cluster, rank_to_gpu


def cluster(n: int, **over):
    return build_cluster(load_profile("dgx-h100", over or None), n)


def hops(c, src, dst):
    return [c.edges[e] for e in c.path(src, dst)]


def test_single_node_nvswitch():
    c = cluster(8)
    assert c.graph.number_of_nodes() == 9  # 8 GPUs + 1 NVSwitch domain
    assert hops(c, 0, 5) == [("gpu0", "nvs0"), ("nvs0", "gpu5")]
    # H100 datasheet: NVLink 900 GB/s bidirectional -> 450 GB/s per direction.
    assert c.graph.edges["gpu0", "nvs0"]["bandwidth"] == 450e9
    assert c.graph.edges["gpu0", "nvs0"]["capacity"] == pytest.approx(450e9 * 0.82)


def test_rail_routes_and_pxn():
    c = cluster(16)
    assert hops(c, 0, 8) == [
        ("gpu0", "nic0.0"),
        ("nic0.0", "leaf0.0"),
        ("leaf0.0", "nic1.0"),
        ("nic1.0", "gpu8"),
    ]
    # Cross-rail: NVLink to the local GPU on the destination rail first (NCCL PXN).
    assert [u for u, _ in hops(c, 0, 9)] == ["gpu0", "nvs0", "gpu1", "nic0.1", "leaf1.0", "nic1.1"]
    assert c.node_of(9) == 1 and c.rail_of(9) == 1


def test_spine_and_oversubscription():
    c = cluster(32, nodes_per_leaf=2, oversubscription=4.0)
    assert [u for u, _ in hops(c, 0, 16)] == [
        "gpu0",
        "nic0.0",
        "leaf0.0",
        "spine",
        "leaf0.1",
        "nic2.0",
    ]
    # Leaf rail 0 of group 0 has 2 NICs down (2 x 50 GB/s); uplink = that / 4.
    assert c.graph.edges["leaf0.0", "spine"]["bandwidth"] == pytest.approx(2 * 50e9 / 4)


def test_fat_tree_and_nvl_domain():
    c = cluster(16, topology="fat_tree")
    assert [u for u, _ in hops(c, 0, 9)] == ["gpu0", "nic0.0", "leaf0", "nic1.1"]
    nvl = cluster(144, topology="nvl_domain", nvlink_domain=72)
    assert hops(nvl, 0, 70) == [("gpu0", "nvs0"), ("nvs0", "gpu70")]
    assert "nic" in hops(nvl, 0, 72)[1][0] or "nic" in hops(nvl, 0, 72)[0][1]
    assert set(TOPOLOGIES) >= {"rail_fat_tree", "fat_tree", "nvl_domain"}


def test_topology_errors():
    with pytest.raises(UserError, match="did you mean 'fat_tree'"):
        cluster(16, topology="fat_tre")
    with pytest.raises(UserError, match="nvlink_domain"):
        cluster(16, topology="nvl_domain")
    with pytest.raises(UserError, match="multiple of 8"):
        cluster(12)


def test_an_nvlink_domain_smaller_than_a_node_is_refused_before_routing():
    """Two GPUs of one node in different NVLink domains would talk over PCIe, which is not
    modelled: a domain of 2 on GB300's 4-GPU trays once built, then failed mid-simulation
    routing GPU 0 -> 2 ("no PXN relay", raised inside a SimPy process). Refused at build time,
    naming the field and a size that works; a domain of whole trays still builds."""
    with pytest.raises(UserError, match=r"^cluster\.nvlink_domain: .*smaller than one node \(4 GPUs\).*multiple of 4"):
        build_cluster(load_profile("gb300-nvl72", {"nvlink_domain": 2}), 8)
    with pytest.raises(UserError, match=r"smaller than one node \(8 GPUs\)"):
        cluster(8, nvlink_domain=4)
    assert build_cluster(load_profile("gb300-nvl72", {"nvlink_domain": 4}), 8).path(0, 2)


def test_memory_refuses_the_nvlink_domain_run_refuses_with_its_message(cli):
    """``memory`` builds no cluster: it accepted a domain of 4 GPUs on DGX H100's 8-GPU nodes
    and printed a table for a layout ``run`` refuses at build_cluster. build_context now makes
    the same check (topology.job_domain), so the one line is build_cluster's, exit code 2."""
    with pytest.raises(UserError) as refused:
        cluster(8, nvlink_domain=4)
    res = cli("memory", "llama3-8b-8xh100", "--set", "cluster.nvlink_domain=4")
    assert (res.code, res.err.strip().splitlines()) == (2, [f"error: {refused.value}"]), res.err


def test_rank_grid_keeps_tp_in_a_node():
    grid = rank_to_gpu({"tp": 8, "dp": 2, "pp": 2})
    assert grid.groups("tp")[1] == list(range(8, 16))
    assert grid.groups("dp")[0] == [0, 8]
    assert grid.groups("pp")[0] == [0, 16]
    assert grid.gpu({"tp": 3, "dp": 1, "pp": 1}) == 3 + 8 + 16
    c = cluster(32)
    assert all(len({c.node_of(g) for g in grp}) == 1 for grp in grid.groups("tp"))
    with pytest.raises(UserError):
        rank_to_gpu({"tp": 2, "ep": 2})
