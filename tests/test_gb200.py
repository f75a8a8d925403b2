"""The GB200 NVL72 profile: datasheet identities, one NVSwitch domain per rack, collectives inside
the rack on NVLink against published nccl-tests, and a shipped scenario run on it.

Sources (all in ``hardware/gb200-nvl72.yaml``):
- NVIDIA Blackwell architecture page / GB200 NVL72 spec table: per GPU FP8 10 PF, BF16 5 PF,
  TF32 2.5 PF (with sparsity), FP32 80 TF, 186 GB HBM3e at 8 TB/s, NVLink5 1.8 TB/s; per rack
  FP8 720 PF, BF16 360 PF, TF32 180 PF, FP32 5,760 TF, 13.4 TB at 576 TB/s, NVLink 130 TB/s.
- NVIDIA DGX GB200 user guide: 18 compute trays of 2 Grace + 4 Blackwell per 72-GPU rack, 4x
  ConnectX-7 400G per tray for the cluster network.
- coreweave/nccl-tests README (Expected Performance, GB200 single rack, NCCL 2.26.2):
  all_reduce_perf on 72 GPUs, out-of-place, 4 GiB busbw 839.16 (algbw 425.49), 8 GiB 834.57
  (algbw 423.16); two racks (144 GPUs), 16 GiB busbw 810.41.
- Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md: NCCL 2.25.1 AllReduce, Ring,
  in-place, the 4 GPUs of one tray: 673.06 GB/s busbw at 4 GB, 679.61 at 8 GB.
nccl-tests busbw of all_reduce = algbw x 2(n-1)/n (NVIDIA/nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import pytest

from simcluster.hardware import load_profile
from simcluster.network import bandwidths, collective_time, describe
from simcluster.topology import build_cluster

GiB = 2**30
NAME = "gb200-nvl72"


def gb200(n: int):
    return build_cluster(load_profile(NAME), n)


def busbw(cluster, group: list[int], size: float, algo: str | None = None) -> float:
    """nccl-tests busbw (GB/s) of an all_reduce of ``size`` bytes on ``group``, alone."""
    t = collective_time("all_reduce", size, cluster, group, algo=algo)
    return bandwidths("all_reduce", size, len(group), t)[1] / 1e9


def kinds(cluster, links) -> set[str]:
    return {cluster.graph.edges[cluster.edges[e]]["kind"] for e in links}


# --- datasheet identities -----------------------------------------------------------------
def test_per_gpu_figures_times_72_are_the_rack_totals():
    """NVIDIA GB200 NVL72 spec table: per-GPU x 72 = rack (tensor figures quoted with sparsity,
    the profile holds dense = half)."""
    p = load_profile(NAME)
    peak = p.gpu.peak_tflops
    assert 2 * peak["fp8"] * 72 / 1e3 == pytest.approx(720)  # PFLOPS FP8, rack
    assert 2 * peak["bf16"] * 72 / 1e3 == pytest.approx(360)  # PFLOPS FP16/BF16, rack
    assert peak["fp16"] == peak["bf16"]
    assert 2 * peak["tf32"] * 72 / 1e3 == pytest.approx(180)  # PFLOPS TF32, rack
    assert peak["fp32"] * 72 == pytest.approx(5760)  # TFLOPS FP32, rack (no sparsity)
    assert p.gpu.hbm_tbps * 72 == pytest.approx(576)  # TB/s HBM, rack
    # NVLink5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction; rack 130 TB/s (129.6)
    assert p.nvlink_bytes_per_s == 900e9
    assert 2 * p.node.nvlink_GBps * 72 / 1e3 == pytest.approx(130, rel=0.005)
    # 186 GB per GPU, 13.4 TB per rack; nvidia-smi's 189471 MiB = 185.0 GiB is the profile's
    # (NVIDIA's HBM 'GB' is within 0.5% of GiB: B200 180 GB vs 179.1 GiB in nvidia-smi)
    assert 186 * 72 / 1e3 == pytest.approx(13.4, rel=0.005)
    assert p.gpu.memory_gib == pytest.approx(189471 / 1024, abs=0.05)
    assert p.gpu.memory_gib == pytest.approx(186, rel=0.01)


def test_gb200_peak_is_above_hgx_b200():
    """Same die: GB200 2.5 PFLOPS dense BF16 (up to 1,200 W) vs HGX/DGX B200 2.25 (1,000 W);
    NVLink5 and the GPU's NVSwitch port are the same."""
    gb, b = load_profile(NAME), load_profile("dgx-b200")
    assert gb.gpu.peak_tflops["bf16"] == 2500 and b.gpu.peak_tflops["bf16"] == 2250
    assert gb.gpu.peak_tflops["fp8"] / b.gpu.peak_tflops["fp8"] == pytest.approx(2500 / 2250)
    assert gb.node.nvlink_GBps == b.node.nvlink_GBps


def test_tray_and_rack_shape():
    """DGX GB200 user guide: a compute tray (node) has 4 GPUs and 4 ConnectX-7 400G; 72 GPUs
    share one NVLink domain."""
    p = load_profile(NAME)
    assert (p.node.gpus_per_node, p.node.nvlink_domain) == (4, 72)
    assert (p.node.nics_per_node, p.node.nic_gbps) == (4, 400)
    assert p.fabric.topology == "nvl_domain"
    assert p.node.nvls and p.efficiency.nvls is not None


def test_every_number_has_a_source():
    from tests.test_hardware_profiles import test_every_number_has_a_source as check

    check(NAME)


def test_carried_over_numbers_say_so():
    """Numbers taken from B200 or Hopper measurements are marked, and the GEMM curve says it
    converts B200's absolute rates to GB200's peak."""
    src = load_profile(NAME).sources
    for key in ("efficiency.gemm", "efficiency.attention_fwd", "efficiency.attention_bwd",
                "efficiency.hbm", "efficiency.collective_sms", "fabric.nodes_per_leaf"):  # fmt: skip
        assert "ASSUMPTION" in src[key], key
    assert "2250/2500" in src["efficiency.gemm"]


def test_gemm_plateau_stays_below_gb200_mamf():
    """stas00/ml-engineering MAMF table: GB200 1822.0 TFLOP/s bf16, 3615.6 fp8 (best shapes,
    burst); the profile's curves (sustained rates) stay below."""
    p = load_profile(NAME)
    assert max(f for _, f in p.efficiency.gemm) * 2500 < 1822.0
    assert max(f for _, f in p.efficiency.gemm_fp8) * 5000 < 3615.6


# --- topology -----------------------------------------------------------------------------
@pytest.mark.parametrize("gpus, racks", [(72, 1), (144, 2)])
def test_one_nvswitch_domain_per_rack(gpus, racks):
    c = gb200(gpus)
    switches = sorted(n for n in c.graph.nodes if n.startswith("nvs"))
    assert switches == [f"nvs{r}" for r in range(racks)]
    assert c.num_nodes == gpus // 4  # compute trays
    for r in range(racks):
        members = {u for u, v in c.edges if v == f"nvs{r}"}
        assert members == {f"gpu{g}" for g in range(72 * r, 72 * (r + 1))}
    # any two GPUs of a rack, also on different trays: GPU -> NVSwitch -> GPU
    assert [c.edges[e] for e in c.path(0, 71)] == [("gpu0", "nvs0"), ("nvs0", "gpu71")]
    # 4 NICs per tray, one rail per GPU of the tray
    assert {c.rail_of(g) for g in range(4)} == {0, 1, 2, 3}
    assert sum(1 for n in c.graph.nodes if n.startswith("nic")) == 4 * (gpus // 4)


@pytest.mark.parametrize(("gpus", "per_rack"), [(128, 64), (256, 64), (144, 72), (100, 72), (64, 72)])
def test_multi_rack_jobs_take_16_trays_of_each_rack(gpus, per_rack):
    """NVIDIA's Slurm guidance for GB200 NVL72 (topology/block plugin): jobs of 128+ GPUs in
    segments of 16 nodes, 64 GPUs of a rack each; a job whose nodes are no whole number of
    segments (144 = 2 full racks, 100) fills racks, a job of one rack or less stays in one."""
    c = gb200(gpus)
    assert c.domain_size == per_rack
    assert c.domain_of(per_rack - 1) == 0 and (gpus <= per_rack or c.domain_of(per_rack) == 1)


def test_segments_are_a_profile_field_a_scenario_may_override():
    profile = load_profile("gb200-nvl72")
    assert profile.fabric.segment_nodes == 16 and "segment" in profile.sources["fabric.segment_nodes"]
    packed = build_cluster(profile.model_copy(update={"fabric": profile.fabric.model_copy(update={"segment_nodes": 18})}), 128)
    assert packed.domain_size == 72  # 18 trays: whole racks, 72 + 56


def test_rack_to_rack_goes_over_the_nics():
    c = gb200(144)
    assert c.domain_of(71) == 0 and c.domain_of(72) == 1
    hops = [c.edges[e] for e in c.path(0, 72)]
    assert hops[0] == ("gpu0", "nic0.0") and hops[-1] == ("nic18.0", "gpu72")
    assert "nvs0" not in {u for u, _ in hops}


# --- collectives inside the rack ----------------------------------------------------------
@pytest.mark.parametrize("group", [list(range(64)), list(range(8))], ids=["64-gpus", "2-trays"])
def test_all_reduce_inside_the_rack_stays_on_nvlink(group):
    """No NIC on any path: the chosen algorithm's flows and every ring hop are NVLink."""
    c = gb200(64)
    recipe = describe("all_reduce", 8 * GiB, c, group)
    assert recipe.algo == "nvls"
    assert kinds(c, {e for spec in recipe.specs[0] for e in spec.links}) == {"nvlink"}
    ring = describe("all_reduce", 8 * GiB, c, group, algo="ring")
    assert kinds(c, {e for spec in ring.specs[0] for e in spec.links}) == {"nvlink"}


def test_64_gpu_all_reduce_busbw_from_nvlink():
    """NVLS algbw = efficiency.nvls x 900 GB/s whatever the group size; on 64 GPUs that is
    the 72-GPU rack's published algbw (coreweave/nccl-tests, 8 GiB: 423.16 GB/s) within 1%,
    busbw = algbw x 2 x 63/64."""
    p = load_profile(NAME)
    bw = busbw(gb200(64), list(range(64)), 8 * GiB)
    modelled = p.efficiency.nvls * 900 * 2 * 63 / 64
    assert bw == pytest.approx(modelled, rel=0.01)
    assert bw / (2 * 63 / 64) == pytest.approx(423.16, rel=0.01)


@pytest.mark.parametrize("size, published", [(4 * GiB, 839.16), (8 * GiB, 834.57)])
def test_full_rack_all_reduce_matches_nccl_tests(size, published):
    """coreweave/nccl-tests, GB200 single rack, 72 GPUs, out-of-place busbw (the 8 GiB point
    set efficiency.nvls; 4 GiB is a second point of the same run)."""
    assert busbw(gb200(72), list(range(72)), size) == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("size, published", [(4 * GiB, 673.06), (8 * GiB, 679.61)])
def test_one_tray_ring_matches_azure(size, published):
    """Azure ND GB200 v6, 4 GPUs, NCCL Ring (the 8 GB point set efficiency.nvlink); NCCL ran
    a ring there and so does the simulator: NVLS on 4 GPUs is slower than the ring."""
    c = gb200(4)
    assert describe("all_reduce", size, c, list(range(4))).algo == "ring"
    assert busbw(c, list(range(4)), size) == pytest.approx(published, rel=0.01)


def test_two_racks_match_nvls_tree():
    """2 racks (144 GPUs) measure 810.41 GB/s busbw at 16 GiB (coreweave/nccl-tests): NCCL's
    NVLS_TREE, NVLS inside each rack and the shards across racks on InfiniBand, one rail per
    local GPU. The NVLS side binds (the rack's measured NVLS rate), so the model lands within
    5%, where rings over the NICs alone gave ~680 (-16%)."""
    c = gb200(144)
    assert busbw(c, list(range(144)), 16 * GiB) == pytest.approx(810.41, rel=0.05)


# --- a shipped scenario on GB200 ----------------------------------------------------------
def test_llama3_70b_scenario_runs_on_gb200():
    """scenarios/llama3-70b-64xh100 with cluster.hardware switched to gb200-nvl72 (64 GPUs in
    one rack, 16 trays): TP 8 spans two trays on NVLink; MFU is against GB200's 2500 TFLOP/s;
    the same layout steps faster than on DGX H100."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    over = [("training.global_batch", 16)]
    sc = load_scenario("llama3-70b-64xh100", [("cluster.hardware", NAME), *over])
    res = simulate(sc).summary
    assert res["fits_in_memory"]
    assert res["mfu"] == pytest.approx(res["model_tflops_per_gpu"] / 2500)
    assert 0 < res["mfu"] < 1
    h100 = simulate(load_scenario("llama3-70b-64xh100", over)).summary
    assert res["step_time_s"] < h100["step_time_s"]


def test_one_call_with_groups_inside_and_across_racks_waits_for_the_widest():
    """With racks filled whole (segments of 18 trays), a pipeline stage of 64 GPUs ends inside
    the first 72-GPU rack, so groups that are rank-grid translations of each other can sit
    inside one rack or span two. NCCL picks per communicator; one call must pick an algorithm
    every group can run (NVLS needs one NVLink domain) and is timed by its widest group, the
    one the step waits for."""
    from simcluster.errors import UserError
    from simcluster.network import make_recipe, recipe_time_alone

    profile = load_profile(NAME)
    whole_racks = profile.model_copy(update={"fabric": profile.fabric.model_copy(update={"segment_nodes": 18})})
    cluster = build_cluster(whole_racks, 128)
    # six GPUs each: three of the straddling group in each rack, enough for NCCL's NVLS
    # (ncclNvlsInit turns it off at <= 2 of a communicator's GPUs in a domain)
    inside, across = [0, 1, 2, 3, 4, 5], [69, 70, 71, 72, 73, 74]
    size = 256 * 2**20
    make_recipe(cluster, "all_reduce", [inside], size, algo="nvls")  # one rack: allowed
    with pytest.raises(UserError, match="one NVLink domain"):
        make_recipe(cluster, "all_reduce", [inside, across], size, algo="nvls")
    mixed = make_recipe(cluster, "all_reduce", [inside, across], size)
    alone = make_recipe(cluster, "all_reduce", [across], size)
    # alone, the straddling group would run NVLS_TREE, which the in-rack group cannot
    assert alone.algo == "nvls_tree" and mixed.algo not in ("nvls", "nvls_tree")
    assert recipe_time_alone(cluster, mixed) >= recipe_time_alone(cluster, alone)
    narrow = make_recipe(cluster, "all_reduce", [inside], size)
    assert recipe_time_alone(cluster, narrow) < recipe_time_alone(cluster, alone)


def test_tied_embeddings_over_a_stage_boundary_inside_a_rack_simulate():
    """The layout that failed with KeyError('gpu72', 'nvs0') before the fix (found by a
    random-layout search): 128 GB200 GPUs, pp 2, tied embeddings."""
    from simcluster.engine import simulate
    from simcluster.scenario import scenario_from_dict

    sc = scenario_from_dict({
        "model": {"preset": "bloom-176b", "layers": 4},
        "cluster": {"hardware": NAME, "gpus": 128},
        "parallel": {"tp": 8, "pp": 2, "cp": 2, "sequence_parallel": True},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 8},
    })  # fmt: skip
    res = simulate(sc)
    assert res.summary["exposed_comm_s"]["embd"] > 0
