"""The DGX-2 (V100) profile: datasheet identities, one 16-GPU NVSwitch domain per node, a
12-GPU all_reduce against nccl-tests on a DGX-2, no bf16, and a shipped scenario run on it.

Sources (all in ``hardware/dgx-2-v100.yaml``):
- NVIDIA Tesla V100 datasheet (SXM): FP64 7.8, FP32 15.7, tensor 125 TFLOP/s, HBM2 900 GB/s,
  32 GB; Volta whitepaper: 80 SMs x 8 tensor cores (640), 5120 FP32 cores, boost 1530 MHz; a
  Volta tensor core does 64 FMA per clock.
- NVIDIA DGX-2 datasheet: 16x V100 32GB (512 GB), 2 PFLOPS, 14.4 TB/s HBM, 12 NVSwitches,
  2.4 TB/s bisection, 8x 100 Gb/s EDR InfiniBand (ConnectX-5). DGX-2H: 2.1 PFLOPS (16 x 130);
  Megatron-LM (arXiv 1909.08053): 39 TFLOP/s = 30% of a DGX-2H GPU's peak.
- NVIDIA NVLink page: V100 NVLink2 25 GB/s per direction per link, 6 links, 300 GB/s total.
- wohlbier/nccl-tests README.md 'Results on dgx-2': all_reduce_perf -g 12 on Tesla
  V100-SXM3-32GB, out-of-place busbw 123.50 GB/s at 4 GiB, 123.56 at 8 GiB.
- Baidu DeepBench README (V100 mixed-precision GEMM), Markidis et al. IPDPSW 2018 (cuBLAS up to
  83 TFLOP/s on V100).
nccl-tests busbw of all_reduce = algbw x 2(n-1)/n (NVIDIA/nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import pytest

from simcluster.hardware import load_profile
from simcluster.interp import interp
from simcluster.network import bandwidths, collective_time, describe
from simcluster.topology import build_cluster

GiB = 2**30
NAME = "dgx-2-v100"


def dgx2(n: int):
    return build_cluster(load_profile(NAME), n)


def busbw(cluster, group: list[int], size: float) -> float:
    """nccl-tests busbw (GB/s) of an all_reduce of ``size`` bytes on ``group``, alone."""
    t = collective_time("all_reduce", size, cluster, group)
    return bandwidths("all_reduce", size, len(group), t)[1] / 1e9


# --- datasheet identities -----------------------------------------------------------------
def test_v100_peaks_from_the_sm_count_and_clock():
    """Volta whitepaper: 80 SMs x 8 tensor cores x 64 FMA x 2 FLOP x 1530 MHz = 125.3 TFLOP/s
    (datasheet 125); 80 x 64 FP32 cores x 2 x 1530 MHz = 15.67 (datasheet 15.7)."""
    p = load_profile(NAME)
    assert p.gpu.sm_count == 80
    clock = 1530e6
    assert p.peak_flops("fp16") == pytest.approx(80 * 8 * 64 * 2 * clock, rel=0.005)
    assert p.peak_flops("fp32") == pytest.approx(80 * 64 * 2 * clock, rel=0.005)
    # Volta has neither bf16 nor tf32 (both Ampere); nothing else is listed
    assert set(p.gpu.peak_tflops) == {"fp16", "fp32"}


def test_system_totals_are_the_dgx2_datasheet():
    """DGX-2 datasheet: 16 GPUs, 2 PFLOPS tensor, 512 GB HBM2 at 14.4 TB/s, 8x 100 Gb/s EDR."""
    p = load_profile(NAME)
    n = p.node.gpus_per_node
    assert n == 16
    assert n * p.gpu.peak_tflops["fp16"] / 1e3 == pytest.approx(2.0)
    # 512 GB = 16 x 32 GB; a process gets CUDA's 34,089,730,048 B of each (dgx-2-v100's provenance)
    assert n * p.memory_bytes == 16 * 34_089_730_048 and p.gpu.memory_gib < 32
    assert n * p.gpu.hbm_tbps == pytest.approx(14.4)
    assert (p.node.nics_per_node, p.node.nic_gbps) == (8, 100)
    assert p.nic_bytes_per_s == 12.5e9
    assert p.node.nvls is False  # NVSwitch gen1: no in-network reduction


def test_nvlink2_is_six_links_of_25_gbps():
    """NVLink page: 6 links x 25 GB/s per direction = 150 GB/s (300 GB/s bidirectional); the
    DGX-2's 2.4 TB/s bisection is 8 GPUs x 300 GB/s."""
    p = load_profile(NAME)
    assert p.node.nvlink_GBps == 6 * 25
    assert p.nvlink_bytes_per_s == 150e9
    assert 8 * 2 * p.node.nvlink_GBps / 1e3 == pytest.approx(2.4)


def test_profile_is_dgx2_not_dgx2h():
    """DGX-2H: 2.1 PFLOPS = 16 x 130 TFLOP/s (Megatron-LM: 39 TFLOP/s is 30% of it); this profile
    is the standard DGX-2 at 125 and says so."""
    p = load_profile(NAME)
    assert 16 * 130 / 1e3 == pytest.approx(2.1, rel=0.01)
    assert 39 / 0.30 == pytest.approx(130)
    assert p.gpu.peak_tflops["fp16"] == 125
    assert "DGX-2H" in p.sources["gpu.name"] and "standard DGX-2" in p.sources["gpu.name"]


def test_every_number_has_a_source():
    from tests.test_hardware_profiles import test_every_number_has_a_source as check

    check(NAME)


def test_carried_over_numbers_say_so_and_measured_ones_do_not():
    src = load_profile(NAME).sources
    for key in ("efficiency.attention_fwd", "efficiency.attention_bwd", "efficiency.hbm",
                "efficiency.collective_sms", "fabric.nodes_per_leaf"):  # fmt: skip
        assert "ASSUMPTION" in src[key], key
    # Sinha et al. measured V100 clusters: the spread is a measurement for this GPU
    assert "Sinha" in src["gpu.speed_spread"]
    assert "assumption" not in src["gpu.speed_spread"].replace("not a carried-over assumption", "").lower()


def test_gemm_curve_holds_the_published_points():
    """DeepBench V100: 7860x64x2560 (2.58e9 FLOP) 25.94 TFLOP/s; Markidis et al.: cuBLAS up to
    83 TFLOP/s; no point of the curve above that."""
    p = load_profile(NAME)
    curve = p.efficiency.gemm
    assert interp(curve, 2 * 7860 * 64 * 2560, log_x=True) * 125 == pytest.approx(25.94, rel=0.01)
    assert max(f for _, f in curve) * 125 == pytest.approx(83, rel=0.005)


# --- topology -----------------------------------------------------------------------------
def test_sixteen_gpus_share_one_nvswitch_per_node():
    c = dgx2(32)
    switches = sorted(n for n in c.graph.nodes if n.startswith("nvs"))
    assert switches == ["nvs0", "nvs1"]
    assert c.num_nodes == 2
    for node in range(2):
        members = {u for u, v in c.edges if v == f"nvs{node}"}
        assert members == {f"gpu{g}" for g in range(16 * node, 16 * (node + 1))}
    # GPUs on different baseboards of one DGX-2: one hop through the NVSwitch fabric
    assert [c.edges[e] for e in c.path(0, 15)] == [("gpu0", "nvs0"), ("nvs0", "gpu15")]
    # 8 NICs per node: two GPUs per rail
    assert [c.rail_of(g) for g in range(16)] == [g // 2 for g in range(16)]
    assert sum(1 for n in c.graph.nodes if n.startswith("nic")) == 2 * 8


# --- collectives --------------------------------------------------------------------------
@pytest.mark.parametrize("size, published", [(4 * GiB, 123.50), (8 * GiB, 123.56)])
def test_twelve_gpu_all_reduce_matches_nccl_tests_on_a_dgx2(size, published):
    """wohlbier/nccl-tests 'Results on dgx-2': 12 V100-SXM3 GPUs, out-of-place busbw (the 8 GiB
    point set efficiency.nvlink; 4 GiB is a second point of the same run)."""
    c = dgx2(16)
    group = list(range(12))
    assert describe("all_reduce", size, c, group).algo == "ring"
    assert busbw(c, group, size) == pytest.approx(published, rel=0.01)


def test_sixteen_gpu_all_reduce_is_link_rate_times_efficiency():
    """No 16-GPU DGX-2 nccl-tests output was found: the full node's ring busbw is the modelled
    150 GB/s x efficiency.nvlink, within 1%."""
    p = load_profile(NAME)
    bw = busbw(dgx2(16), list(range(16)), 8 * GiB)
    assert bw == pytest.approx(150 * p.efficiency.nvlink, rel=0.01)


# --- precision ----------------------------------------------------------------------------
def test_bf16_is_a_one_line_error_naming_training_precision(cli):
    res = cli("run", "gpt-28b-zb2p-32xa100", "--set", f"cluster.hardware={NAME}",
              "--set", "training.precision=bf16")  # fmt: skip
    assert res.code != 0
    lines = [line for line in (res.err + res.out).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "training.precision" in lines[0] and "bf16" in lines[0] and "fp16" in lines[0]


# --- a shipped scenario on DGX-2 ----------------------------------------------------------
def test_zero_bubble_gpt_28b_runs_on_dgx2():
    """scenarios/gpt-28b-zb2p-32xa100 (fp16 already) on two DGX-2: with full recomputation it
    fits in 32 GB; MFU is against V100's 125 TFLOP/s; the step is slower than on DGX A100."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    name = "gpt-28b-zb2p-32xa100"
    over = [("training.global_batch", 32), ("training.recompute", "full")]
    sc = load_scenario(name, [("cluster.hardware", NAME), *over])
    assert sc.training.precision == "fp16"
    res = simulate(sc).summary
    assert res["fits_in_memory"]
    assert res["mfu"] == pytest.approx(res["model_tflops_per_gpu"] / 125)
    assert 0 < res["mfu"] < 1
    a100 = simulate(load_scenario(name, over)).summary
    assert res["step_time_s"] > a100["step_time_s"]
