"""The MI355X profile: CDNA 4 (256 CUs at 2.4 GHz, 288 GB of HBM3E at 8 TB/s, 1,400 W).

Published figures: ROCm docs gpu-specs (256 CUs); Hot Chips 2025 coverage (2.4 GHz); ISSCC 2026
coverage (8,192 FP8 FLOP per clock per CU, twice CDNA 3's 4,096); hipBLASLt FP8 on an MI355X,
ROCm blog "FP8 GEMM Optimization on AMD CDNA4 Architecture" (2026-03-10) Table 5: 4096^3 at
2750.42 TFLOP/s, 8192^3 at 3130.21; hipBLASLt BF16 in HipKittens' MI355X baselines: 4096^3
1432.7, 8192^3 1574.7; AITER's assembly attention, ROCm/aiter op_tests/cpp/mha/README.md at
0403bcd (MI355X, batch 1, 64/8 heads, head dim 128, causal at 8K: forward 1300.105, backward
1064.56 with bf16 dQ atomics, 765.21 with fp32); rccl-tests on 8 MI350X (ROCm
system-acceptance-docs): 8 GiB all-reduce busbw 360.97 GB/s.
"""

from __future__ import annotations

import pytest
from engine_helpers import gemm_tflops

from simcluster.attention_kernels import kernel_tflops
from simcluster.hardware import load_profile


def _tflops(precision: str, m: int, n: int, k: int) -> float:
    return gemm_tflops("amd-mi355x", precision, m, n, k)


def test_peak_is_cus_times_rate_times_clock():
    p = load_profile("amd-mi355x")
    assert p.gpu.sm_count == 256
    assert p.gpu.peak_tflops["bf16"] == pytest.approx(256 * 4096 * 2.4e9 / 1e12, rel=1e-4)
    assert p.gpu.peak_tflops["fp8"] == pytest.approx(256 * 8192 * 2.4e9 / 1e12, rel=1e-4)
    # CDNA 4 has no TF32 matrix path: an fp32 GEMM runs at the vector rate, 256 FLOP per clock
    assert "tf32" not in p.gpu.peak_tflops
    assert p.peak_flops("fp32") == pytest.approx(256 * 256 * 2.4e9, rel=1e-3)


@pytest.mark.parametrize(
    ("precision", "size", "tflops"),
    [
        ("fp8", 4096, 2750.42),  # ROCm CDNA 4 FP8 GEMM blog, Table 5, hipBLASLt
        ("fp8", 8192, 3130.21),
        ("bf16", 4096, 1432.7),  # HipKittens' MI355X hipBLASLt baselines
        ("bf16", 8192, 1574.7),
    ],
)
def test_square_gemms_run_at_the_measured_hipblaslt_rates(precision, size, tflops):
    assert _tflops(precision, size, size, size) == pytest.approx(tflops, rel=0.01)


def test_fp8_gemms_are_faster_than_bf16_at_every_size():
    for size in (512, 1024, 2048, 4096, 8192, 16384):
        assert _tflops("fp8", size, size, size) > _tflops("bf16", size, size, size), size


@pytest.mark.parametrize(
    ("kernel", "causal", "backward", "tflops"),
    [
        ("ck", True, False, 1300.105),
        ("ck", True, True, 765.21),  # dQ in fp32 atomics, TransformerEngine's default
        ("ck-a16", True, True, 1064.56),  # NVTE_CK_IS_V3_ATOMIC_FP32=0
        ("ck-a16", False, True, 1159.28),
    ],
)
def test_attention_is_aiters_assembly_kernel_table(kernel, causal, backward, tflops):
    curves = load_profile("amd-mi355x").efficiency.attention_kernels[kernel]
    assert kernel_tflops(curves, 128, 8192, causal, backward) == pytest.approx(tflops, rel=1e-6)


def test_mesh_links_carry_the_measured_all_reduce():
    """A ring all-reduce's busbw is its per-link rate: 7 links x 76.8 GB/s a direction at the
    measured 360.97 GB/s share (rccl-tests, 8 GiB)."""
    p = load_profile("amd-mi355x")
    assert p.node.nvlink_GBps == pytest.approx(7 * 76.8)
    assert p.node.nvlink_GBps * p.efficiency.nvlink == pytest.approx(360.97, rel=1e-3)


def test_a_training_step_is_faster_than_on_the_mi325x_by_less_than_the_peak_ratio():
    """The same 8-GPU Llama 3 8B BF16 step (4 layers): faster on the MI355X than on the MI325X, by
    less than the BF16 peaks' 1.92x (GEMMs at 62% of peak against 64%, memory-bound work at
    8 / 6 TB/s, the links 537.6 / 448 GB/s)."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    sets: list[tuple[str, object]] = [("model.layers", 4)]
    runs = {
        hw: simulate(load_scenario("llama3-8b-8xh100", [*sets, ("cluster.hardware", hw)])).summary
        for hw in ("amd-mi325x", "amd-mi355x")
    }
    gain = runs["amd-mi325x"]["step_time_s"] / runs["amd-mi355x"]["step_time_s"]
    assert 1.3 < gain < 2516.6 / 1307.4


def test_the_shipped_scenario_is_the_mlperf_case_and_run_cites_its_record(monkeypatch):
    """scenarios/llama31-8b-8xmi355x.yaml is AMD's MLPerf v5.1 run as validation/mlperf-training-amd.yaml
    describes it: the same step, bit for bit; `run` cites the GPU's published runs
    (validation/accuracy-by-gpu.json: this one and the LoRA row of mlperf-lora-70b) as their
    average, and a GPU with one run as that run's error, not as an average."""
    from simcluster import accuracy_table
    from simcluster.accuracy_table import accuracy_line
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario, scenario_from_dict
    from simcluster.validate import load_cases

    (case,) = [c for c in load_cases() if c.family == "mlperf-training-amd"]
    shipped = simulate(load_scenario("llama31-8b-8xmi355x")).summary["step_time_s"]
    assert shipped == simulate(scenario_from_dict(case.scenario)).summary["step_time_s"]
    name = load_profile("amd-mi355x").gpu.name
    line = accuracy_line(name)
    assert line.startswith("on AMD Instinct MI355X 288GB, 2 published runs: MAPE ")
    row = {"n": 1, "mape_pct": 2.2, "median_ape_pct": 2.2, "max_ape_pct": 2.2, "speed_bias_pct": 2.2}
    monkeypatch.setattr(accuracy_table, "load_table", lambda: {"by_gpu": {name: row}})
    line = accuracy_line(name)
    assert line.startswith("on AMD Instinct MI355X 288GB, 1 published run: its step simulated ")
    assert "MAPE" not in line
