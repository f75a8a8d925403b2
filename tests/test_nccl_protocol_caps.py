"""Protocol bandwidths and CPU-dependent latencies against NCCL's current tuner (NVIDIA/nccl
master, 2026, ``src/tuning/``).

``cost_model.cc`` ``ncclTunerConstantsDefaults``: llMaxBws rows Volta {39, 39, 20.4}, Ampere/AMD
{87.7, 22.5, 19.0}, Hopper {141, 45, 35}, Blackwell {282, 90, 70} (1 node, 2 nodes, more);
perChMaxRingLL128Bws Hopper 36.7 per channel. ``tuning_general.cc``
``ncclTuningGetConstantsIndexes``: one node reads the GPU's row, several nodes row 1 for an AMD
host and row 0 otherwise. ``ring.cc``: ring LL = min(llMaxBw, busBw / 2); LL128 = min(0.92 busBw,
nChannels x 36.7); ``getNetOverhead`` 1 us Intel / 2 us AMD (x3 for Simple) floors each intra-node
step of a multi-node ring; a multi-node ring Simple all-reduce's latency x1.4 (Ampere and later).

The model-only DGX H100 (no measured table): NVLink 450 GB/s x 0.82 = 369 GB/s per GPU, so a
ring inside one node runs at busBw 369 GB/s, half of it (184.5) above Hopper's LL cap of 141.
"""

from __future__ import annotations

import pytest

from simcluster.errors import UserError
from simcluster.hardware import compute_capability_of, load_profile, profile_from_dict
from simcluster.network import describe
from simcluster.network.algorithms import get_algorithm
from simcluster.network.protocol_costs import P2P_BASE_US, candidates
from simcluster.topology import build_cluster

GB = 1e9


def _raw(name: str = "dgx-h100", **node: object) -> dict:
    raw = load_profile(name).model_dump()
    raw["measured"] = {}
    raw["node"].update(node)
    return raw


def cluster(n: int, name: str = "dgx-h100", **node: object):
    return build_cluster(profile_from_dict(_raw(name, **node)), n)


def _rates(c, op: str, group: list[int], algo: str = "ring", nbytes: float = 1 << 30) -> dict:
    """{protocol: (bus bandwidth of the payload in GB/s, latency in us)} for the plan."""
    plan = get_algorithm(algo).expand(op, c, group)
    out = {}
    for cand in candidates(c, op, plan, len(group), nbytes):
        out[cand.proto.name] = (cand.proto.bw_fraction, cand.latency * 1e6)
    return out


def _link(c, op: str, group: list[int]) -> float:
    from simcluster.network.protocol_costs import _link_GBps

    return _link_GBps(c, op, get_algorithm("ring").expand(op, c, group), len(group))


def test_hopper_ring_ll_on_one_node_is_capped_at_141_GBps():
    c = cluster(8)
    link = _link(c, "all_reduce", list(range(8)))
    assert link == pytest.approx(450 * 0.82, rel=1e-6)
    rates = _rates(c, "all_reduce", list(range(8)))
    assert rates["LL"][0] * link == pytest.approx(141.0)  # min(141, 369 / 2)
    assert rates["LL128"][0] * link == pytest.approx(0.92 * link)  # 24 ch x 36.7 does not bind
    assert rates["Simple"][0] == 1.0


def test_ampere_and_volta_ring_ll_on_one_node():
    # DGX A100: NVLink 300 GB/s x 0.8 = 240 GB/s, half of it (120) above Ampere's 87.7 cap;
    # DGX-2: V100 ring at 123.6 GB/s, half of it (61.8) above Volta's 39
    for name, link, cap in (("dgx-a100", 240.0, 87.7), ("dgx-2-v100", 123.6, 39.0)):
        c = cluster(8, name)
        assert _link(c, "all_reduce", list(range(8))) == pytest.approx(link)
        assert _rates(c, "all_reduce", list(range(8)))["LL"][0] * link == pytest.approx(cap)


@pytest.mark.parametrize(
    "cpu,nodes,cap", [("intel", 2, 39.0), ("amd", 2, 22.5), ("intel", 4, 20.4), ("amd", 4, 19.0), ("arm", 2, 39.0)]
)
def test_multi_node_ll_cap_follows_the_host_cpu_not_the_gpu(cpu, nodes, cap):
    # two H100 ranks per node (one NIC each): busBw 2 x 46 GB/s, half of it above every cap
    c = cluster(8 * nodes, host_cpu=cpu)
    group = [8 * k + i for k in range(nodes) for i in range(2)]
    link = _link(c, "all_reduce", group)
    assert link / 2 > cap
    assert _rates(c, "all_reduce", group)["LL"][0] * link == pytest.approx(cap)


def test_ring_ll128_per_channel_cap_binds_with_few_channels():
    # perChMaxRingLL128Bws Hopper 36.7 GB/s x 2 channels (collective_sms: one CTA a channel)
    raw = _raw()
    raw["efficiency"]["collective_sms"] = 2
    c = build_cluster(profile_from_dict(raw), 8)
    link = _link(c, "all_reduce", list(range(8)))
    assert _rates(c, "all_reduce", list(range(8)))["LL128"][0] * link == pytest.approx(2 * 36.7)


def test_tree_ll_is_a_3_8th_of_the_tree_rate_capped_by_llmaxbw():
    # tree.cc: min(0.92 busBw / 3.8, llMaxBw); across 2 Intel-hosted nodes the cap is 39 GB/s
    c = cluster(16)
    plan = get_algorithm("tree").expand("all_reduce", c, list(range(16)))
    (ll,) = [x for x in candidates(c, "all_reduce", plan, 16, 1 << 30) if x.proto.name == "LL"]
    from simcluster.network.protocol_costs import _link_GBps

    link = _link_GBps(c, "all_reduce", plan, 16)
    assert ll.proto.bw_fraction * link == pytest.approx(min(0.92 * link / 3.8, 39.0))


def test_net_overhead_floors_intra_node_steps_of_a_multi_node_ring_by_host():
    # ring.cc: intraLat = max(hwLat[NVLINK][Ring][p], getNetOverhead x (3 for Simple))
    group = list(range(16))
    intel = _rates(cluster(16, host_cpu="intel"), "all_gather", group)
    amd = _rates(cluster(16, host_cpu="amd"), "all_gather", group)
    # all-gather: 15 steps, 1 across nodes, 14 inside; LL: Intel max(0.6, 1) = 1, AMD 2 us
    assert amd["LL"][1] - intel["LL"][1] == pytest.approx(14 * (2.0 - 1.0))
    # Simple: max(3.4, 3) = 3.4 on Intel, max(3.4, 6) = 6 on AMD
    assert amd["Simple"][1] - intel["Simple"][1] == pytest.approx(14 * (6.0 - 3.4))
    # one node: no network, no floor
    one = _rates(cluster(8, host_cpu="amd"), "all_gather", list(range(8)))
    assert one["LL"][1] == pytest.approx(6.6 + 7 * 0.6)


def test_multi_node_ring_simple_all_reduce_latency_plateau_is_1_4():
    c = cluster(16)
    ar = _rates(c, "all_reduce", list(range(16)))["Simple"][1]
    # 8.4 base + 28 intra steps x max(3.4, 3 x 1.0 Intel) + 2 network steps x (the plan's
    # hop + NCCL's Simple extra 14.0 - 2.7), all x1.4 (ring.cc, compute capability >= 8.0)
    plan = get_algorithm("ring").expand("all_reduce", c, list(range(16)))
    unscaled = 8.4 + plan.intra_steps * 3.4 + plan.inter_steps * (plan.inter_hop_s * 1e6 + 14.0 - 2.7)
    assert ar == pytest.approx(1.4 * unscaled)
    # below 64 B per channel per rank (24 channels x 16 ranks x 64 = 24 KiB) it is not applied
    small = _rates(c, "all_reduce", list(range(16)), nbytes=1024)["Simple"][1]
    assert small == pytest.approx(unscaled)


def test_an_amd_gpu_keeps_nccl_2_19_quarter_for_ring_ll():
    c = build_cluster(load_profile("amd-mi300x"), 8)
    assert load_profile("amd-mi300x").gpu.compute_capability is None
    assert _rates(c, "all_reduce", list(range(8)))["LL"][0] == 0.25


def test_send_recv_takes_ll_up_to_16_kib_then_simple_never_ll128():
    # NVIDIA/nccl src/enqueue.cc addP2pToPlan: LL when bytes <= nChannels x 16384 (1 channel up
    # to the 64 KiB minimum part), Simple otherwise
    c = cluster(8)
    small = describe("send_recv", 16384, c, [0, 1])
    big = describe("send_recv", 16385, c, [0, 1])
    assert (small.proto, big.proto) == ("LL", "Simple")
    # all-to-all: a peer's share is S / n; 8 ranks x 16 KiB = 128 KiB still LL
    assert describe("all_to_all", 8 * 16384, c, list(range(8))).proto == "LL"
    assert describe("all_to_all", 8 * 16384 + 8, c, list(range(8))).proto == "Simple"
    # 3.0 us p2p base + the 0.6 us NVLink LL hop; Simple adds NCCL's 3.4 - 0.6 per hop
    assert small.latency * 1e6 == pytest.approx(P2P_BASE_US + 0.6)
    assert big.latency * 1e6 == pytest.approx(P2P_BASE_US + 3.4)


def test_compute_capability_read_from_the_gpu_name_when_not_given():
    assert compute_capability_of("NVIDIA H100 SXM5 80GB") == 9.0
    assert compute_capability_of("NVIDIA GB200 (Blackwell, 186GB)") == 10.0
    assert compute_capability_of("NVIDIA B300 SXM6") == 10.3
    assert compute_capability_of("AMD Instinct MI300X 192GB") is None


@pytest.mark.parametrize(
    "name,cc",
    [
        # NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus), as torch.cuda names them
        ("NVIDIA L40S", 8.9), ("NVIDIA L40", 8.9), ("NVIDIA L4", 8.9), ("NVIDIA A10G", 8.6),
        ("NVIDIA A10", 8.6), ("NVIDIA A40", 8.6), ("NVIDIA A30", 8.0), ("Tesla T4", 7.5),
        ("NVIDIA A100-SXM4-80GB", 8.0), ("NVIDIA H100 80GB HBM3", 9.0), ("NVIDIA H20", 9.0),
        ("Tesla V100-SXM2-32GB", 7.0), ("NVIDIA RTX 6000 Ada Generation", None),
    ],
)  # fmt: skip
def test_calibrated_gpu_names_give_their_compute_capability(name, cc):
    """A profile calibrated on one of these keeps NCCL's current protocol caps (nccl_caps.py) by
    its generation; an ambiguous name (RTX 6000: Turing, Ada or Blackwell) gives None."""
    assert compute_capability_of(name) == cc


def test_the_gpu_name_gives_the_capability_when_the_profile_omits_it():
    raw = _raw()
    del raw["gpu"]["compute_capability"]
    assert profile_from_dict(raw).gpu.compute_capability == 9.0


@pytest.mark.parametrize(
    "where,key,value,needle",
    [
        ("node", "host_cpu", "intell", "host_cpu"),
        ("gpu", "compute_capability", 0.5, "compute_capability"),
        ("gpu", "compute_capability", 90, "not NCCL's 90"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_field(where, key, value, needle):
    raw = _raw()
    raw[where][key] = value
    with pytest.raises(UserError) as err:
        profile_from_dict(raw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_every_shipped_nvidia_profile_states_its_generation_and_host_with_a_source():
    from simcluster.hardware import shipped_profiles

    for name in shipped_profiles():
        p = load_profile(name)
        if name.startswith("amd-"):
            continue
        assert p.gpu.compute_capability is not None and p.node.host_cpu is not None, name
        assert "gpu.compute_capability" in p.sources and "node.host_cpu" in p.sources, name
