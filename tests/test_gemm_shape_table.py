"""GEMM rates by shape (simcluster/gemm_shape_table.py) against XLA's measured tables.

tensorflow/tensorflow ``third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h``
(sm_90, bf16xbf16->bf16, batch 1) times single GEMMs on a 256..4096 grid of M x N x K on an
H100; ``hardware/gemm_shapes/xla-sm90.yaml`` carries it. At one FLOP count a short reduction
dimension runs slowest: 4096x4096x1024 at 677.4 TFLOP/s, 2048x4096x2048 at 715.4,
1024x4096x4096 at 738.5 (all 3.44e10 FLOP).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import write_profile

from simcluster.compute import KernelModel
from simcluster.errors import UserError
from simcluster.gemm_shape_table import load_shape_table, shipped_tables, table_dir
from simcluster.hardware import load_profile

GRID = [256, 512, 1024, 2048, 4096]
ROOT = Path(__file__).resolve().parent.parent


def _xla_rate(m: int, n: int, k: int) -> float:
    raw = yaml.safe_load((table_dir() / "xla-sm90.yaml").read_text())
    return raw["tflops"]["bf16"][GRID.index(m)][GRID.index(n)][GRID.index(k)]


def _median_at(flops: float) -> float:
    rates = [
        _xla_rate(m, n, k) for m in GRID for n in GRID for k in GRID if 2 * m * n * k == flops
    ]
    return statistics.median(rates)


def test_the_tables_are_shipped():
    assert {"xla-sm90", "xla-sm100"} <= set(shipped_tables())


def test_the_sm90_table_holds_the_published_entries():
    # the three 3.44e10-FLOP shapes quoted in the module docstring, straight from XLA's table
    assert _xla_rate(4096, 4096, 1024) == 677.4
    assert _xla_rate(2048, 4096, 2048) == 715.4
    assert _xla_rate(1024, 4096, 4096) == 738.5


@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 1024), (1024, 4096, 4096), (4096, 2048, 512), (512, 512, 512)])
def test_a_grid_shape_runs_at_its_rate_over_the_median_of_its_flops(m, n, k):
    table = load_shape_table("xla-sm90")
    expected = _xla_rate(m, n, k) / _median_at(2 * m * n * k)
    # the median is read in log space: the same value for an odd count, the geometric mean
    # of the middle two for an even one
    assert table.factor(m, n, k, "bf16") == pytest.approx(expected, rel=0.01)


def test_a_short_k_runs_slower_than_a_short_m_or_n_of_the_same_flops():
    table = load_shape_table("xla-sm90")
    short_k = table.factor(4096, 4096, 1024, "bf16")
    assert short_k < table.factor(1024, 4096, 4096, "bf16")
    assert short_k < table.factor(4096, 1024, 4096, "bf16")
    assert short_k < 0.95


def test_beyond_the_grid_a_gemm_keeps_its_short_sides_penalty():
    table = load_shape_table("xla-sm90")
    at_edge = table.factor(4096, 4096, 1024, "bf16")
    assert table.factor(16384, 8192, 1024, "bf16") == pytest.approx(at_edge)
    assert table.factor(32768, 8192, 8192, "bf16") == pytest.approx(1.0)  # 4096^3, its level's one shape


def test_fp16_reads_the_bf16_rates_and_fp8_them_at_half_the_reduction():
    # an FP8 tile's main loop over K runs in the time a 16-bit one takes over K/2 against the
    # same fixed cost: measured, cuBLAS FP8 on an H100 runs 16384 x 1024 x 8192 at 0.79-0.82 of
    # its long-K rate where BF16 keeps 0.99-1.02 (pytorch-labs/float8_experimental pull requests
    # 38 and 100), TileLang on an H800 K = 1024 at 0.73 (FP8) against 0.82 (FP16) of K = 16384
    table = load_shape_table("xla-sm90")
    assert table.factor(4096, 4096, 1024, "fp16") == table.factor(4096, 4096, 1024, "bf16")
    assert table.has("fp8")
    assert table.factor(16384, 8192, 1024, "fp8") == pytest.approx(table.factor(16384, 8192, 512, "bf16"))
    assert table.factor(16384, 8192, 1024, "fp8") < table.factor(16384, 8192, 1024, "bf16") < 1.0
    # a long reduction keeps the median's rate either way
    assert table.factor(32768, 8192, 16384, "fp8") == pytest.approx(1.0)


def test_hopper_fp8_curve_times_the_shape_factor_gives_azures_measured_rates():
    # Azure/AI-benchmarking-guide 'Azure Results/ND_H100_v5_results.md' (cuBLASLt FP8 on an H100
    # SXM, 10,000 warm-up iterations): 1024^3 274.1, 1024x2145x1024 410.7, 2048^3 1011.3, 4096^3
    # 1216.9, 8192^3 1290.1 TFLOP/s; the curve holds the median shape, so each measured shape is
    # its curve point times its own factor (within the curve's 4 digits)
    profile = load_profile("dgx-h100")
    table = load_shape_table("xla-sm90")
    curve = dict(profile.efficiency.gemm_fp8)
    measured = {(1024, 1024, 1024): 274.1, (1024, 2145, 1024): 410.7, (2048, 2048, 2048): 1011.3,
                (4096, 4096, 4096): 1216.9, (8192, 8192, 8192): 1290.1}  # fmt: skip
    for (m, n, k), published in measured.items():
        flops = 2.0 * m * n * k
        point = min(curve, key=lambda f: abs(f / flops - 1))
        assert curve[point] * table.factor(m, n, k, "fp8") * 1978.9 == pytest.approx(published, rel=0.002)


def test_the_kernel_model_multiplies_the_size_curve_by_the_shape_factor():
    profile = load_profile("dgx-h100")
    km = KernelModel(profile, "bf16")
    m, n, k = 16384, 4096, 1024
    flops = 2.0 * m * n * k
    factor = load_shape_table("xla-sm90").factor(m, n, k, "bf16")
    assert factor < 1
    plateau = 0.80 * 0.95  # the curve's top (8192^2 burst) at the sustained share
    eff = min(km.gemm_efficiency(flops) * factor, plateau * km.quantisation(m, n))
    assert km.gemm(m, n, k) - km.launch_s == pytest.approx(flops / (989.4e12 * eff))
    # without the table the same GEMM runs faster, in FP8 too (the table's 16-bit rate at K/2)
    plain = profile.model_copy(update={"efficiency": profile.efficiency.model_copy(update={"gemm_shapes": None})})
    assert KernelModel(plain, "bf16").gemm(m, n, k) < km.gemm(m, n, k)
    assert KernelModel(plain, "fp8").gemm(m, n, k) < KernelModel(profile, "fp8").gemm(m, n, k)


def test_profiles_without_a_table_are_unchanged():
    a100 = load_profile("dgx-a100")
    assert a100.efficiency.gemm_shapes is None
    km = KernelModel(a100, "bf16")
    flops = 2.0 * 4096 * 4096 * 1024
    expected = flops / (312e12 * km.gemm_efficiency(flops)) + km.launch_s
    assert km.gemm(4096, 4096, 1024) == pytest.approx(expected, rel=1e-9)


def test_an_unknown_table_is_a_one_line_error_naming_the_field():
    with pytest.raises(UserError) as err:
        load_profile("dgx-h100", patch={"efficiency": {"gemm_shapes": "xla-sm42"}})
    assert "efficiency.gemm_shapes" in str(err.value)
    assert "xla-sm90" in str(err.value)  # names the shipped ones


def test_a_malformed_table_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.yaml").write_text("grid: [256, 512]\ntflops:\n  bf16: [[1, 2], [3, 4]]\n")
    with pytest.raises(UserError) as err:
        load_profile(str(write_profile(tmp_path, {"gemm_shapes": "bad.yaml"})))
    assert "tflops.bf16 must be 2x2x2" in str(err.value)


def test_a_table_beside_the_profile_is_found(tmp_path):
    (tmp_path / "mine-table.yaml").write_text((table_dir() / "xla-sm90.yaml").read_text())
    loaded = load_profile(str(write_profile(tmp_path, {"gemm_shapes": "mine-table.yaml"})))
    assert loaded.efficiency.gemm_shapes == str(tmp_path / "mine-table.yaml")


def test_the_cli_reports_a_bad_table_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "run", str(ROOT / "scenarios" / "llama3-8b-8xh100.yaml"),
         "--set", "cluster.profile.efficiency.gemm_shapes=nope", "--out", str(tmp_path / "o")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "gemm_shapes" in lines[0] and "Traceback" not in proc.stderr


def _calibrated(rows, table=None):
    # as calibrate writes it: measured rows, and its own shape table or none (not the base's)
    profile = load_profile("dgx-h100")
    eff = profile.efficiency.model_copy(update={"gemm_shapes": table})
    return profile.model_copy(update={"measured": {**profile.measured, "gemm": rows}, "efficiency": eff})


def test_a_calibrated_profile_runs_a_timed_shape_at_its_own_time():
    # two shapes of the same FLOPs timed apart, as calibrate --scenario records them: each keeps
    # its own time (before, both took the faster one, the FLOP curve's envelope)
    rows = [
        {"dtype": "bf16", "m": 4096, "n": 4096, "k": 1024, "time_s": 60e-6},
        {"dtype": "bf16", "m": 1024, "n": 4096, "k": 4096, "time_s": 48e-6},
    ]
    km = KernelModel(_calibrated(rows), "bf16")
    assert km.gemm(4096, 4096, 1024) - km.launch_s == pytest.approx(60e-6)
    assert km.gemm(1024, 4096, 4096) - km.launch_s == pytest.approx(48e-6)
    # a shape it did not time reads the measured size curve, the median of the shapes timed
    # at its FLOP count (the two efficiencies' mean here), with no shape table
    flops = 2.0 * 4096 * 4096 * 1024
    median_eff = (flops / 60e-6 + flops / 48e-6) / 2 / 989.4e12
    assert km.gemm(2048, 4096, 2048) - km.launch_s == pytest.approx(flops / (989.4e12 * median_eff))
    assert km.gemm(4096, 4096, 1024, count=3) - km.launch_s == pytest.approx(180e-6)


def test_a_calibrated_cube_gives_its_own_shape_factors():
    # calibrate times a cube of shapes and writes it inline as the profile's table: a shape it
    # did not time runs at its FLOP count's measured median times its own table's factor
    grid = [64, 128, 256]

    def rate(m, n, k):  # TFLOP/s, a short K slow as on the H100 table
        return 50.0 * (m * n * k / 256**3) ** 0.2 * (k / 256) ** 0.3

    rows, nested = [], []
    for m in grid:
        nested.append([[rate(m, n, k) for k in grid] for n in grid])
        for n in grid:
            for k in grid:
                rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "time_s": 2.0 * m * n * k / rate(m, n, k) / 1e12})
    table = {"grid": grid, "tflops": {"bf16": nested}}
    km = KernelModel(_calibrated(rows, table), "bf16")
    timed = km.gemm(256, 256, 64) - km.launch_s
    assert timed == pytest.approx(2.0 * 256 * 256 * 64 / rate(256, 256, 64) / 1e12)
    # 512 x 256 x 64 was not timed: beyond the cube, at its edge (256, 256, 64)'s factor
    m, n, k = 512, 256, 64
    factor = km._shapes.factor(m, n, k, "bf16")
    assert factor == pytest.approx(km._shapes.factor(256, 256, 64, "bf16")) and factor < 1
    eff = km.gemm_efficiency(2.0 * m * n * k) * factor
    assert km.gemm(m, n, k) - km.launch_s == pytest.approx(2.0 * m * n * k / (989.4e12 * eff))


def test_an_inline_table_is_checked_when_the_profile_loads(tmp_path):
    bad = {"grid": [64, 128], "tflops": {"bf16": [[1, 2], [3, 4]]}}
    with pytest.raises(UserError) as err:
        load_profile(str(write_profile(tmp_path, {"gemm_shapes": bad})))
    assert "inline GEMM shape table" in str(err.value) and "2x2x2" in str(err.value)


def test_calibrate_writes_the_largest_cube_it_timed():
    from calibrate.profile_writer import Measurements, _shape_cube

    def row(m, n, k):
        return {"dtype": "bf16", "m": m, "n": n, "k": k, "time_s": 1.0, "tflops": float(m + n + k)}

    cube = [row(m, n, k) for m in (32, 64) for n in (32, 64) for k in (32, 64)]
    squares = [row(s, s, s) for s in (128, 256)]  # the sweep's larger squares, timed alone
    table = _shape_cube(Measurements(gemm=cube + squares), "bf16")
    assert table == {"grid": [32, 64], "tflops": {"bf16": [[[96.0, 128.0], [128.0, 160.0]], [[128.0, 160.0], [160.0, 192.0]]]}}
    # one missing corner and there is no cube of two sizes left
    assert _shape_cube(Measurements(gemm=cube[:-1] + squares), "bf16") is None


# EleutherAI/cookbook sizing/results/gemm_data/mm/ksweep_low and ksweep_high, a100.out (commit
# 27dff48; Anthony et al., arXiv 2401.14489): fp16 torch.matmul on an A100 80GB, M x N fixed and
# K swept; every K that is a multiple of 256 (M, N, K, TFLOP/s)
A100_K_SWEEP = [
    (27648, 4096, 256, 227.176),
    (2304, 4096, 1536, 217.616),
    (2304, 4096, 1792, 157.689),
    (2304, 4096, 2048, 210.421),
    (2304, 4096, 2304, 228.951),
    (2304, 4096, 2560, 211.43),
    (2304, 4096, 2816, 219.766),
    (2304, 4096, 3072, 234.955),
    (2304, 4096, 3328, 218.923),
    (2304, 4096, 3584, 225.804),
    (2304, 4096, 3840, 236.342),
    (2304, 4096, 4096, 223.613),
    (2304, 4096, 4352, 230.132),
    (2304, 4096, 4608, 239.168),
    (2304, 4096, 4864, 226.562),
    (2304, 4096, 5120, 223.642),
    (2304, 4096, 5376, 230.314),
    (2304, 4096, 5632, 228.595),
    (2304, 4096, 5888, 225.986),
    (2304, 4096, 6144, 231.572),
]


def test_a100_gemms_follow_the_measured_k_sweeps():
    # the A100 carries no shape table: these sweeps show no short-K penalty down to K = 256 at
    # large M x N, so its size curve alone must already hold them (median within 5%, every
    # point within 20%: cuBLAS's kernel choice moves single K values, e.g. 1792 at 0.82x)
    km = KernelModel(load_profile("dgx-a100"), "fp16")
    ratios = []
    for m, n, k, tflops in A100_K_SWEEP:
        modelled = 2.0 * m * n * k / (km.gemm(m, n, k) - km.launch_s) / 1e12
        ratios.append(tflops / modelled)
    assert 0.95 <= statistics.median(ratios) <= 1.05, ratios
    assert all(0.8 <= r <= 1.2 for r in ratios), ratios
