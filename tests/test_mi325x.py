"""The MI325X profile: the MI300X's CDNA 3 die (same CUs, clock and peak math) with 256 GB of
HBM3E at 6 TB/s and a 1,000 W board, so its large GEMMs hold a higher clock.

Published figures: AMD ROCm docs (MI300 microarchitecture: 2048 BF16 FLOP/clock/CU; gpu-specs:
304 CUs), rocminfo on 8x MI325X (ROCm/ROCm issue 6023: 2100 MHz), AMD ROCm blog "Measuring
Max-Achievable FLOPs - Part 2" (2025-02-28) Table 1: hipBLASLt BF16 4096x4864x32896 at
843 TFLOP/s on MI325X and 708 on MI300X; stas00/ml-engineering's MAMF table: MI325X BF16
784.9 TFLOP/s at 13312x10240x8192.
"""

from __future__ import annotations

import pytest
from engine_helpers import gemm_tflops

from simcluster.hardware import load_profile


def test_peak_is_cus_times_rate_times_clock():
    p = load_profile("amd-mi325x")
    assert p.gpu.sm_count == 304
    assert p.gpu.sm_count * 2048 * 2.1e9 / 1e12 == pytest.approx(
        p.gpu.peak_tflops["bf16"], rel=1e-3
    )
    assert p.gpu.sm_count * 4096 * 2.1e9 / 1e12 == pytest.approx(p.gpu.peak_tflops["fp8"], rel=1e-3)
    assert p.gpu.peak_tflops == load_profile("amd-mi300x").gpu.peak_tflops
    assert p.gpu.hbm_tbps == 6.0


@pytest.mark.parametrize(
    ("profile", "m", "n", "k", "tflops"),
    [
        ("amd-mi325x", 4096, 4864, 32896, 843.0),  # AMD MAF Part 2, Table 1
        ("amd-mi300x", 4096, 4864, 32896, 708.0),  # the same table
        ("amd-mi325x", 13312, 10240, 8192, 784.9),  # stas00 MAMF
    ],
)
def test_large_bf16_gemms_run_at_the_measured_maximum(profile, m, n, k, tflops):
    assert gemm_tflops(profile, "bf16", m, n, k) == pytest.approx(tflops, rel=0.01)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_small_gemms_run_as_on_the_mi300x(precision):
    # launch-, occupancy- and tile-bound shapes on the same 304 CUs and boost clock
    for size in (256, 1024, 2048):
        assert gemm_tflops("amd-mi325x", precision, size, size, size) == pytest.approx(
            gemm_tflops("amd-mi300x", precision, size, size, size), rel=1e-9
        )


def test_power_bound_fp8_gemms_gain_the_max_achievable_ratio():
    # MAF FP8: MI325X 1519 TFLOP/s at 1464 MHz, MI300X 1273 at 1230 MHz (AMD MAF Part 2, Table 1)
    ratio = gemm_tflops("amd-mi325x", "fp8", 8192, 8192, 8192) / gemm_tflops(
        "amd-mi300x", "fp8", 8192, 8192, 8192
    )
    assert ratio == pytest.approx(1519 / 1273, rel=0.01)


def test_a_training_step_gains_at_most_the_gemms_ratio_and_fits_more():
    """The same 8-GPU Llama 3 8B step (4 layers) on both nodes: faster on the MI325X, by no more
    than its largest GEMMs' gain (843 / 708: attention, memory-bound work and the links are
    the MI300X's or barely faster), and the same peak against 256 GB instead of 192."""
    from simcluster.engine import simulate
    from simcluster.scenario import load_scenario

    sets: list[tuple[str, object]] = [("model.layers", 4)]
    runs = {
        hw: simulate(load_scenario("llama3-8b-8xh100", [*sets, ("cluster.hardware", hw)])).summary
        for hw in ("amd-mi300x", "amd-mi325x")
    }
    gain = runs["amd-mi300x"]["step_time_s"] / runs["amd-mi325x"]["step_time_s"]
    assert 1.0 < gain <= 843 / 708
    peak = {hw: s["peak_memory_bytes"]["max"] for hw, s in runs.items()}
    assert peak["amd-mi300x"] == peak["amd-mi325x"]
    assert load_profile("amd-mi325x").memory_bytes / load_profile(
        "amd-mi300x"
    ).memory_bytes == pytest.approx(256 / 192, rel=1e-3)
