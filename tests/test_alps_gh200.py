"""The Alps GH200 profile against the quad-GH200 node's published figures and CSCS's nccl-tests."""

from __future__ import annotations

import pytest

from simcluster.gpu_names import reference_node
from simcluster.hardware import load_profile
from simcluster.network import collective_time
from simcluster.topology import build_cluster

MiB = 1 << 20

# eth-cscs/cscs-docs docs/software/communication/nccl.md (commit 1690357c): nccl-tests 2.17.1
# all_reduce_perf on 2 Alps nodes x 4 GH200, out-of-place time in microseconds
CSCS_ALL_REDUCE_US = {8: 17.93, MiB: 164.3, 4 * MiB: 292.7, 16 * MiB: 461.7, 64 * MiB: 1090.5, 128 * MiB: 1916.4}


def test_the_node_is_four_gh200_joined_by_direct_nvlink():
    # JSC JUPITER configuration page (the same quad-GH200 board): 96 GB HBM3 at 4 TB/s, 132 SMs,
    # 300 GB/s between each pair of GPUs (150 per direction), no NVSwitch; cscs-docs: four NICs
    p = load_profile("alps-gh200")
    assert (p.node.gpus_per_node, p.node.scale_up, p.node.nvls) == (4, "mesh", False)
    assert p.nvlink_bytes_per_s / 3 == 150e9  # three peers, one 150 GB/s link each
    assert p.node.nics_per_node == 4 and p.nic_bytes_per_s == 25e9  # Slingshot-11, 200 Gb/s
    assert p.gpu.hbm_tbps == 4.0 and p.gpu.sm_count == 132
    # the H100's dense peaks: 132 SMs x 1.83 GHz x 4096 BF16 FLOP per clock
    assert p.gpu.peak_tflops["bf16"] == pytest.approx(132 * 1.83e9 * 4096 / 1e12, rel=1e-3)
    assert p.gpu.peak_tflops["fp8"] == pytest.approx(2 * p.gpu.peak_tflops["bf16"], rel=1e-3)


def test_a_pair_of_gpus_talks_over_its_own_link():
    c = build_cluster(load_profile("alps-gh200"), 4)
    assert len(c.path(0, 3)) == 1  # one hop, no switch
    assert c.path(0, 3) != c.path(1, 2)


@pytest.mark.parametrize("size", sorted(CSCS_ALL_REDUCE_US))
def test_cscs_two_node_all_reduce_is_reproduced(size):
    c = build_cluster(load_profile("alps-gh200"), 8)
    t = collective_time("all_reduce", size, c, list(range(8)))
    assert t * 1e6 == pytest.approx(CSCS_ALL_REDUCE_US[size], rel=0.02)


def test_between_measured_sizes_the_time_grows_with_the_size():
    # an 8 B row (latency) and a 1 MiB row: the sizes between cost at least the 8 B time and at
    # most the 1 MiB time (interpolating bandwidth would put 16 B at a fraction of a microsecond)
    c = build_cluster(load_profile("alps-gh200"), 8)
    times = [collective_time("all_reduce", s, c, list(range(8))) for s in (8, 16, 4096, 256 * 1024, MiB)]
    assert times == sorted(times)
    assert times[1] >= CSCS_ALL_REDUCE_US[8] * 1e-6


@pytest.mark.parametrize("spelling", ["GH200", "NVIDIA GH200 120GB", "gh200 96GB", "4x GH200"])
def test_gh200_names_the_alps_node(spelling):
    assert reference_node(spelling) == "alps-gh200"
