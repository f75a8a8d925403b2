"""The slowest GPU of a synchronous job (simcluster/variability.py)."""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import run

from simcluster.compute import KernelModel
from simcluster.hardware import load_profile
from simcluster.variability import expected_max_normal, slowest_gpu_slowdown


@pytest.mark.parametrize(
    "n, expected",
    # expected largest of n standard normal samples: Harter (1961), "Expected values of normal
    # order statistics", Biometrika 48; n = 2 is exactly 1/sqrt(pi)
    [(2, 0.56419), (3, 0.84628), (5, 1.16296), (10, 1.53875), (100, 2.50759), (1000, 3.24144)],
)
def test_expected_max_matches_the_tables_of_normal_order_statistics(n, expected):
    assert expected_max_normal(n) == pytest.approx(expected, abs=2e-5)


def test_one_gpu_or_no_spread_is_no_slowdown():
    assert expected_max_normal(1) == 0.0
    assert slowest_gpu_slowdown(0.011, 1) == 1.0
    assert slowest_gpu_slowdown(0.0, 4096) == 1.0
    with pytest.raises(ValueError):
        expected_max_normal(0)


def test_slowdown_grows_with_the_job():
    factors = [slowest_gpu_slowdown(0.011, n) for n in (8, 64, 512, 4096)]
    assert factors == sorted(factors) and factors[0] > 1.0
    assert factors[-1] == pytest.approx(1 + 0.011 * expected_max_normal(4096))


def test_shipped_profiles_state_the_spread_and_its_source():
    for name in ("dgx-a100", "dgx-h100", "aws-p5", "dgx-h200", "hgx-h800", "dgx-b200"):
        prof = load_profile(name)
        assert prof.gpu.speed_spread == 0.011
        assert "Sinha" in prof.sources["gpu.speed_spread"]


def _run(spread: float):
    raw = make_scenario(
        # no SM interference: its slowdown of memory-bound kernels depends on where collectives
        # fall in time, which the slowest-GPU factor moves
        cluster={
            "hardware": "dgx-h100", "gpus": 8,
            "profile": {"gpu": {"speed_spread": spread}, "efficiency": {"collective_sms": 0}},
        },
        training={"seq_len": 2048, "micro_batch": 1, "global_batch": 16, "recompute": "none"},
    )
    return run(raw)


def test_tensor_core_work_of_the_slowest_gpu_and_nothing_else():
    """8 GPUs at a 2% spread: GEMMs and attention take 1 + 0.02 * 1.42360 as long (E[max of 8]),
    memory-bound kernels, the loss and the optimizer as long as on a typical GPU."""
    even, spread = _run(0.0), _run(0.02)
    factor = 1 + 0.02 * 1.42360
    assert spread.summary["slowest_gpu"] == {
        "speed_spread": 0.02,
        "tensor_core_slowdown": pytest.approx(factor, rel=1e-5),
    }
    assert even.summary["slowest_gpu"]["tensor_core_slowdown"] == 1.0
    a = even.summary["time_breakdown_s"]["per_stage"][0]
    b = spread.summary["time_breakdown_s"]["per_stage"][0]
    # kernel launch gaps are not clock-bound: the parts grow by less than the factor
    assert 1.0 < b["gemm"] / a["gemm"] <= factor
    assert 1.0 < b["attention"] / a["attention"] <= factor
    for part in ("memory", "loss", "optimizer"):
        assert b[part] == pytest.approx(a[part], rel=1e-9)
    assert spread.summary["step_time_s"] > even.summary["step_time_s"]


def test_kernel_times_scale_by_the_factor_except_the_launch_gap():
    prof = load_profile("dgx-h100")
    typical, slowest = KernelModel(prof, "bf16"), KernelModel(prof, "bf16", slowdown=1.05)
    launch = typical.launch_s
    gemm = (slowest.gemm(8192, 8192, 8192) - launch) / (typical.gemm(8192, 8192, 8192) - launch)
    assert gemm == pytest.approx(1.05, rel=1e-12)
    args = (1, 4096, 4096, 32, 128, 128, True, False)
    attn = (slowest.attention(*args) - launch) / (typical.attention(*args) - launch)
    assert attn == pytest.approx(1.05, rel=1e-12)
    assert slowest.memory(1e9) == typical.memory(1e9)


def test_calibrated_spread_is_the_population_deviation_over_the_mean():
    from calibrate.spread import reference_row, spread

    assert spread([100.0, 110.0]) == pytest.approx(5.0 / 105.0)
    assert spread([100.0]) == 0.0
    rows = [
        {"m": 64, "n": 64, "k": 64, "dtype": "fp32", "tflops": 1.0},
        {"m": 256, "n": 256, "k": 256, "dtype": "bf16", "tflops": 2.0},
        {"m": 128, "n": 128, "k": 128, "dtype": "bf16", "tflops": 3.0},
    ]
    assert reference_row(rows)["m"] == 256  # the largest bf16 GEMM


def test_scenario_short_key_sets_the_spread():
    """``cluster.speed_spread`` overrides the profile's (0: a hand-binned cluster)."""
    raw = make_scenario(cluster={"hardware": "dgx-h100", "gpus": 8, "speed_spread": 0.0})
    assert run(raw).summary["slowest_gpu"]["tensor_core_slowdown"] == 1.0
    raw["cluster"]["speed_spread"] = 0.03
    assert run(raw).summary["slowest_gpu"]["tensor_core_slowdown"] == pytest.approx(1 + 0.03 * 1.42360, rel=1e-5)
